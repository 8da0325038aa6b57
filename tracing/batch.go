package tracing

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// batcher queues ended spans and exports them in batches, as the SDK's batch
// span processor does and configured by the same OTEL_BSP_* variables, but
// without waking its goroutine for every span: a span is appended under a
// lock, and the goroutine is woken when a batch is full, on the schedule
// delay, or to flush. A span that finds the queue full is dropped (counted).
type batcher struct {
	exp    exporter
	cfg    batchConfig
	limits spanLimits

	mu    sync.Mutex
	queue []*record
	spare []*record // the queue's other buffer, while not being exported
	full  chan struct{}

	flush   chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	stopped atomic.Bool
	dropped atomic.Int64
}

// exporter sends a batch of ended spans: OTLP's (otlpExporter) or any of
// the SDK's exporters (sdkExporter, a test's or a benchmark's).
type exporter interface {
	export(ctx context.Context, rs []*record) error
	shutdown(ctx context.Context) error
}

// batchConfig is OTEL_BSP_*: the delay between two exports, an export's
// timeout, the queue's and a batch's size.
type batchConfig struct {
	delay, timeout   time.Duration
	maxQueue, maxOut int
}

func newBatcher(exp exporter, cfg batchConfig, limits spanLimits) *batcher {
	b := &batcher{
		exp: exp, cfg: cfg, limits: limits,
		queue: make([]*record, 0, cfg.maxQueue),
		spare: make([]*record, 0, cfg.maxQueue),
		full:  make(chan struct{}, 1),
		flush: make(chan chan struct{}),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go b.run()
	return b
}

// scope is the instrumentation scope of every span.
var scope = instrumentation.Scope{Name: "github.com/ctxproxy/ctxproxy"}

// add queues an ended span.
func (b *batcher) add(r *record) {
	if b.stopped.Load() {
		return
	}
	b.mu.Lock()
	if len(b.queue) >= b.cfg.maxQueue {
		b.mu.Unlock()
		b.dropped.Add(1)
		return
	}
	b.queue = append(b.queue, r)
	n := len(b.queue)
	b.mu.Unlock()
	if n >= b.cfg.maxOut {
		select {
		case b.full <- struct{}{}:
		default: // already woken
		}
	}
}

func (b *batcher) run() {
	defer close(b.done)
	timer := time.NewTimer(b.cfg.delay)
	defer timer.Stop()
	for {
		var ack chan struct{}
		select {
		case <-b.full:
		case <-timer.C:
		case ack = <-b.flush:
		case <-b.stop:
			b.exportQueued()
			return
		}
		b.exportQueued()
		if ack != nil {
			close(ack)
		}
		timer.Reset(b.cfg.delay)
	}
}

// exportQueued exports every span queued, a batch at a time.
func (b *batcher) exportQueued() {
	b.mu.Lock()
	out := b.queue
	b.queue, b.spare = b.spare, nil
	b.mu.Unlock()
	for i := 0; i < len(out); i += b.cfg.maxOut {
		b.export(out[i:min(i+b.cfg.maxOut, len(out))])
	}
	clear(out) // the records go with the batch
	b.mu.Lock()
	b.spare = out[:0]
	b.mu.Unlock()
	if n := b.dropped.Swap(0); n > 0 {
		otel.Handle(fmt.Errorf("traces: %d spans dropped, the export queue (OTEL_BSP_MAX_QUEUE_SIZE %d) was full", n, b.cfg.maxQueue))
	}
}

// export sends one batch, each span's attributes as the SDK would have kept
// them: de-duplicated (the last value of a key wins), within the limits.
func (b *batcher) export(rs []*record) {
	for _, r := range rs {
		r.kv, r.dropped = b.limits.apply(dedupe(r.kv))
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.timeout)
	defer cancel()
	if err := b.exp.export(ctx, rs); err != nil {
		otel.Handle(err)
	}
}

// Flush exports every span ended so far.
func (b *batcher) Flush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case b.flush <- ack:
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown exports what is queued and stops the exporter; spans ended after
// it are dropped.
func (b *batcher) Shutdown(ctx context.Context) error {
	if b.stopped.Swap(true) {
		return nil
	}
	close(b.stop)
	select {
	case <-b.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.exp.shutdown(ctx)
}

// sdkExporter hands spans to one of the SDK's exporters, as the SDK's own
// snapshots (tracetest's SpanStub is their public constructor).
type sdkExporter struct {
	exp   sdktrace.SpanExporter
	res   *resource.Resource
	spans []sdktrace.ReadOnlySpan
}

func (e *sdkExporter) export(ctx context.Context, rs []*record) error {
	e.spans = e.spans[:0]
	for _, r := range rs {
		e.spans = append(e.spans, tracetest.SpanStub{
			Name: r.name, SpanContext: r.sc, Parent: r.parent, SpanKind: r.kind,
			StartTime: r.start, EndTime: r.end, Attributes: r.kv, DroppedAttributes: r.dropped, Status: r.status,
			Resource: e.res, InstrumentationScope: scope,
		}.Snapshot())
	}
	err := e.exp.ExportSpans(ctx, e.spans)
	clear(e.spans)
	return err
}

func (e *sdkExporter) shutdown(ctx context.Context) error { return e.exp.Shutdown(ctx) }
