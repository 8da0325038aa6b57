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
// Ledger writes happen on one writer goroutine behind a bounded queue, so a slow or failing
// ledger never holds up a request: when the queue is full the record is dropped, counted in
// ctxproxy_ledger_dropped_total and logged (the first time, then every 1000th); a failed write is
// counted in ctxproxy_ledger_errors_total and logged, and the Recorder keeps serving.
type Recorder struct {
	prices  atomic.Pointer[Prices]
	metrics *Metrics
	ledger  Ledger
	log     *zap.Logger
	timeout time.Duration

	mu     sync.RWMutex // guards closed against sends on the closed queue
	closed bool
	queue  chan Call
	done   chan struct{}

	dropped atomic.Int64
	failed  atomic.Int64
}

// RecorderOption configures a Recorder.
type RecorderOption func(*Recorder)

// WithQueueSize sets how many records may wait for the ledger (default 8192).
func WithQueueSize(n int) RecorderOption {
	return func(r *Recorder) {
		if n > 0 {
			r.queue = make(chan Call, n)
		}
	}
}

// WithAppendTimeout bounds each ledger write (default 5s).
func WithAppendTimeout(d time.Duration) RecorderOption {
	return func(r *Recorder) {
		if d > 0 {
			r.timeout = d
		}
	}
}

// NewRecorder starts a Recorder. Any of prices, metrics, ledger and log may be nil: no prices
// marks every call price-unknown, no metrics or ledger skips them. Call Close to flush.
func NewRecorder(prices *Prices, metrics *Metrics, ledger Ledger, log *zap.Logger, opts ...RecorderOption) *Recorder {
	if log == nil {
		log = zap.NewNop()
	}
	r := &Recorder{metrics: metrics, ledger: ledger, log: log, timeout: 5 * time.Second,
		queue: make(chan Call, 8192), done: make(chan struct{})}
	for _, o := range opts {
		o(r)
	}
	r.prices.Store(prices)
	go r.write()
	return r
}

// SetPrices replaces the prices (e.g. after editing prices.yaml); also the metrics' model labels.
func (r *Recorder) SetPrices(p *Prices) {
	r.prices.Store(p)
	if r.metrics != nil {
		r.metrics.SetPrices(p)
	}
}

// Prices is the prices in use.
func (r *Recorder) Prices() *Prices { return r.prices.Load() }

// Record prices c, counts it and queues it for the ledger; it returns the priced call.
// A zero c.Time is set to now. It never blocks on the ledger.
func (r *Recorder) Record(ctx context.Context, c Call) Call {
	if c.Time.IsZero() {
		c.Time = time.Now()
	}
	r.prices.Load().Price(&c)
	if r.metrics != nil {
		r.metrics.ObserveCall(&c)
	}
	if r.ledger == nil {
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
	if r.metrics != nil {
		r.metrics.LedgerDropped()
	}
	if n%1000 == 1 {
		r.log.Warn("ledger record dropped", zap.String("reason", why), zap.Int64("dropped_total", n),
			zap.String("tenant", c.Tenant), zap.String("request_id", c.RequestID))
	}
}

func (r *Recorder) write() {
	defer close(r.done)
	for c := range r.queue {
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		err := r.ledger.Append(ctx, c)
		cancel()
		if err != nil {
			n := r.failed.Add(1)
			if r.metrics != nil {
				r.metrics.LedgerError()
			}
			r.log.Error("ledger write failed", zap.Error(err), zap.Int64("failed_total", n),
				zap.String("tenant", c.Tenant), zap.String("request_id", c.RequestID))
		}
	}
}

// Dropped is the number of records dropped (queue full or recorder closed).
func (r *Recorder) Dropped() int64 { return r.dropped.Load() }

// Failed is the number of records the ledger refused.
func (r *Recorder) Failed() int64 { return r.failed.Load() }

// Close stops taking records and waits until the queued ones are written or ctx is done.
// It does not close the ledger, which report queries may still use.
func (r *Recorder) Close(ctx context.Context) error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
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
