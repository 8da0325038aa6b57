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

// batcher gathers ended spans into batches and exports them, as the SDK's
// batch span processor does and configured by the same OTEL_BSP_* variables,
// with two differences that are its reason to be. A span joins its batch
// when it ends, on the request's goroutine, in the form the exporter sends
// (OTLP's: encoded), so no span is kept alive until its export and the
// record is reused at once. And the batch goroutine is woken when a batch is
// full, on the schedule delay, or to flush, not for every span. A span that
// finds OTEL_BSP_MAX_QUEUE_SIZE spans waiting is dropped (counted, reported
// at the next export).
type batcher struct {
	exp exporter
	cfg batchConfig

	mu      sync.Mutex
	cur     batch   // filling
	ready   []batch // full, waiting for the goroutine
	free    []batch
	waiting int // spans in cur and ready
	wake    chan struct{}

	flush   chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	stopped atomic.Bool
	dropped atomic.Int64
}

// exporter sends batches of ended spans: OTLP's (otlpExporter) or any of the
// SDK's exporters (sdkExporter, a test's or a benchmark's).
type exporter interface {
	newBatch() batch
	export(ctx context.Context, b batch) error
	shutdown(ctx context.Context) error
}

// batch is spans as an exporter sends them.
type batch interface {
	// add takes what it needs of r, whose attributes are final: r is reused
	// when add returns.
	add(r *record)
	len() int
	reset()
}

// batchConfig is OTEL_BSP_*: the delay between two exports, an export's
// timeout, how many spans may wait and how many an export sends.
type batchConfig struct {
	delay, timeout   time.Duration
	maxQueue, maxOut int
}

func newBatcher(exp exporter, cfg batchConfig) *batcher {
	b := &batcher{
		exp: exp, cfg: cfg,
		cur:   exp.newBatch(),
		wake:  make(chan struct{}, 1),
		flush: make(chan chan struct{}),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go b.run()
	return b
}

// scope is the instrumentation scope of every span.
var scope = instrumentation.Scope{Name: "github.com/ctxproxy/ctxproxy"}

// add puts an ended span in the batch being filled. r is free when it returns.
func (b *batcher) add(r *record) {
	if b.stopped.Load() {
		return
	}
	b.mu.Lock()
	if b.waiting >= b.cfg.maxQueue {
		b.mu.Unlock()
		b.dropped.Add(1)
		return
	}
	b.cur.add(r)
	b.waiting++
	full := b.cur.len() >= b.cfg.maxOut
	if full {
		b.ready = append(b.ready, b.cur)
		b.cur = b.freeBatch()
	}
	b.mu.Unlock()
	if full {
		select {
		case b.wake <- struct{}{}:
		default: // already woken
		}
	}
}

// freeBatch is an empty batch; b.mu is held.
func (b *batcher) freeBatch() batch {
	if n := len(b.free); n > 0 {
		fb := b.free[n-1]
		b.free = b.free[:n-1]
		return fb
	}
	return b.exp.newBatch()
}

func (b *batcher) run() {
	defer close(b.done)
	timer := time.NewTimer(b.cfg.delay)
	defer timer.Stop()
	for {
		var ack chan struct{}
		all := true // the schedule, a flush and the stop take the batch being filled too
		select {
		case <-b.wake:
			all = false
		case <-timer.C:
		case ack = <-b.flush:
		case <-b.stop:
			b.exportWaiting(true)
			return
		}
		b.exportWaiting(all)
		if ack != nil {
			close(ack)
		}
		timer.Reset(b.cfg.delay)
	}
}

// exportWaiting exports the full batches, and with all the one being filled.
func (b *batcher) exportWaiting(all bool) {
	b.mu.Lock()
	if all && b.cur.len() > 0 {
		b.ready = append(b.ready, b.cur)
		b.cur = b.freeBatch()
	}
	out := b.ready
	b.ready = nil
	for _, o := range out {
		b.waiting -= o.len()
	}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.timeout)
	defer cancel()
	for _, o := range out {
		if err := b.exp.export(ctx, o); err != nil {
			otel.Handle(err)
		}
		o.reset()
	}
	b.mu.Lock()
	b.free = append(b.free, out...)
	b.mu.Unlock()
	if n := b.dropped.Swap(0); n > 0 {
		otel.Handle(fmt.Errorf("traces: %d spans dropped, the export queue (OTEL_BSP_MAX_QUEUE_SIZE %d) was full", n, b.cfg.maxQueue))
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

// Shutdown exports what is waiting and stops the exporter; spans ended
// after it are dropped.
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
	exp sdktrace.SpanExporter
	res *resource.Resource
}

type sdkBatch struct {
	res   *resource.Resource
	spans []sdktrace.ReadOnlySpan
}

func (s *sdkBatch) add(r *record) {
	s.spans = append(s.spans, tracetest.SpanStub{
		Name: r.name, SpanContext: r.sc, Parent: r.parent, SpanKind: r.kind,
		StartTime: r.start, EndTime: r.end, Attributes: decodeAttrs(r.attrs), DroppedAttributes: r.dropped,
		Status: r.status, Resource: s.res, InstrumentationScope: scope,
	}.Snapshot())
}

func (s *sdkBatch) len() int { return len(s.spans) }
func (s *sdkBatch) reset()   { clear(s.spans); s.spans = s.spans[:0] }

func (e *sdkExporter) newBatch() batch { return &sdkBatch{res: e.res} }

func (e *sdkExporter) export(ctx context.Context, b batch) error {
	return e.exp.ExportSpans(ctx, b.(*sdkBatch).spans)
}

func (e *sdkExporter) shutdown(ctx context.Context) error { return e.exp.Shutdown(ctx) }
