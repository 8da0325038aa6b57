// Package tracing exports ctxproxy's OpenTelemetry traces: a server span per
// client request, a client span per upstream Messages call named in the GenAI
// semantic conventions' terms (`chat {model}`, gen_ai.* attributes), and a span
// per memory command.
//
// It is configured by the standard OpenTelemetry environment variables only
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
// OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf (default) or grpc,
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER[_ARG],
// OTEL_BSP_*, OTEL_[SPAN_]ATTRIBUTE_{COUNT,VALUE_LENGTH}_LIMIT), and is off
// unless an endpoint is set. Off means a nil *Tracer:
// every method is a nil check and nothing else, so the request path pays
// nothing for it.
//
// What never reaches an export: API keys, host paths, and message or memory
// content unless a tenant's policy opts in (the caller decides; this package
// only records the attributes it is given).
package tracing

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
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
	sampler      sdktrace.Sampler
	limits       spanLimits
	batch        *batcher
	lastChatName atomic.Pointer[spanName]
	prop         propagation.TextMapPropagator
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
	exp, err := newExporter(ctx, getenv, res)
	if err != nil {
		return nil, err
	}
	return newTracer(getenv, exp), nil
}

// WithExporter is the tracer that batches its spans to exp, configured by
// the process's OTEL_* variables (sampler, batching, limits) and with the
// SDK's default resource: a benchmark's or test's, with an exporter of its own.
func WithExporter(exp sdktrace.SpanExporter) *Tracer {
	return newTracer(os.Getenv, &sdkExporter{exp: exp, res: resource.Default()})
}

func newTracer(getenv Getenv, exp exporter) *Tracer {
	return &Tracer{
		sampler: samplerFromEnv(getenv),
		limits:  limitsFromEnv(getenv),
		batch:   newBatcher(exp, batchFromEnv(getenv)),
		prop:    propagation.TraceContext{},
	}
}

// newExporter picks OTLP/HTTP protobuf or gRPC by OTEL_EXPORTER_OTLP_PROTOCOL
// (the traces-specific variable first). Both clients read the endpoint,
// headers, compression, TLS and timeout variables themselves; the spans are
// encoded by otlpExporter.
func newExporter(ctx context.Context, getenv Getenv, res *resource.Resource) (exporter, error) {
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
	exp, err := newOTLPExporter(ctx, client, res, scope)
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
	if err := t.batch.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// Flush exports the spans ended so far.
func (t *Tracer) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.batch.Flush(ctx)
}

// StartServer starts the server span of one client request, continuing the
// trace of an incoming traceparent.
//
// The sampler decides on the trace ID and the parent alone (as every sampler
// OTEL_TRACES_SAMPLER can name does), so a configured tracer that does not
// sample a request builds nothing for it: no name, no attributes, no record.
func (t *Tracer) StartServer(r *http.Request, route string) (context.Context, Span) {
	if t == nil {
		return r.Context(), Span{}
	}
	ctx := r.Context()
	if _, ok := r.Header["Traceparent"]; ok { // Extract finds nothing without it
		ctx = t.prop.Extract(ctx, traceHeaders(r.Header))
	}
	ctx, rec := t.start(ctx, route, trace.SpanKindServer)
	if rec == nil {
		return ctx, Span{}
	}
	rec.name = serverName(r.Method, route)
	rec.add(
		attribute.String("http.request.method", r.Method),
		attribute.String("http.route", route),
		attribute.String("url.path", r.URL.Path),
	)
	return ctx, spanOf(rec)
}

// serverName is a server span's name: the method and route, the usual ones
// made once.
func serverName(method, route string) string {
	if method == http.MethodPost {
		switch route {
		case "/v1/messages":
			return "POST /v1/messages"
		case "/v1/messages/count_tokens":
			return "POST /v1/messages/count_tokens"
		}
	}
	return method + " " + route
}

// chatName is a chat span's name, `{operation} {model}`: the last one made
// is kept for the next call, nearly always of the same model.
func (t *Tracer) chatName(op, model string) string {
	if n := t.lastChatName.Load(); n != nil && n.op == op && n.model == model {
		return n.name
	}
	n := &spanName{op: op, model: strings.Clone(model), name: op + " " + model}
	t.lastChatName.Store(n)
	return n.name
}

type spanName struct{ op, model, name string }

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
	ctx, rec := t.start(ctx, op, trace.SpanKindClient)
	if rec == nil {
		return ctx, Span{}
	}
	rec.name = t.chatName(op, req.Model)
	rec.add(
		attribute.String(AttrProviderName, "anthropic"),
		attribute.String(AttrOperationName, op),
		attribute.String(AttrRequestModel, req.Model),
		attribute.Bool(AttrRequestStream, req.Stream),
		attribute.String(AttrTenant, req.Tenant),
		attribute.String(AttrPolicyMode, req.PolicyMode),
		attribute.Int(AttrMemoryRound, req.Round),
	)
	if req.MaxTokens > 0 {
		rec.add(attribute.Int64(AttrRequestMaxTokens, req.MaxTokens))
	}
	if len(req.Edits) > 0 {
		rec.setStrings(AttrEditsWritten, req.Edits)
	}
	return ctx, spanOf(rec)
}

// StartMemory starts the span of one memory command run by the proxy.
func (t *Tracer) StartMemory(ctx context.Context, command string) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	ctx, rec := t.start(ctx, "memory", trace.SpanKindInternal)
	if rec == nil {
		return ctx, Span{}
	}
	rec.name = "memory " + command
	rec.add(attribute.String(AttrMemoryCommand, command))
	return ctx, spanOf(rec)
}

// Inject writes the traceparent of the span in ctx into h, so the upstream
// sees the proxy's span as the parent. A span the sampler left out is not a
// hop of the trace: nothing is written, and the client's traceparent, if it
// sent one, goes upstream as it came.
func (t *Tracer) Inject(ctx context.Context, h http.Header) {
	if sc := trace.SpanContextFromContext(ctx); t != nil && sc.IsSampled() {
		setTraceparent(h, sc)
	}
}

// KeepClientTrace puts the client's trace context headers (from client)
// back into h, an upstream header Inject may have written into.
func KeepClientTrace(h, client http.Header) {
	for _, k := range [...]string{"Traceparent", "Tracestate"} {
		if v, ok := client[k]; ok {
			h[k] = v
		} else {
			delete(h, k)
		}
	}
}

// setTraceparent writes sc as the W3C trace context headers, as the
// propagator writes them (version 00, the sampled and random flags), with
// the header names already canonical.
func setTraceparent(h http.Header, sc trace.SpanContext) {
	if ts := sc.TraceState().String(); ts != "" {
		h["Tracestate"] = []string{ts}
	}
	var b [55]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))})
	h["Traceparent"] = []string{string(b[:])}
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
