package tracing

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
)

// protoExporter is the OTLP exporter of ctxproxy's spans: what otlptrace's
// Exporter sends, encoded straight from the spans. The SDK's exporter builds
// a protobuf message per span, attribute and value (three allocations an
// attribute) and marshals them; this one appends the same protobuf to a
// pooled buffer. The upload is the SDK's own client (otlptracehttp's, so
// every OTEL_EXPORTER_OTLP_* variable, the retries and gzip are its), handed
// each group of spans as one ResourceSpans whose fields are the encoded
// bytes, kept as the message's unknown fields: protobuf writes those out
// verbatim, so the request on the wire is the one a built message would make.
// (The one thing the clients see differently: their experimental
// self-observability, OTEL_GO_X_OBSERVABILITY, counts the spans of the
// messages it is handed, and counts none.)
type protoExporter struct {
	client   otlptrace.Client
	stopOnce sync.Once

	// The batch processor exports one batch at a time; the lock is for a
	// ForceFlush meeting it. The encoder's buffer is kept from batch to
	// batch (a sync.Pool would lose it at every collection and grow a new
	// one through every size to the batch's).
	mu  sync.Mutex
	enc encoder
}

func newProtoExporter(ctx context.Context, client otlptrace.Client) (*protoExporter, error) {
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	return &protoExporter{client: client}, nil
}

// ExportSpans uploads spans, one ResourceSpans per resource.
func (e *protoExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	rs := e.enc.resourceSpans(spans)
	if len(rs) == 0 {
		return nil
	}
	err := e.client.UploadTraces(ctx, rs) // done with the bytes when it returns: it sends a marshaled copy
	if cap(e.enc.b) > maxKeptBuffer {
		e.enc.b = nil
	}
	if err != nil {
		return fmt.Errorf("traces export: %w", err)
	}
	return nil
}

// maxKeptBuffer bounds the encoding buffer kept for the next batch: a batch
// of the processor's default 512 spans of a request is about 300 KiB.
const maxKeptBuffer = 4 << 20

// Shutdown stops the client; spans exported after it fail.
func (e *protoExporter) Shutdown(ctx context.Context) error {
	var err error
	e.stopOnce.Do(func() { err = e.client.Stop(ctx) })
	return err
}

// Field numbers of the OTLP protobuf messages (opentelemetry/proto,
// trace/v1, common/v1, resource/v1).
const (
	fResourceSpansResource  = 1
	fResourceSpansScope     = 2
	fResourceSpansSchemaURL = 3

	fResourceAttributes = 1

	fScopeSpansScope     = 1
	fScopeSpansSpans     = 2
	fScopeSpansSchemaURL = 3

	fScopeName       = 1
	fScopeVersion    = 2
	fScopeAttributes = 3

	fSpanTraceID           = 1
	fSpanSpanID            = 2
	fSpanTraceState        = 3
	fSpanParentSpanID      = 4
	fSpanName              = 5
	fSpanKind              = 6
	fSpanStart             = 7
	fSpanEnd               = 8
	fSpanAttributes        = 9
	fSpanDroppedAttributes = 10
	fSpanEvents            = 11
	fSpanDroppedEvents     = 12
	fSpanLinks             = 13
	fSpanDroppedLinks      = 14
	fSpanStatus            = 15
	fSpanFlags             = 16

	fEventTime              = 1
	fEventName              = 2
	fEventAttributes        = 3
	fEventDroppedAttributes = 4

	fLinkTraceID           = 1
	fLinkSpanID            = 2
	fLinkAttributes        = 4
	fLinkDroppedAttributes = 5
	fLinkFlags             = 6

	fStatusMessage = 2
	fStatusCode    = 3

	fKeyValueKey   = 1
	fKeyValueValue = 2

	fAnyString = 1
	fAnyBool   = 2
	fAnyInt    = 3
	fAnyDouble = 4
	fAnyArray  = 5
	fAnyKvlist = 6
	fAnyBytes  = 7

	fArrayValues  = 1 // ArrayValue.values and KeyValueList.values
	fKvlistValues = 1
)

// encoder appends OTLP protobuf. A message's length is written after its
// fields: one byte is reserved for it, and a longer length moves the fields
// up by the bytes it needs.
type encoder struct {
	b      []byte
	groups []group
}

// group is the spans of one resource and instrumentation scope.
type group struct {
	res   *resource.Resource
	scope instrumentation.Scope
	spans []sdktrace.ReadOnlySpan
}

// resourceSpans encodes spans grouped as otlptrace's exporter groups them: a
// ResourceSpans per resource (by its attributes), in it a ScopeSpans per
// instrumentation scope. The result's bytes are enc's: valid until its next use.
func (enc *encoder) resourceSpans(spans []sdktrace.ReadOnlySpan) []*tracepb.ResourceSpans {
	enc.group(spans)
	enc.b = enc.b[:0]
	// Each resource's encoded ResourceSpans fields, end offsets in enc.b.
	type piece struct{ start, end int }
	var piecesArr [4]piece
	pieces := piecesArr[:0]
	for i := 0; i < len(enc.groups); {
		res := enc.groups[i].res
		start := len(enc.b)
		if res != nil {
			m := enc.open(fResourceSpansResource)
			iter := res.Iter()
			for iter.Next() {
				enc.keyValue(fResourceAttributes, iter.Attribute())
			}
			enc.close(m)
		}
		j := i
		for ; j < len(enc.groups) && sameResource(enc.groups[j].res, res); j++ {
			enc.scopeSpans(&enc.groups[j])
		}
		if res != nil {
			enc.str(fResourceSpansSchemaURL, res.SchemaURL())
		}
		pieces = append(pieces, piece{start, len(enc.b)})
		i = j
	}
	// The unknown fields are set only now: enc.b has stopped moving.
	out := make([]*tracepb.ResourceSpans, len(pieces))
	for i, p := range pieces {
		out[i] = &tracepb.ResourceSpans{}
		out[i].ProtoReflect().SetUnknown(enc.b[p.start:p.end:p.end])
	}
	clear(enc.groups) // the spans are the batch processor's to free
	enc.groups = enc.groups[:0]
	return out
}

// group sorts spans into enc.groups, those of one resource next to each
// other, keeping the spans' order within a group.
func (enc *encoder) group(spans []sdktrace.ReadOnlySpan) {
	for _, s := range spans {
		if s == nil {
			continue
		}
		res, scope := s.Resource(), s.InstrumentationScope()
		at := -1
		for i := range enc.groups {
			if g := &enc.groups[i]; sameResource(g.res, res) {
				at = i + 1 // after the last group of this resource
				if g.scope == scope {
					g.spans = append(g.spans, s)
					at = -2
					break
				}
			}
		}
		switch at {
		case -2:
		case -1:
			enc.groups = append(enc.groups, group{res: res, scope: scope, spans: []sdktrace.ReadOnlySpan{s}})
		default:
			enc.groups = append(enc.groups, group{})
			copy(enc.groups[at+1:], enc.groups[at:])
			enc.groups[at] = group{res: res, scope: scope, spans: []sdktrace.ReadOnlySpan{s}}
		}
	}
}

// sameResource is otlptrace's test: the same attributes make the same resource.
func sameResource(a, b *resource.Resource) bool {
	if a == b {
		return true
	}
	return a.Equivalent() == b.Equivalent()
}

func (enc *encoder) scopeSpans(g *group) {
	m := enc.open(fResourceSpansScope)
	if g.scope != (instrumentation.Scope{}) {
		s := enc.open(fScopeSpansScope)
		enc.str(fScopeName, g.scope.Name)
		enc.str(fScopeVersion, g.scope.Version)
		iter := g.scope.Attributes.Iter()
		for iter.Next() {
			enc.keyValue(fScopeAttributes, iter.Attribute())
		}
		enc.close(s)
	}
	for _, sd := range g.spans {
		enc.span(sd)
	}
	enc.str(fScopeSpansSchemaURL, g.scope.SchemaURL)
	enc.close(m)
}

// span writes what otlptrace's tracetransform makes of a span.
func (enc *encoder) span(sd sdktrace.ReadOnlySpan) {
	m := enc.open(fScopeSpansSpans)
	sc := sd.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	enc.bytes(fSpanTraceID, tid[:])
	enc.bytes(fSpanSpanID, sid[:])
	if ts := sc.TraceState(); ts.Len() > 0 {
		enc.str(fSpanTraceState, ts.String())
	}
	parent := sd.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		enc.bytes(fSpanParentSpanID, psid[:])
	}
	enc.str(fSpanName, sd.Name())
	enc.uint(fSpanKind, uint64(spanKind(sd.SpanKind())))
	enc.fixed64(fSpanStart, unixNano(sd.StartTime().UnixNano()))
	enc.fixed64(fSpanEnd, unixNano(sd.EndTime().UnixNano()))
	for _, kv := range sd.Attributes() {
		enc.keyValue(fSpanAttributes, kv)
	}
	enc.uint(fSpanDroppedAttributes, clampUint32(sd.DroppedAttributes()))
	for _, ev := range sd.Events() {
		e := enc.open(fSpanEvents)
		enc.fixed64(fEventTime, unixNano(ev.Time.UnixNano()))
		enc.str(fEventName, ev.Name)
		for _, kv := range ev.Attributes {
			enc.keyValue(fEventAttributes, kv)
		}
		enc.uint(fEventDroppedAttributes, clampUint32(ev.DroppedAttributeCount))
		enc.close(e)
	}
	enc.uint(fSpanDroppedEvents, clampUint32(sd.DroppedEvents()))
	for _, l := range sd.Links() {
		// As tracetransform: a link's trace state is not exported.
		e := enc.open(fSpanLinks)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		enc.bytes(fLinkTraceID, ltid[:])
		enc.bytes(fLinkSpanID, lsid[:])
		for _, kv := range l.Attributes {
			enc.keyValue(fLinkAttributes, kv)
		}
		enc.uint(fLinkDroppedAttributes, clampUint32(l.DroppedAttributeCount))
		enc.fixed32(fLinkFlags, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		enc.close(e)
	}
	enc.uint(fSpanDroppedLinks, clampUint32(sd.DroppedLinks()))
	st := sd.Status()
	s := enc.open(fSpanStatus) // present even when unset, as tracetransform makes it
	enc.str(fStatusMessage, st.Description)
	enc.uint(fStatusCode, uint64(statusCode(st.Code)))
	enc.close(s)
	enc.fixed32(fSpanFlags, spanFlags(sc.TraceFlags(), parent))
	enc.close(m)
}

func spanKind(k trace.SpanKind) tracepb.Span_SpanKind {
	switch k {
	case trace.SpanKindInternal:
		return tracepb.Span_SPAN_KIND_INTERNAL
	case trace.SpanKindServer:
		return tracepb.Span_SPAN_KIND_SERVER
	case trace.SpanKindClient:
		return tracepb.Span_SPAN_KIND_CLIENT
	case trace.SpanKindProducer:
		return tracepb.Span_SPAN_KIND_PRODUCER
	case trace.SpanKindConsumer:
		return tracepb.Span_SPAN_KIND_CONSUMER
	}
	return tracepb.Span_SPAN_KIND_UNSPECIFIED
}

func statusCode(c codes.Code) tracepb.Status_StatusCode {
	switch c {
	case codes.Ok:
		return tracepb.Status_STATUS_CODE_OK
	case codes.Error:
		return tracepb.Status_STATUS_CODE_ERROR
	}
	return tracepb.Status_STATUS_CODE_UNSET
}

// spanFlags are the W3C trace flags and whether the parent is remote.
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
	if parent.IsRemote() {
		f |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	return f
}

func unixNano(n int64) uint64 { return uint64(max(0, n)) }

func clampUint32(v int) uint64 {
	return uint64(min(max(v, 0), math.MaxUint32))
}

// keyValue writes one attribute as a KeyValue in field f.
func (enc *encoder) keyValue(f protowire.Number, kv attribute.KeyValue) {
	m := enc.open(f)
	enc.str(fKeyValueKey, string(kv.Key))
	enc.value(fKeyValueValue, kv.Value)
	enc.close(m)
}

// value writes v as an AnyValue in field f. A oneof member is written even
// when it holds its zero value: that is what says which member is set.
func (enc *encoder) value(f protowire.Number, v attribute.Value) {
	m := enc.open(f)
	switch v.Type() {
	case attribute.BOOL:
		enc.b = protowire.AppendTag(enc.b, fAnyBool, protowire.VarintType)
		enc.b = protowire.AppendVarint(enc.b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		enc.b = protowire.AppendTag(enc.b, fAnyInt, protowire.VarintType)
		enc.b = protowire.AppendVarint(enc.b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		enc.b = protowire.AppendTag(enc.b, fAnyDouble, protowire.Fixed64Type)
		enc.b = protowire.AppendFixed64(enc.b, math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		enc.strAlways(fAnyString, v.AsString())
	case attribute.BYTESLICE:
		enc.b = protowire.AppendTag(enc.b, fAnyBytes, protowire.BytesType)
		enc.b = protowire.AppendBytes(enc.b, v.AsByteSlice())
	case attribute.BOOLSLICE:
		a := enc.open(fAnyArray)
		for _, x := range v.AsBoolSlice() {
			enc.value(fArrayValues, attribute.BoolValue(x))
		}
		enc.close(a)
	case attribute.INT64SLICE:
		a := enc.open(fAnyArray)
		for _, x := range v.AsInt64Slice() {
			enc.value(fArrayValues, attribute.Int64Value(x))
		}
		enc.close(a)
	case attribute.FLOAT64SLICE:
		a := enc.open(fAnyArray)
		for _, x := range v.AsFloat64Slice() {
			enc.value(fArrayValues, attribute.Float64Value(x))
		}
		enc.close(a)
	case attribute.STRINGSLICE:
		a := enc.open(fAnyArray)
		for _, x := range v.AsStringSlice() {
			enc.value(fArrayValues, attribute.StringValue(x))
		}
		enc.close(a)
	case attribute.SLICE:
		a := enc.open(fAnyArray)
		for _, x := range v.AsSlice() {
			enc.value(fArrayValues, x)
		}
		enc.close(a)
	case attribute.MAP:
		a := enc.open(fAnyKvlist)
		for _, kv := range v.AsMap() {
			enc.keyValue(fKvlistValues, kv)
		}
		enc.close(a)
	case attribute.EMPTY:
		// An AnyValue with no member set.
	default:
		enc.strAlways(fAnyString, "INVALID")
	}
	enc.close(m)
}

// open starts a message in field f; close ends it.
func (enc *encoder) open(f protowire.Number) int {
	enc.b = protowire.AppendTag(enc.b, f, protowire.BytesType)
	enc.b = append(enc.b, 0)
	return len(enc.b)
}

func (enc *encoder) close(start int) {
	n := len(enc.b) - start
	if n < 0x80 {
		enc.b[start-1] = byte(n)
		return
	}
	k := protowire.SizeVarint(uint64(n))
	enc.b = append(enc.b, make([]byte, k-1)...)
	copy(enc.b[start-1+k:], enc.b[start:start+n])
	protowire.AppendVarint(enc.b[:start-1], uint64(n))
}

// str writes a string field unless it is empty (proto3's default).
func (enc *encoder) str(f protowire.Number, s string) {
	if s != "" {
		enc.strAlways(f, s)
	}
}

// strAlways writes a string field. Protobuf strings are UTF-8, and a
// collector refuses a request with one that is not (the SDK's exporter
// fails the whole batch before sending it): invalid bytes become U+FFFD.
func (enc *encoder) strAlways(f protowire.Number, s string) {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	enc.b = protowire.AppendTag(enc.b, f, protowire.BytesType)
	enc.b = protowire.AppendString(enc.b, s)
}

func (enc *encoder) bytes(f protowire.Number, b []byte) {
	if len(b) > 0 {
		enc.b = protowire.AppendTag(enc.b, f, protowire.BytesType)
		enc.b = protowire.AppendBytes(enc.b, b)
	}
}

func (enc *encoder) uint(f protowire.Number, v uint64) {
	if v != 0 {
		enc.b = protowire.AppendTag(enc.b, f, protowire.VarintType)
		enc.b = protowire.AppendVarint(enc.b, v)
	}
}

func (enc *encoder) fixed64(f protowire.Number, v uint64) {
	if v != 0 {
		enc.b = protowire.AppendTag(enc.b, f, protowire.Fixed64Type)
		enc.b = protowire.AppendFixed64(enc.b, v)
	}
}

func (enc *encoder) fixed32(f protowire.Number, v uint32) {
	if v != 0 {
		enc.b = protowire.AppendTag(enc.b, f, protowire.Fixed32Type)
		enc.b = protowire.AppendFixed32(enc.b, v)
	}
}
