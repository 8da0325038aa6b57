package tracing

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// A span is recorded here, not by the SDK's TracerProvider: the SDK's span
// is an allocation, its attributes a growing slice and a map to de-duplicate
// them at its end, then a snapshot kept until its batch is exported and a
// wake of the batch goroutine; for a request's two spans that was about a
// third of what tracing every request cost the proxy. A record is reused,
// filled in place, and at its end encoded into its batch (batch.go) and
// reused again. The SDK's pieces are kept where they are not per span: its
// samplers decide, its OTLP clients upload, and its exporters can be given
// the spans (a test's).

// record is one sampled span from its start to its end. It belongs to the
// request's goroutine, which hands it to the batcher and back to its pool at
// End; gen tells a Span that its record has moved on.
type record struct {
	t      *Tracer
	sc     trace.SpanContext
	parent trace.SpanContext
	name   string
	kind   trace.SpanKind
	start  time.Time
	end    time.Time
	status sdktrace.Status
	kv     []attribute.KeyValue
	// dropped counts the attributes the limits left out, set at the end.
	dropped int
	gen     atomic.Uint64        // odd while the span is open
	buf     []attribute.KeyValue // the inline array, which kv starts as
	pool    *sync.Pool
}

// A chat span records 21 attributes on a usual reply (a threaded request, a
// transformation or an error one more each; a tenant's content two, and kv
// grows), a server or memory span up to 6: a record carries an array of the
// size its kind needs.
type (
	chatRecord struct {
		record
		arr [24]attribute.KeyValue
	}
	smallRecord struct {
		record
		arr [6]attribute.KeyValue
	}
)

var (
	chatRecords  = sync.Pool{New: func() any { c := new(chatRecord); c.buf = c.arr[:]; return &c.record }}
	smallRecords = sync.Pool{New: func() any { c := new(smallRecord); c.buf = c.arr[:]; return &c.record }}
)

func newRecord(chat bool) *record {
	pool := &smallRecords
	if chat {
		pool = &chatRecords
	}
	r := pool.Get().(*record)
	r.pool = pool
	r.kv = r.buf[:0]
	r.gen.Add(1) // open
	return r
}

// free returns r to its pool, every reference it held cleared.
func (r *record) free() {
	r.gen.Add(1) // closed: a Span still holding r ignores every call
	clear(r.kv)
	if len(r.kv) > 0 && &r.kv[0] != &r.buf[0] { // kv outgrew the array, which holds its first attributes
		clear(r.buf)
	}
	buf, pool, gen := r.buf, r.pool, r.gen.Load()
	*r = record{buf: buf}
	r.gen.Store(gen)
	pool.Put(r)
}

// start begins the span name of kind under ctx's span, if the sampler
// samples it: the returned context carries the new span's context either
// way (a span left out is still the parent its children's sampler sees).
func (t *Tracer) start(ctx context.Context, name string, kind trace.SpanKind) (context.Context, *record) {
	parent := trace.SpanContextFromContext(ctx)
	tid := parent.TraceID()
	if !tid.IsValid() {
		tid = newTraceID()
	}
	res := t.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: tid, Name: name, Kind: kind})
	cfg := trace.SpanContextConfig{TraceID: tid, SpanID: newSpanID(), TraceState: res.Tracestate}
	sampled := res.Decision == sdktrace.RecordAndSample
	if sampled {
		cfg.TraceFlags = parent.TraceFlags() | trace.FlagsSampled
	} else {
		cfg.TraceFlags = parent.TraceFlags() &^ trace.FlagsSampled
	}
	sc := trace.NewSpanContext(cfg)
	ctx = trace.ContextWithSpanContext(ctx, sc)
	if !sampled {
		// RecordOnly (a custom sampler's) is not exported, and nothing here
		// reads a span that is not: such a span is left out as a dropped one.
		return ctx, nil
	}
	r := newRecord(kind == trace.SpanKindClient)
	r.t, r.sc, r.parent, r.name, r.kind, r.start = t, sc, parent, name, kind, time.Now()
	return ctx, r
}

func newTraceID() trace.TraceID {
	var id trace.TraceID
	for {
		hi, lo := rand.Uint64(), rand.Uint64()
		for i := range 8 {
			id[i], id[8+i] = byte(hi>>(56-8*i)), byte(lo>>(56-8*i))
		}
		if id.IsValid() {
			return id
		}
	}
}

func newSpanID() trace.SpanID {
	var id trace.SpanID
	for {
		v := rand.Uint64()
		for i := range 8 {
			id[i] = byte(v >> (56 - 8*i))
		}
		if id.IsValid() {
			return id
		}
	}
}

// add appends attributes (kv does not escape: a call needs no slice of its own).
func (r *record) add(kv ...attribute.KeyValue) { r.kv = append(r.kv, kv...) }

// finish ends the span: it joins its batch and r is free.
func (r *record) finish() {
	r.end = time.Now()
	r.t.batch.add(r)
	r.free()
}

// dedupe keeps the last value of each key, in the order keys first came. A
// span's keys are a few dozen constants, so a scan beats a map, and a 64-bit
// filter of the keys seen spares the scan for a key that cannot be one.
func dedupe(kv []attribute.KeyValue) []attribute.KeyValue {
	var seen uint64
	n := 0 // kv[:n] is the result so far
	for i := range kv {
		a := &kv[i]
		if a.Key == "" || a.Value.Type() == attribute.INVALID {
			continue
		}
		bit := keyBit(a.Key)
		if seen&bit != 0 && replace(kv[:n], a) {
			continue
		}
		seen |= bit
		if n != i {
			kv[n] = *a
		}
		n++
	}
	clear(kv[n:])
	return kv[:n]
}

// keyBit is k's bit in dedupe's filter: by its length and last byte.
func keyBit(k attribute.Key) uint64 {
	h := uint(len(k))
	if len(k) > 0 {
		h = h*31 + uint(k[len(k)-1])
	}
	return 1 << (h % 64)
}

// replace sets *a over the attribute of its key in kv, if there is one.
func replace(kv []attribute.KeyValue, a *attribute.KeyValue) bool {
	for i := range kv {
		if kv[i].Key == a.Key {
			kv[i] = *a
			return true
		}
	}
	return false
}

// Span is a started span; the zero Span (tracing off, or a span the sampler
// left out) ignores every call, as does a Span once ended.
type Span struct {
	r   *record
	gen uint64
}

func spanOf(r *record) Span { return Span{r: r, gen: r.gen.Load()} }

// rec is the span's record while the span is open, else nil.
func (s Span) rec() *record {
	if s.r == nil || s.r.gen.Load() != s.gen {
		return nil
	}
	return s.r
}

// Recording reports whether attributes set on the span are kept; callers
// skip building attributes when not.
func (s Span) Recording() bool { return s.rec() != nil }

// Set adds attributes.
func (s Span) Set(kv ...attribute.KeyValue) {
	if r := s.rec(); r != nil {
		r.add(kv...)
	}
}

// Fail marks the span as failed with an error.type (the API's error type or
// a short cause; never a key or a host path).
func (s Span) Fail(errType, msg string) {
	if r := s.rec(); r != nil {
		r.add(attribute.String(AttrErrorType, errType))
		r.status = sdktrace.Status{Code: codes.Error, Description: msg}
	}
}

// End ends the span; a second End does nothing.
func (s Span) End() {
	if r := s.rec(); r != nil {
		r.finish()
	}
}
