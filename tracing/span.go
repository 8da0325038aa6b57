package tracing

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// A span is recorded here, not by the SDK's TracerProvider: the SDK's span
// is an allocation, its attributes a growing slice and a map to de-duplicate
// them at its end, then a snapshot kept until its batch is exported and a
// wake of the batch goroutine; for a request's two spans that was about a
// third of what tracing every request cost the proxy. A record is reused,
// its attributes encoded as they are set, and at its end it is written into
// its batch (batch.go) and reused again. The SDK's pieces are kept where
// they are not per span: its samplers decide, its OTLP clients upload, and
// its exporters can be given the spans (a test's).

// record is one sampled span from its start to its end. It belongs to the
// request's goroutine, which hands it to the batcher and back to its pool at
// End; gen tells a Span that its record has moved on.
//
// Its attributes are kept as they will be sent, the Span message's encoded
// attributes fields, in memory the garbage collector does not scan: kept as
// attribute.KeyValues, each would be copied in, de-duplicated, encoded and
// cleared again, every copy of its strings a write barrier while a
// collection runs. Kept encoded, they are written once, and the strings they
// came from are not kept.
type record struct {
	t      *Tracer
	sc     trace.SpanContext
	parent trace.SpanContext
	name   string
	kind   trace.SpanKind
	start  time.Time
	end    time.Time
	status sdktrace.Status
	attrs  []byte    // the encoded attributes, in the order their keys came
	ents   []attrEnt // where each attribute is in attrs
	seen   uint64    // the keyBit of every key in ents
	// dropped counts the attributes left out: an empty key, or past the count limit.
	dropped int
	gen     atomic.Uint64 // odd while the span is open
	arr     [32]attrEnt   // ents' first array
}

// attrEnt is one encoded attribute: attrs[start:end], its key at keyAt.
type attrEnt struct{ start, end, keyAt, keyLen int32 }

var records = sync.Pool{New: func() any { r := new(record); r.ents = r.arr[:0]; return r }}

// maxKeptAttrs bounds the attribute buffer a record keeps for its next span
// (a span with a tenant's content in it may have grown it large).
const maxKeptAttrs = 16 << 10

func newRecord() *record {
	r := records.Get().(*record)
	r.gen.Add(1) // open
	return r
}

// free returns r to its pool, emptied.
func (r *record) free() {
	r.gen.Add(1) // closed: a Span still holding r ignores every call
	r.t, r.sc, r.parent, r.name, r.status = nil, trace.SpanContext{}, trace.SpanContext{}, "", sdktrace.Status{}
	r.attrs, r.ents, r.seen, r.dropped = r.attrs[:0], r.arr[:0], 0, 0
	if cap(r.attrs) > maxKeptAttrs {
		r.attrs = nil
	}
	records.Put(r)
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
	r := newRecord()
	r.t, r.sc, r.parent, r.name, r.kind, r.start = t, sc, parent, name, kind, time.Now()
	return ctx, r
}

// newTraceID and newSpanID draw from the runtime's generator (ChaCha8): IDs
// must be unique, not secret. An all-zero ID is invalid, and drawn again.
func newTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:8], rand.Uint64())
		binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

// add sets attributes as the SDK's span keeps them: a key set again keeps
// its first place and takes the last value, an empty key is dropped, and
// OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT and ..._VALUE_LENGTH_LIMIT bound what the
// span carries. (kv does not escape: a call needs no slice of its own.)
func (r *record) add(kv ...attribute.KeyValue) {
	for i := range kv {
		r.set(&kv[i])
	}
}

func (r *record) set(a *attribute.KeyValue) {
	at, ok := r.slot(a.Key)
	if !ok {
		return
	}
	start := len(r.attrs)
	enc := encoder{b: r.attrs}
	var k int
	if lim := &r.t.limits; lim.valueLength >= 0 {
		k = enc.keyValueAt(fSpanAttributes, &attribute.KeyValue{Key: a.Key, Value: lim.truncate(a.Value)})
	} else {
		k = enc.keyValueAt(fSpanAttributes, a)
	}
	r.attrs = enc.b
	r.place(a.Key, at, start, k)
}

// setStrings sets a string slice attribute, written from ss itself: an
// attribute.StringSlice would copy ss twice, once to be made and once to be
// read. (ss does not escape.)
func (r *record) setStrings(key attribute.Key, ss []string) {
	at, ok := r.slot(key)
	if !ok {
		return
	}
	start := len(r.attrs)
	enc := encoder{b: r.attrs}
	k := enc.stringsAt(fSpanAttributes, string(key), ss, r.t.limits.valueLength)
	r.attrs = enc.b
	r.place(key, at, start, k)
}

// slot says where key's attribute goes: the index in r.ents of the one it
// replaces, or -1 for a new one; not ok when it is dropped (counted).
func (r *record) slot(key attribute.Key) (at int, ok bool) {
	if key == "" {
		r.dropped++
		return 0, false
	}
	at = -1
	if r.seen&keyBit(key) != 0 {
		at = r.find(key)
	}
	if lim := r.t.limits.count; at < 0 && lim >= 0 && len(r.ents) >= lim {
		r.dropped++
		return 0, false
	}
	return at, true
}

// place records the attribute of key just encoded at r.attrs[start:], the
// key at keyAt, in the slot at.
func (r *record) place(key attribute.Key, at, start, keyAt int) {
	e := attrEnt{start: int32(start), end: int32(len(r.attrs)), keyAt: int32(keyAt), keyLen: int32(len(key))}
	if at >= 0 {
		r.replace(at, e)
		return
	}
	r.seen |= keyBit(key)
	r.ents = append(r.ents, e)
}

// keyAt is where the key of the KeyValue field encoded at attrs[start:]
// begins (the key is not empty).
func keyAt(attrs []byte, start int) int {
	i := start + 1 // the field's one-byte tag
	_, n := protowire.ConsumeVarint(attrs[i:])
	i += n + 1 // its length, the key's one-byte tag
	_, n = protowire.ConsumeVarint(attrs[i:])
	return i + n
}

// find is the index in r.ents of key's attribute, or -1. (A key that is not
// UTF-8 is written with U+FFFD and not found again: set twice, it is sent
// twice. The keys here are constants.)
func (r *record) find(key attribute.Key) int {
	for i, e := range r.ents {
		if int(e.keyLen) == len(key) && string(r.attrs[e.keyAt:e.keyAt+e.keyLen]) == string(key) {
			return i
		}
	}
	return -1
}

// replace puts the attribute just encoded at the end of r.attrs (e) in the
// place of the attribute at, whose key it has.
func (r *record) replace(at int, e attrEnt) {
	old := r.ents[at]
	enc := r.attrs[e.start:e.end]
	if len(enc) == int(old.end-old.start) {
		copy(r.attrs[old.start:old.end], enc)
		r.attrs = r.attrs[:e.start]
		return
	}
	// The rest moves: rare (a value set again with another length).
	rest := append(append([]byte(nil), enc...), r.attrs[old.end:e.start]...)
	r.attrs = append(r.attrs[:old.start], rest...)
	delta := int32(len(enc)) - (old.end - old.start)
	r.ents[at] = attrEnt{start: old.start, end: old.start + int32(len(enc)), keyAt: old.start + (e.keyAt - e.start), keyLen: e.keyLen}
	for i := at + 1; i < len(r.ents); i++ {
		r.ents[i].start += delta
		r.ents[i].end += delta
		r.ents[i].keyAt += delta
	}
}

// finish ends the span: it joins its batch and r is free.
func (r *record) finish() {
	r.end = time.Now()
	r.t.batch.add(r)
	r.free()
}

// keyBit is k's bit in a 64-bit filter of the keys a span has: by its
// length and last two bytes, so a scan for a key already set is only made
// for a key that may be one.
func keyBit(k attribute.Key) uint64 {
	h := uint(len(k))
	if len(k) > 1 {
		h = h*31 + uint(k[len(k)-1])*7 + uint(k[len(k)-2])
	}
	return 1 << (h % 64)
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
