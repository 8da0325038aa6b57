package tracing

import (
	"bytes"
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
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
)

// otlpExporter is the OTLP exporter of ctxproxy's spans: what otlptrace's
// Exporter sends, encoded straight from the records. The SDK's exporter
// builds a protobuf message per span, attribute and value (three allocations
// an attribute) and marshals them; this one appends the same protobuf to a
// buffer kept from batch to batch. The upload is the SDK's own client
// (otlptracehttp's or otlptracegrpc's, so every OTEL_EXPORTER_OTLP_*
// variable, the retries and gzip are its), handed the batch as one
// ResourceSpans whose fields are the encoded bytes, kept as the message's
// unknown fields: protobuf writes those out verbatim, so the request on the
// wire is the one a built message would make. (The one thing the clients see
// differently: their experimental self-observability, OTEL_GO_X_OBSERVABILITY,
// counts the spans of the messages it is handed, and counts none.)
type otlpExporter struct {
	client   otlptrace.Client
	stopOnce sync.Once

	// head is the ResourceSpans' resource field and tail its schema URL,
	// and scope the ScopeSpans' scope field: the same for every batch,
	// encoded once.
	head, scope, scopeTail, tail []byte
	enc                          encoder // the batch goroutine's, for the whole message
}

func newOTLPExporter(ctx context.Context, client otlptrace.Client, res *resource.Resource, scope instrumentation.Scope) (*otlpExporter, error) {
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	e := &otlpExporter{client: client}
	var enc encoder
	if res != nil {
		m := enc.open(fResourceSpansResource)
		iter := res.Iter()
		for iter.Next() {
			enc.keyValue(fResourceAttributes, iter.Attribute())
		}
		enc.close(m)
		e.head = enc.take()
		enc.str(fResourceSpansSchemaURL, res.SchemaURL())
		e.tail = enc.take()
	}
	if scope != (instrumentation.Scope{}) {
		m := enc.open(fScopeSpansScope)
		enc.str(fScopeName, scope.Name)
		enc.str(fScopeVersion, scope.Version)
		iter := scope.Attributes.Iter()
		for iter.Next() {
			enc.keyValue(fScopeAttributes, iter.Attribute())
		}
		enc.close(m)
		e.scope = enc.take()
	}
	enc.str(fScopeSpansSchemaURL, scope.SchemaURL)
	e.scopeTail = enc.take()
	return e, nil
}

// otlpBatch is spans encoded as ScopeSpans.spans fields.
type otlpBatch struct {
	enc encoder
	n   int
}

func (o *otlpBatch) add(r *record) { o.enc.span(r); o.n++ }
func (o *otlpBatch) len() int      { return o.n }

func (o *otlpBatch) reset() {
	o.n = 0
	o.enc.b = o.enc.b[:0]
	if cap(o.enc.b) > maxKeptBuffer {
		o.enc.b = nil
	}
}

func (e *otlpExporter) newBatch() batch { return &otlpBatch{} }

// export uploads a batch as one ResourceSpans.
func (e *otlpExporter) export(ctx context.Context, b batch) error {
	spans := b.(*otlpBatch).enc.b
	if len(spans) == 0 {
		return nil
	}
	enc := &e.enc
	enc.b = append(enc.b[:0], e.head...)
	enc.b = protowire.AppendTag(enc.b, fResourceSpansScope, protowire.BytesType)
	enc.b = protowire.AppendVarint(enc.b, uint64(len(e.scope)+len(spans)+len(e.scopeTail)))
	enc.b = append(enc.b, e.scope...)
	enc.b = append(enc.b, spans...)
	enc.b = append(enc.b, e.scopeTail...)
	enc.b = append(enc.b, e.tail...)
	msg := &tracepb.ResourceSpans{}
	msg.ProtoReflect().SetUnknown(enc.b)
	// The client is done with the bytes when it returns: it sends a marshaled copy.
	err := e.client.UploadTraces(ctx, []*tracepb.ResourceSpans{msg})
	if cap(enc.b) > maxKeptBuffer {
		enc.b = nil
	}
	if err != nil {
		return fmt.Errorf("traces export: %w", err)
	}
	return nil
}

// maxKeptBuffer bounds the encoding buffer kept for the next batch: a batch
// of the processor's default 512 spans of a request is about 300 KiB.
const maxKeptBuffer = 4 << 20

// shutdown stops the client; spans exported after it fail.
func (e *otlpExporter) shutdown(ctx context.Context) error {
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
	fSpanStatus            = 15
	fSpanFlags             = 16

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
type encoder struct{ b []byte }

// take returns a copy of what was encoded and empties the buffer.
func (enc *encoder) take() []byte {
	out := bytes.Clone(enc.b)
	enc.b = enc.b[:0]
	return out
}

// span writes what otlptrace's tracetransform makes of a span. Its fields'
// tags are one byte each, its IDs' lengths known; its own length, two bytes
// for nearly every span, is reserved as two and moved when it is not.
func (enc *encoder) span(r *record) {
	b := append(enc.b, byte(protowire.EncodeTag(fScopeSpansSpans, protowire.BytesType)), 0, 0)
	start := len(b)
	tid, sid := r.sc.TraceID(), r.sc.SpanID()
	b = append(b, tagTraceID, 16)
	b = append(b, tid[:]...)
	b = append(b, tagSpanID, 8)
	b = append(b, sid[:]...)
	if ts := r.sc.TraceState(); ts.Len() > 0 {
		b = appendStr(b, tagTraceState, ts.String())
	}
	if psid := r.parent.SpanID(); psid.IsValid() {
		b = append(b, tagParentSpanID, 8)
		b = append(b, psid[:]...)
	}
	if r.name != "" {
		b = appendStr(b, tagName, r.name)
	}
	if k := spanKind(r.kind); k != 0 {
		b = append(b, tagKind)
		b = protowire.AppendVarint(b, uint64(k))
	}
	if t := unixNano(r.start.UnixNano()); t != 0 {
		b = append(b, tagStart)
		b = protowire.AppendFixed64(b, t)
	}
	if t := unixNano(r.end.UnixNano()); t != 0 {
		b = append(b, tagEnd)
		b = protowire.AppendFixed64(b, t)
	}
	enc.b = append(b, r.attrs...)
	enc.uint(fSpanDroppedAttributes, clampUint32(r.dropped))
	m := enc.open(fSpanStatus) // present even when unset, as tracetransform makes it
	enc.str(fStatusMessage, r.status.Description)
	enc.uint(fStatusCode, uint64(statusCode(r.status.Code)))
	enc.close(m)
	enc.fixed32(fSpanFlags, spanFlags(r.sc.TraceFlags(), r.parent))
	enc.closeReserved2(start)
}

// appendStr appends a string field with a one-byte tag, its invalid UTF-8
// replaced (see strAlways).
func appendStr(b []byte, tag byte, s string) []byte {
	s = validUTF8(s)
	b = append(b, tag)
	b = appendLen(b, len(s))
	return append(b, s...)
}

// closeReserved2 writes the length of the message whose fields start at
// start, after the two bytes reserved for it: in them when it takes two
// bytes, else with the fields moved to fit.
func (enc *encoder) closeReserved2(start int) {
	n := len(enc.b) - start
	k := protowire.SizeVarint(uint64(n))
	if k != 2 {
		if k > 2 {
			enc.b = append(enc.b, make([]byte, k-2)...)
		}
		copy(enc.b[start-2+k:], enc.b[start:start+n])
		enc.b = enc.b[:start-2+k+n]
	}
	protowire.AppendVarint(enc.b[:start-2], uint64(n))
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

// keyValue writes one attribute as a KeyValue in field f (< 16, as every
// field here: its tag is one byte). A scalar's sizes are known before it is
// written (a span's attributes nearly all are), so its lengths go first
// rather than into a reserved byte, and a length below 128 is its one byte.
func (enc *encoder) keyValue(f protowire.Number, kv attribute.KeyValue) {
	enc.keyValueAt(f, &kv)
}

// keyValueAt is keyValue, and where in enc.b the key it wrote begins.
func (enc *encoder) keyValueAt(f protowire.Number, kv *attribute.KeyValue) int {
	var vlen int // the AnyValue's length
	var str string
	switch kv.Value.Type() {
	case attribute.STRING:
		str = validUTF8(kv.Value.AsString())
		vlen = 1 + sizeLen(len(str)) + len(str)
	case attribute.INT64:
		vlen = 1 + protowire.SizeVarint(uint64(kv.Value.AsInt64()))
	case attribute.BOOL:
		vlen = 2
	case attribute.FLOAT64:
		vlen = 1 + 8
	default:
		start := len(enc.b)
		m := enc.open(f)
		enc.str(fKeyValueKey, string(kv.Key))
		enc.value(fKeyValueValue, kv.Value)
		enc.close(m)
		return keyAt(enc.b, start)
	}
	key := validUTF8(string(kv.Key))
	n := 1 + sizeLen(vlen) + vlen
	if key != "" {
		n += 1 + sizeLen(len(key)) + len(key)
	}
	b := append(enc.b, byte(protowire.EncodeTag(f, protowire.BytesType)))
	b = appendLen(b, n)
	at := len(b)
	if key != "" {
		b = append(b, tagKey)
		b = appendLen(b, len(key))
		at = len(b)
		b = append(b, key...)
	}
	b = append(b, tagValue)
	b = appendLen(b, vlen)
	switch kv.Value.Type() {
	case attribute.STRING:
		b = append(b, tagAnyString)
		b = appendLen(b, len(str))
		b = append(b, str...)
	case attribute.INT64:
		b = append(b, tagAnyInt)
		b = protowire.AppendVarint(b, uint64(kv.Value.AsInt64()))
	case attribute.BOOL:
		b = append(b, tagAnyBool, byte(protowire.EncodeBool(kv.Value.AsBool())))
	case attribute.FLOAT64:
		b = append(b, tagAnyDouble)
		b = protowire.AppendFixed64(b, math.Float64bits(kv.Value.AsFloat64()))
	}
	enc.b = b
	return at
}

// stringsAt writes a string slice attribute as keyValue would write
// attribute.StringSlice(key, ss), each string cut to limit characters
// (none when negative), and returns where its key begins.
func (enc *encoder) stringsAt(f protowire.Number, key string, ss []string, limit int) int {
	elem := func(s string) string {
		if limit >= 0 {
			s = truncate(s, limit)
		}
		return validUTF8(s)
	}
	arr := 0 // the ArrayValue's length
	for _, s := range ss {
		s = elem(s)
		n := 1 + sizeLen(len(s)) + len(s) // an AnyValue
		arr += 1 + sizeLen(n) + n
	}
	vlen := 1 + sizeLen(arr) + arr
	key = validUTF8(key)
	n := 1 + sizeLen(len(key)) + len(key) + 1 + sizeLen(vlen) + vlen
	b := append(enc.b, byte(protowire.EncodeTag(f, protowire.BytesType)))
	b = appendLen(b, n)
	b = append(b, tagKey)
	b = appendLen(b, len(key))
	at := len(b)
	b = append(b, key...)
	b = append(b, tagValue)
	b = appendLen(b, vlen)
	b = append(b, tagAnyArray)
	b = appendLen(b, arr)
	for _, s := range ss {
		s = elem(s)
		b = append(b, tagArrayValue)
		b = appendLen(b, 1+sizeLen(len(s))+len(s))
		b = append(b, tagAnyString)
		b = appendLen(b, len(s))
		b = append(b, s...)
	}
	enc.b = b
	return at
}

// The one-byte tags span and keyValue write (field numbers below 16).
const (
	tagTraceID      = byte(fSpanTraceID<<3 | protowire.BytesType)
	tagSpanID       = byte(fSpanSpanID<<3 | protowire.BytesType)
	tagTraceState   = byte(fSpanTraceState<<3 | protowire.BytesType)
	tagParentSpanID = byte(fSpanParentSpanID<<3 | protowire.BytesType)
	tagName         = byte(fSpanName<<3 | protowire.BytesType)
	tagKind         = byte(fSpanKind<<3 | protowire.VarintType)
	tagStart        = byte(fSpanStart<<3 | protowire.Fixed64Type)
	tagEnd          = byte(fSpanEnd<<3 | protowire.Fixed64Type)

	tagKey       = byte(fKeyValueKey<<3 | protowire.BytesType)
	tagValue     = byte(fKeyValueValue<<3 | protowire.BytesType)
	tagAnyString = byte(fAnyString<<3 | protowire.BytesType)
	tagAnyInt    = byte(fAnyInt<<3 | protowire.VarintType)
	tagAnyBool   = byte(fAnyBool<<3 | protowire.VarintType)
	tagAnyDouble = byte(fAnyDouble<<3 | protowire.Fixed64Type)
	tagAnyArray  = byte(fAnyArray<<3 | protowire.BytesType)
	// An ArrayValue's values.
	tagArrayValue = byte(fArrayValues<<3 | protowire.BytesType)
)

// appendLen appends a length's varint: one byte below 128.
func appendLen(b []byte, n int) []byte {
	if n < 0x80 {
		return append(b, byte(n))
	}
	return protowire.AppendVarint(b, uint64(n))
}

func sizeLen(n int) int {
	if n < 0x80 {
		return 1
	}
	return protowire.SizeVarint(uint64(n))
}

// validUTF8 is s with every invalid byte as U+FFFD.
func validUTF8(s string) string {
	if ascii(s) || utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// ascii reports whether s is all ASCII, eight bytes a step: a span's keys and
// most of its values are, and the check runs for each of them.
func ascii(s string) bool {
	for len(s) >= 8 {
		w := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		if w&0x8080808080808080 != 0 {
			return false
		}
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
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
	s = validUTF8(s)
	enc.b = protowire.AppendTag(enc.b, f, protowire.BytesType)
	enc.b = protowire.AppendString(enc.b, s)
}

func (enc *encoder) uint(f protowire.Number, v uint64) {
	if v != 0 {
		enc.b = protowire.AppendTag(enc.b, f, protowire.VarintType)
		enc.b = protowire.AppendVarint(enc.b, v)
	}
}

func (enc *encoder) fixed32(f protowire.Number, v uint32) {
	if v != 0 {
		enc.b = protowire.AppendTag(enc.b, f, protowire.Fixed32Type)
		enc.b = protowire.AppendFixed32(enc.b, v)
	}
}

// decodeAttrs is the attributes encoded in b (Span.attributes fields, as
// keyValue writes them) as the SDK's exporters take them: for a test's or a
// benchmark's exporter, never on the way to OTLP.
func decodeAttrs(b []byte) []attribute.KeyValue {
	var kvs []attribute.KeyValue
	eachBytes(b, func(f protowire.Number, kv []byte) {
		if f == fSpanAttributes {
			kvs = append(kvs, decodeKeyValue(kv))
		}
	})
	return kvs
}

func decodeKeyValue(b []byte) attribute.KeyValue {
	var kv attribute.KeyValue
	eachBytes(b, func(f protowire.Number, v []byte) {
		switch f {
		case fKeyValueKey:
			kv.Key = attribute.Key(v)
		case fKeyValueValue:
			kv.Value = decodeValue(v)
		}
	})
	return kv
}

// decodeValue is an AnyValue as the attribute.Value that encodes to it.
func decodeValue(b []byte) attribute.Value {
	v := attribute.Value{}
	for len(b) > 0 {
		f, typ, n := protowire.ConsumeTag(b)
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			x, m := protowire.ConsumeVarint(b)
			b = b[m:]
			if f == fAnyBool {
				v = attribute.BoolValue(x != 0)
			} else {
				v = attribute.Int64Value(int64(x))
			}
		case protowire.Fixed64Type:
			x, m := protowire.ConsumeFixed64(b)
			b = b[m:]
			v = attribute.Float64Value(math.Float64frombits(x))
		case protowire.BytesType:
			x, m := protowire.ConsumeBytes(b)
			b = b[m:]
			switch f {
			case fAnyString:
				v = attribute.StringValue(string(x))
			case fAnyBytes:
				v = attribute.ByteSliceValue(bytes.Clone(x))
			case fAnyArray:
				v = decodeArray(x)
			case fAnyKvlist:
				var kvs []attribute.KeyValue
				eachBytes(x, func(_ protowire.Number, kv []byte) { kvs = append(kvs, decodeKeyValue(kv)) })
				v = attribute.MapValue(kvs...)
			}
		default:
			return v
		}
	}
	return v
}

// decodeArray is an ArrayValue: a slice of one type when its values are all
// of it, else a slice of values.
func decodeArray(b []byte) attribute.Value {
	var vs []attribute.Value
	eachBytes(b, func(_ protowire.Number, v []byte) { vs = append(vs, decodeValue(v)) })
	if len(vs) == 0 {
		return attribute.SliceValue()
	}
	typ := vs[0].Type()
	for _, v := range vs {
		if v.Type() != typ {
			return attribute.SliceValue(vs...)
		}
	}
	switch typ {
	case attribute.STRING:
		return attribute.StringSliceValue(valuesAs(vs, attribute.Value.AsString))
	case attribute.INT64:
		return attribute.Int64SliceValue(valuesAs(vs, attribute.Value.AsInt64))
	case attribute.BOOL:
		return attribute.BoolSliceValue(valuesAs(vs, attribute.Value.AsBool))
	case attribute.FLOAT64:
		return attribute.Float64SliceValue(valuesAs(vs, attribute.Value.AsFloat64))
	}
	return attribute.SliceValue(vs...)
}

// valuesAs is vs, each as as reads it.
func valuesAs[T any](vs []attribute.Value, as func(attribute.Value) T) []T {
	out := make([]T, len(vs))
	for i, v := range vs {
		out[i] = as(v)
	}
	return out
}

// eachBytes calls fn with each length-delimited field of the message b.
func eachBytes(b []byte, fn func(protowire.Number, []byte)) {
	for len(b) > 0 {
		f, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(f, typ, b)
		if m < 0 {
			return
		}
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			fn(f, v)
		}
		b = b[m:]
	}
}
