package tokens

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Recorder prices each upstream call, counts it in the metrics and hands it to the ledger.
//
// Ledger writes happen on one writer goroutine behind a bounded queue, so a slow or failing
// ledger never holds up a request; what has queued up meanwhile goes to a BatchLedger in one
// write: when the queue is full the record is dropped, counted in
// ctxproxy_ledger_dropped_total and logged (the first time, then every 1000th); a failed write
// (full disk, database down) is counted in ctxproxy_ledger_errors_total and logged, and the
// Recorder keeps serving.
//
// Build it as a literal or with NewRecorder; set the fields before the first Record and do not
// change them afterwards (use SetPrices to swap prices). Call Close before closing the Ledger,
// or queued records are lost.
type Recorder struct {
	Prices  *Prices     // nil: every call is price-unknown
	Metrics *Metrics    // nil: no metrics
	Ledger  Ledger      // nil: no ledger
	Log     *zap.Logger // nil: no logging

	QueueSize     int           // records that may wait for the ledger, besides the batch in a write; default 8192
	AppendTimeout time.Duration // bound on each ledger write (one batch); default 5s
	// FlushDelay is how long the writer lets records gather before a batch write (BatchLedger
	// only), so a busy proxy pays one wake-up and one write per delay, not per call; default
	// 5ms, negative for none. Close writes what is queued without waiting.
	FlushDelay time.Duration

	prices atomic.Pointer[Prices] // set by SetPrices, wins over Prices

	startOnce sync.Once
	mu        sync.RWMutex // guards closed against sends on the closed queue
	closed    bool
	queue     chan Call
	closing   chan struct{} // closed by Close: the writer stops gathering
	done      chan struct{}

	dropped atomic.Int64
	failed  atomic.Int64
}

// RecorderOption configures NewRecorder.
type RecorderOption func(*Recorder)

// WithQueueSize sets Recorder.QueueSize.
func WithQueueSize(n int) RecorderOption { return func(r *Recorder) { r.QueueSize = n } }

// WithFlushDelay sets Recorder.FlushDelay.
func WithFlushDelay(d time.Duration) RecorderOption { return func(r *Recorder) { r.FlushDelay = d } }

// WithAppendTimeout sets Recorder.AppendTimeout.
func WithAppendTimeout(d time.Duration) RecorderOption {
	return func(r *Recorder) { r.AppendTimeout = d }
}

// NewRecorder is &Recorder{Prices: prices, Metrics: metrics, Ledger: ledger, Log: log} with opts.
func NewRecorder(prices *Prices, metrics *Metrics, ledger Ledger, log *zap.Logger, opts ...RecorderOption) *Recorder {
	r := &Recorder{Prices: prices, Metrics: metrics, Ledger: ledger, Log: log}
	for _, o := range opts {
		o(r)
	}
	r.start()
	return r
}

func (r *Recorder) start() {
	r.startOnce.Do(func() {
		if r.Log == nil {
			r.Log = zap.NewNop()
		}
		if r.QueueSize <= 0 {
			r.QueueSize = 8192
		}
		if r.AppendTimeout <= 0 {
			r.AppendTimeout = 5 * time.Second
		}
		if r.FlushDelay == 0 {
			r.FlushDelay = 5 * time.Millisecond
		}
		r.queue = make(chan Call, r.QueueSize)
		r.closing = make(chan struct{})
		r.done = make(chan struct{})
		if r.Ledger == nil {
			close(r.done)
			return
		}
		go r.write()
	})
}

// SetPrices replaces the prices (e.g. after editing prices.yaml) and the metrics' model labels.
func (r *Recorder) SetPrices(p *Prices) {
	r.prices.Store(p)
	if r.Metrics != nil {
		r.Metrics.SetModels(p.Models())
	}
}

// CurrentPrices is the prices in use.
func (r *Recorder) CurrentPrices() *Prices {
	if p := r.prices.Load(); p != nil {
		return p
	}
	return r.Prices
}

// Record prices c, counts it and queues it for the ledger; it returns the priced call.
// A zero c.Time is set to now. It never blocks on the ledger.
func (r *Recorder) Record(ctx context.Context, c Call) Call {
	r.start()
	if c.Time.IsZero() {
		c.Time = time.Now()
	}
	switch {
	case c.Shadow != nil:
		r.CurrentPrices().PriceShadow(&c)
	case c.CountTokens == nil:
		r.CurrentPrices().Price(&c)
	case c.CompactedInputTokens != 0:
		r.CurrentPrices().PriceCompactionMeasure(&c)
	}
	if r.Metrics != nil && c.Shadow == nil { // the policy lab's calls count in no request metric
		r.Metrics.ObserveCall(&c)
	}
	if r.Ledger == nil {
		return c
	}
	r.mu.RLock()
	if r.closed {
		r.mu.RUnlock()
		r.drop(c, "recorder closed")
		return c
	}
	select {
	case r.queue <- c:
		r.mu.RUnlock()
	default:
		r.mu.RUnlock()
		r.drop(c, "ledger queue full")
	}
	return c
}

func (r *Recorder) drop(c Call, why string) {
	n := r.dropped.Add(1)
	if r.Metrics != nil {
		r.Metrics.LedgerDropped()
	}
	if n%1000 == 1 {
		r.Log.Warn("ledger record dropped", zap.String("reason", why), zap.Int64("dropped_total", n),
			zap.String("tenant", c.Tenant), zap.String("request_id", c.RequestID))
	}
}

// maxBatch bounds the records handed to the ledger in one write.
const maxBatch = 256

// write is the writer goroutine. It stores what is queued (up to maxBatch) in one ledger write,
// so a busy proxy pays one write(2) or INSERT per batch, not per call. With a FlushDelay it lets
// records gather that long before each write and, while every delay brings some, keeps sleeping
// on its timer instead of waiting on the queue: a record sent then readies no goroutine, which
// on a request's path costs a wake-up of another CPU. A delay that brings none sends it back to
// waiting on the queue, so an idle proxy's writer sleeps.
func (r *Recorder) write() {
	defer close(r.done)
	limit := 1 // a plain Ledger takes one record at a time, off the queue only as it writes it
	if _, ok := r.Ledger.(BatchLedger); ok {
		limit = maxBatch
	}
	gathering := limit > 1 && r.FlushDelay > 0
	batch := make([]Call, 0, limit)
	for c := range r.queue {
		batch = append(batch[:0], c)
		for {
			if gathering && len(r.queue) < limit-len(batch) {
				r.gather()
			}
			batch = r.drain(batch, limit)
			if len(batch) == 0 {
				break
			}
			r.store(batch)
			clear(batch) // no record outlives its write
			batch = batch[:0]
			if !gathering {
				break
			}
		}
	}
}

// drain appends to batch what the queue holds, without waiting, up to limit records.
func (r *Recorder) drain(batch []Call, limit int) []Call {
	for len(batch) < limit {
		select {
		case c, ok := <-r.queue:
			if !ok {
				return batch
			}
			batch = append(batch, c)
		default:
			return batch
		}
	}
	return batch
}

// gather waits FlushDelay, or until Close.
func (r *Recorder) gather() {
	t := time.NewTimer(r.FlushDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.closing:
	}
}

// store writes batch to the ledger, counting and logging each record it failed to store.
func (r *Recorder) store(batch []Call) {
	if bl, ok := r.Ledger.(BatchLedger); ok {
		ctx, cancel := context.WithTimeout(context.Background(), r.AppendTimeout)
		n, err := bl.AppendBatch(ctx, batch)
		cancel()
		switch {
		case err != nil && n >= len(batch):
			// Every line stored; the ledger's own upkeep failed (its rollup fold, retried later).
			r.Log.Warn("ledger write: lines stored, but", zap.Error(err), zap.Int("lines", n))
		case err != nil:
			for i := max(n, 0); i < len(batch); i++ {
				r.failedOne(&batch[i], err)
			}
		}
		return
	}
	for i := range batch {
		ctx, cancel := context.WithTimeout(context.Background(), r.AppendTimeout)
		err := r.Ledger.Append(ctx, batch[i])
		cancel()
		if err != nil {
			r.failedOne(&batch[i], err)
		}
	}
}

func (r *Recorder) failedOne(c *Call, err error) {
	n := r.failed.Add(1)
	if r.Metrics != nil {
		r.Metrics.LedgerError()
	}
	r.Log.Error("ledger write failed", zap.Error(err), zap.Int64("failed_total", n),
		zap.String("tenant", c.Tenant), zap.String("request_id", c.RequestID))
}

// Dropped is the number of records dropped (queue full or recorder closed).
func (r *Recorder) Dropped() int64 { return r.dropped.Load() }

// Failed is the number of records the ledger refused.
func (r *Recorder) Failed() int64 { return r.failed.Load() }

// Close stops taking records and waits until the queued ones are written or ctx is done.
// It does not close the Ledger, which report queries may still use.
func (r *Recorder) Close(ctx context.Context) error {
	r.start()
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.closing)
		close(r.queue)
	}
	r.mu.Unlock()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("flush ledger: %d records pending: %w", len(r.queue), ctx.Err())
	}
}
