package tracing

import (
	"context"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// A span is recorded here, not by the SDK's TracerProvider: the SDK's span
// is an allocation, its attributes a growing slice and a map to de-duplicate
// them at its end, then a snapshot and a wake of the batch goroutine, about
// 15 µs of CPU for a request's two spans, a third of what tracing every
// request cost the proxy. A record is one allocation, filled in place and
// handed to the batcher as it is; the SDK's pieces are kept where they are
// not per span: its samplers decide, its OTLP clients upload, and a record
// becomes the SDK's ReadOnlySpan only at export, on the batch goroutine.

// record is one sampled span from its start to its export. It belongs to the
// request's goroutine until End hands it to the batcher, and is only read
// after that.
type record struct {
	t      *Tracer
	sc     trace.SpanContext
	parent trace.SpanContext
	name   string
	kind   trace.SpanKind
	start  time.Time
	end    time.Time
	status sdktrace.Status
	ended  bool
	kv     []attribute.KeyValue
	// dropped counts the attributes the limits left out, set at export.
	dropped int
}

// A chat span records 21 attributes on a usual reply (a threaded request, a
// transformation or an error one more each; a tenant's content two, and kv
// grows), a server or memory span up to 6: a record and its attributes are
// one allocation of the size its kind needs.
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

func newRecord(chat bool) *record {
	if chat {
		c := new(chatRecord)
		c.kv = c.arr[:0]
		return &c.record
	}
	c := new(smallRecord)
	c.kv = c.arr[:0]
	return &c.record
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
func (r *record) add(kv ...attribute.KeyValue) {
	if !r.ended {
		r.kv = append(r.kv, kv...)
	}
}

// finish ends the span and hands it to the batcher; a second call does nothing.
func (r *record) finish() {
	if r.ended {
		return
	}
	r.end = time.Now()
	r.ended = true
	r.t.batch.add(r)
}

// dedupe keeps the last value of each key, in the order keys first came. A
// span's keys are a few dozen constants, so a scan beats a map.
func dedupe(kv []attribute.KeyValue) []attribute.KeyValue {
	out := kv[:0]
	for _, a := range kv {
		if !a.Valid() {
			continue
		}
		dup := false
		for i := range out {
			if out[i].Key == a.Key {
				out[i], dup = a, true
				break
			}
		}
		if !dup {
			out = append(out, a)
		}
	}
	clear(kv[len(out):])
	return out
}

// Span is a started span; the zero Span (tracing off, or a span the sampler
// left out) ignores every call.
type Span struct{ r *record }

// Recording reports whether attributes set on the span are kept; callers
// skip building attributes when not.
func (s Span) Recording() bool { return s.r != nil && !s.r.ended }

// Set adds attributes.
func (s Span) Set(kv ...attribute.KeyValue) {
	if s.r != nil {
		s.r.add(kv...)
	}
}

// Fail marks the span as failed with an error.type (the API's error type or
// a short cause; never a key or a host path).
func (s Span) Fail(errType, msg string) {
	if s.r == nil || s.r.ended {
		return
	}
	s.r.add(attribute.String(AttrErrorType, errType))
	s.r.status = sdktrace.Status{Code: codes.Error, Description: msg}
}

// End ends the span; a second End does nothing.
func (s Span) End() {
	if s.r != nil {
		s.r.finish()
	}
}
