// Package tracing exports ctxproxy's OpenTelemetry traces: a server span per
// client request, a client span per upstream Messages call named in the GenAI
// semantic conventions' terms (`chat {model}`, gen_ai.* attributes), and a span
// per memory command.
//
// It is configured by the standard OpenTelemetry environment variables only
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
// OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf (default) or grpc,
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER[_ARG],
// OTEL_BSP_*), and is off unless an endpoint is set. Off means a nil *Tracer:
// every method is a nil check and nothing else, so the request path pays
// nothing for it.
//
// What never reaches an export: API keys, host paths, and message or memory
// content unless a tenant's policy opts in (the caller decides; this package
// only records the attributes it is given).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracer starts ctxproxy's spans. A nil *Tracer is valid and does nothing.
type Tracer struct {
	tp   *sdktrace.TracerProvider
	t    trace.Tracer
	prop propagation.TextMapPropagator
}

// Enabled reports whether traces are exported.
func (t *Tracer) Enabled() bool { return t != nil }

// Getenv is os.Getenv; tests substitute their own.
type Getenv func(string) string

// FromEnv builds the tracer the OTEL_* variables describe, or returns nil
// when no OTLP endpoint is set. version is the service.version resource
// attribute.
func FromEnv(ctx context.Context, getenv Getenv, version string) (*Tracer, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	exp, err := newExporter(ctx, getenv)
	if err != nil {
		return nil, err
	}
	// resource.Default read OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// once for the process, at its first call (a test's, maybe): read now.
	res, err := resource.Merge(resource.Default(), resource.EnvironmentWithContext(ctx))
	if err == nil {
		res, err = resource.Merge(res, resource.NewSchemaless(attribute.String("service.version", version)))
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	if getenv("OTEL_SERVICE_NAME") == "" && !strings.Contains(getenv("OTEL_RESOURCE_ATTRIBUTES"), "service.name=") {
		// resource.Default names an unnamed service "unknown_service:<binary>".
		res, _ = resource.Merge(res, resource.NewSchemaless(attribute.String("service.name", "ctxproxy")))
	}
	return WithExporter(exp, sdktrace.WithResource(res)), nil
}

// WithExporter is the tracer that batches its spans to exp: FromEnv's, with the OTLP exporter
// the OTEL_* variables describe and the service's resource (opts), and a benchmark's or test's
// with an exporter of its own. Without a resource in opts its spans carry the SDK's default.
func WithExporter(exp sdktrace.SpanExporter, opts ...sdktrace.TracerProviderOption) *Tracer {
	// The sampler comes from OTEL_TRACES_SAMPLER (the SDK reads it), default
	// parentbased_always_on: an agent's own sampled trace continues here.
	tp := sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp)}, opts...)...)
	return &Tracer{
		tp:   tp,
		t:    tp.Tracer("github.com/ctxproxy/ctxproxy"),
		prop: propagation.TraceContext{},
	}
}

// newExporter picks OTLP/HTTP protobuf or gRPC by OTEL_EXPORTER_OTLP_PROTOCOL
// (the traces-specific variable first). Both clients read the endpoint,
// headers, compression, TLS and timeout variables themselves; the spans are
// encoded by protoExporter.
func newExporter(ctx context.Context, getenv Getenv) (sdktrace.SpanExporter, error) {
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var client otlptrace.Client
	switch proto {
	case "", "http/protobuf":
		client = otlptracehttp.NewClient()
	case "grpc":
		client = otlptracegrpc.NewClient()
	default:
		return nil, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL %q is not supported (use http/protobuf or grpc)", proto)
	}
	exp, err := newProtoExporter(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP %s exporter: %w", proto, err)
	}
	return exp, nil
}

// Shutdown flushes the spans still queued and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// The spans' kinds as start options made once: built per call, each would
// cost the request an allocation.
var (
	serverKind   = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	clientKind   = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
	internalKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
)

// StartServer starts the server span of one client request, continuing the
// trace of an incoming traceparent.
//
// Spans start under a provisional name and without attributes; the full name
// and the attributes are set only on a span that records. The samplers
// OTEL_TRACES_SAMPLER can name decide on the trace ID and the parent alone,
// so a configured tracer that does not sample a request builds nothing for it.
func (t *Tracer) StartServer(r *http.Request, route string) (context.Context, Span) {
	if t == nil {
		return r.Context(), Span{}
	}
	ctx := r.Context()
	if _, ok := r.Header["Traceparent"]; ok { // Extract finds nothing without it
		ctx = t.prop.Extract(ctx, traceHeaders(r.Header))
	}
	ctx, sp := t.t.Start(ctx, route, serverKind...)
	if !sp.IsRecording() {
		return ctx, Span{sp: sp}
	}
	sp.SetName(r.Method + " " + route)
	s := Span{sp: sp, a: newSmallAttrs()}
	s.a.add(
		attribute.String("http.request.method", r.Method),
		attribute.String("http.route", route),
		attribute.String("url.path", r.URL.Path),
	)
	return ctx, s
}

// StartChat starts the client span of one upstream Messages call:
// `chat {model}`, kind CLIENT, with the request's GenAI attributes.
func (t *Tracer) StartChat(ctx context.Context, req ChatRequest) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	op := req.Operation
	if op == "" {
		op = OperationChat
	}
	ctx, sp := t.t.Start(ctx, op, clientKind...)
	if !sp.IsRecording() {
		return ctx, Span{sp: sp}
	}
	sp.SetName(op + " " + req.Model)
	s := Span{sp: sp, a: newChatAttrs()}
	s.a.add(
		attribute.String(AttrProviderName, "anthropic"),
		attribute.String(AttrOperationName, op),
		attribute.String(AttrRequestModel, req.Model),
		attribute.Bool(AttrRequestStream, req.Stream),
		attribute.String(AttrTenant, req.Tenant),
		attribute.String(AttrPolicyMode, req.PolicyMode),
		attribute.Int(AttrMemoryRound, req.Round),
	)
	if req.MaxTokens > 0 {
		s.a.add(attribute.Int64(AttrRequestMaxTokens, req.MaxTokens))
	}
	if len(req.Edits) > 0 {
		s.a.add(attribute.StringSlice(AttrEditsWritten, req.Edits))
	}
	return ctx, s
}

// StartMemory starts the span of one memory command run by the proxy.
func (t *Tracer) StartMemory(ctx context.Context, command string) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	ctx, sp := t.t.Start(ctx, "memory", internalKind...)
	if !sp.IsRecording() {
		return ctx, Span{sp: sp}
	}
	sp.SetName("memory " + command)
	s := Span{sp: sp, a: newSmallAttrs()}
	s.a.add(attribute.String(AttrMemoryCommand, command))
	return ctx, s
}

// Inject writes the traceparent of the span in ctx into h, so the upstream
// sees the proxy's span as the parent. A span the sampler left out is not a
// hop of the trace: nothing is written, and the client's traceparent, if it
// sent one, goes upstream as it came.
func (t *Tracer) Inject(ctx context.Context, h http.Header) {
	if !t.Sampled(ctx) {
		return
	}
	t.prop.Inject(ctx, traceHeaders(h))
}

// traceHeaders is a request's headers as the W3C propagator reads and
// writes them. It asks for "traceparent" and "tracestate"; http.Header
// would make their canonical names anew (an allocation each) on every call.
type traceHeaders http.Header

func canonicalTraceHeader(key string) string {
	switch key {
	case "traceparent":
		return "Traceparent"
	case "tracestate":
		return "Tracestate"
	}
	return http.CanonicalHeaderKey(key)
}

func (h traceHeaders) Get(key string) string {
	if v := h[canonicalTraceHeader(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (h traceHeaders) Set(key, value string) { h[canonicalTraceHeader(key)] = []string{value} }

func (h traceHeaders) Keys() []string { return propagation.HeaderCarrier(h).Keys() }

// Sampled reports whether Inject would write a traceparent for ctx, so a
// caller can skip copying headers for it.
func (t *Tracer) Sampled(ctx context.Context) bool {
	return t != nil && trace.SpanContextFromContext(ctx).IsSampled()
}

// Span is a started span; the zero Span (tracing off) ignores every call.
//
// A recording span's attributes are gathered in a and handed to the SDK in
// one call when it ends: the SDK grows its copy of them on every call, and
// a call through its interface puts the attributes passed on the heap.
type Span struct {
	sp trace.Span
	a  *attrs // nil unless the span records
}

// attrs are a span's attributes not yet given to the SDK.
type attrs struct{ kv []attribute.KeyValue }

// add appends kv (which does not escape: a call needs no slice of its own).
func (a *attrs) add(kv ...attribute.KeyValue) { a.kv = append(a.kv, kv...) }

// A chat span records 21 attributes on a usual reply (a threaded request, a
// transformation or an error one more each; a tenant's content two, and its
// buffer grows), a server or memory span up to 6: each kind's buffer is one
// allocation, the attrs and their array together.
type (
	chatAttrs struct {
		attrs
		arr [24]attribute.KeyValue
	}
	smallAttrs struct {
		attrs
		arr [6]attribute.KeyValue
	}
)

func newChatAttrs() *attrs {
	c := new(chatAttrs)
	c.kv = c.arr[:0]
	return &c.attrs
}

func newSmallAttrs() *attrs {
	c := new(smallAttrs)
	c.kv = c.arr[:0]
	return &c.attrs
}

// Recording reports whether attributes set on the span are kept; callers
// skip building attributes when not.
func (s Span) Recording() bool { return s.a != nil && s.sp.IsRecording() }

// Set adds attributes.
func (s Span) Set(kv ...attribute.KeyValue) {
	if s.a != nil {
		s.a.add(kv...)
	}
}

// Fail marks the span as failed with an error.type (the API's error type or
// a short cause; never a key or a host path).
func (s Span) Fail(errType, msg string) {
	if s.a == nil {
		return
	}
	s.a.add(attribute.String(AttrErrorType, errType))
	s.sp.SetStatus(codes.Error, msg)
}

// End ends the span.
func (s Span) End() {
	if s.sp == nil {
		return
	}
	if s.a != nil && len(s.a.kv) > 0 {
		s.sp.SetAttributes(s.a.kv...) // copied: the SDK keeps no reference to s.a
		s.a.kv = s.a.kv[:0]           // a second End adds nothing
	}
	s.sp.End()
}
