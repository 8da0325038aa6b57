package tracing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/ctxproxy/ctxproxy/internal/otlptest"
	"github.com/ctxproxy/ctxproxy/tracing"
)

func env(m map[string]string) tracing.Getenv {
	return func(k string) string { return m[k] }
}

func TestFromEnv(t *testing.T) {
	t.Run("no endpoint means tracing off and a nil tracer", func(t *testing.T) {
		tr, err := tracing.FromEnv(context.Background(), env(nil), "test")
		if err != nil || tr != nil {
			t.Fatalf("FromEnv = %v, %v; want nil, nil", tr, err)
		}
		// Every method of the nil tracer is safe.
		r := httptest.NewRequest("POST", "/v1/messages", nil)
		ctx, sp := tr.StartServer(r, "/v1/messages")
		_, chat := tr.StartChat(ctx, tracing.ChatRequest{Model: "m"})
		chat.EndChat(tracing.ChatResponse{Status: 200})
		sp.End()
		tr.Inject(ctx, http.Header{})
		if err := tr.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an unknown protocol is an error that names it", func(t *testing.T) {
		_, err := tracing.FromEnv(context.Background(), env(map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
		}), "test")
		if err == nil {
			t.Fatal("want an error for http/json")
		}
	})
	t.Run("OTEL_SDK_DISABLED turns it off", func(t *testing.T) {
		tr, err := tracing.FromEnv(context.Background(), env(map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true",
		}), "test")
		if err != nil || tr != nil {
			t.Fatalf("FromEnv = %v, %v; want nil, nil", tr, err)
		}
	})
}

func TestExportBothProtocols(t *testing.T) {
	for _, proto := range []string{"http/protobuf", "grpc"} {
		t.Run(proto+" exports a continued trace with GenAI attributes", func(t *testing.T) {
			var rc *otlptest.Receiver
			var endpoint string
			if proto == "grpc" {
				rc, endpoint = otlptest.StartGRPC(t)
			} else {
				rc, endpoint = otlptest.StartHTTP(t)
			}
			// The SDK reads the real environment.
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", proto)
			t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
			t.Setenv("OTEL_SERVICE_NAME", "ctxproxy-test")
			tr, err := tracing.FromEnv(context.Background(), nil, "v-test")
			if err != nil || tr == nil {
				t.Fatalf("FromEnv = %v, %v", tr, err)
			}
			r := httptest.NewRequest("POST", "/v1/messages", nil)
			const parentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
			r.Header.Set("Traceparent", "00-"+parentTrace+"-00f067aa0ba902b7-01")
			ctx, srv := tr.StartServer(r, "/v1/messages")
			cctx, chat := tr.StartChat(ctx, tracing.ChatRequest{Model: "claude-sonnet-4-5", MaxTokens: 1024, Stream: true, Tenant: "acme", PolicyMode: "enforce"})
			out := http.Header{}
			tr.Inject(cctx, out)
			chat.EndChat(tracing.ChatResponse{Status: 200, ID: "msg_1", Model: "claude-sonnet-4-5-20250929", StopReason: "end_turn",
				InputTokens: 10, OutputTokens: 5, CacheRead: 100, CacheCreation: 7})
			srv.End()
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := rc.Spans()
			if len(spans) != 2 {
				t.Fatalf("got %d spans, want 2: %+v", len(spans), spans)
			}
			c, s := spans[1], spans[0] // sorted by name: "POST …" before "chat …"
			if c.Name != "chat claude-sonnet-4-5" || c.Kind != tracepb.Span_SPAN_KIND_CLIENT {
				t.Fatalf("client span = %q kind %v", c.Name, c.Kind)
			}
			if s.TraceID != parentTrace || c.TraceID != parentTrace {
				t.Errorf("trace ids %s, %s; want the incoming %s", s.TraceID, c.TraceID, parentTrace)
			}
			if s.ParentSpanID != "00f067aa0ba902b7" || c.ParentSpanID != s.SpanID {
				t.Errorf("parents: server %s, client %s (server span %s)", s.ParentSpanID, c.ParentSpanID, s.SpanID)
			}
			if want := "00-" + parentTrace + "-" + c.SpanID + "-01"; out.Get("Traceparent") != want {
				t.Errorf("upstream traceparent %q, want %q", out.Get("Traceparent"), want)
			}
			for k, want := range map[string]any{
				"gen_ai.provider.name":                     "anthropic",
				"gen_ai.operation.name":                    "chat",
				"gen_ai.request.model":                     "claude-sonnet-4-5",
				"gen_ai.request.max_tokens":                int64(1024),
				"gen_ai.response.id":                       "msg_1",
				"gen_ai.response.model":                    "claude-sonnet-4-5-20250929",
				"gen_ai.usage.input_tokens":                int64(117),
				"gen_ai.usage.output_tokens":               int64(5),
				"gen_ai.usage.cache_read.input_tokens":     int64(100),
				"gen_ai.usage.cache_creation.input_tokens": int64(7),
				"ctxproxy.tenant":                          "acme",
			} {
				if got := c.Attrs[k]; got != want {
					t.Errorf("%s = %#v, want %#v", k, got, want)
				}
			}
			if fr, _ := c.Attrs["gen_ai.response.finish_reasons"].([]any); len(fr) != 1 || fr[0] != "end_turn" {
				t.Errorf("finish_reasons = %#v", c.Attrs["gen_ai.response.finish_reasons"])
			}
			if c.Resource["service.name"] != "ctxproxy-test" || c.Resource["service.version"] != "v-test" {
				t.Errorf("resource = %v", c.Resource)
			}
		})
	}
}

// The proxy leaves message contents to the API to validate, so recorded input messages may hold
// bytes that are not UTF-8; the exporter would refuse the whole batch for one such string.
func TestInputMessagesNotUTF8StillExport(t *testing.T) {
	rc, endpoint := otlptest.StartHTTP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	tr, err := tracing.FromEnv(context.Background(), nil, "v-test")
	if err != nil || tr == nil {
		t.Fatalf("FromEnv = %v, %v", tr, err)
	}
	r := httptest.NewRequest("POST", "/v1/messages", nil)
	ctx, srv := tr.StartServer(r, "/v1/messages")
	_, chat := tr.StartChat(ctx, tracing.ChatRequest{Model: "m"})
	chat.SetInput("", "[{\"role\":\"user\",\"content\":\"caf\xe9\"}]")
	chat.EndChat(tracing.ChatResponse{Status: 200})
	srv.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatalf("export with a non-UTF-8 input message: %v", err)
	}
	spans := rc.Spans()
	if len(spans) != 2 {
		t.Fatalf("got %d spans, want 2", len(spans))
	}
	if got := spans[1].Attrs["gen_ai.input.messages"]; got != "[{\"role\":\"user\",\"content\":\"caf\uFFFD\"}]" {
		t.Errorf("gen_ai.input.messages = %q", got)
	}
}

// A tracer that is configured but does not sample a request (OTEL_TRACES_SAMPLER=always_off, or a
// ratio that left it out) must cost the request path no more than the SDK's own spans do: the names
// and attributes are built only for a span that records.
func TestASpanNotSampledBuildsNoAttributes(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	tr := tracing.WithExporter(tracetest.NewInMemoryExporter())
	defer tr.Shutdown(context.Background())
	sdk := sdktrace.NewTracerProvider()
	defer sdk.Shutdown(context.Background())
	bare := sdk.Tracer("bare")

	r := httptest.NewRequest("POST", "/v1/messages", nil)
	edits := []string{"clear_thinking_20251015", "clear_tool_uses_20250919"}
	memInput := []byte(`{"command":"view","path":"/memories"}`)
	ours := testing.AllocsPerRun(200, func() {
		ctx, srv := tr.StartServer(r, "/v1/messages")
		cctx, chat := tr.StartChat(ctx, tracing.ChatRequest{
			Model: "claude-sonnet-4-5", MaxTokens: 1024, Stream: true, Tenant: "acme", PolicyMode: "enforce",
			Edits: edits, Round: 1,
		})
		_ = 0
		_, mem := tr.StartMemory(cctx, "view")
		mem.SetMemoryInput(memInput)
		mem.EndMemory(true, 42)
		chat.EndChat(tracing.ChatResponse{Status: 200, ID: "msg_2", Model: "claude-sonnet-4-5", StopReason: "end_turn", InputTokens: 10})
		srv.EndServer(200, "acme")
	})
	server := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	client := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
	internal := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	sdkOwn := testing.AllocsPerRun(200, func() {
		ctx, srv := bare.Start(r.Context(), "server", server...)
		cctx, chat := bare.Start(ctx, "chat", client...)
		_, mem := bare.Start(cctx, "memory", internal...)
		mem.End()
		chat.End()
		srv.End()
	})
	if ours > sdkOwn {
		t.Errorf("three spans not sampled cost %v allocations, the SDK's own three %v: attributes were built for spans that drop them", ours, sdkOwn)
	}
}

// A span's attributes reach the SDK when it ends, however it ends: a chat
// span ended by End after Fail (no reply) keeps its request's attributes
// beside the error, and ending it again adds nothing.
func TestAttributesOfASpanEndedWithoutItsReply(t *testing.T) {
	mem := &keptSpans{}
	tr := tracing.WithExporter(mem)
	r := httptest.NewRequest("POST", "/v1/messages", nil)
	ctx, srv := tr.StartServer(r, "/v1/messages")
	_, chat := tr.StartChat(ctx, tracing.ChatRequest{Model: "claude-sonnet-4-5", Tenant: "acme", Edits: []string{"clear_thinking_20251015"}})
	chat.Set(attribute.Int("extra", 1))
	chat.Fail("timeout", "upstream call failed")
	chat.End()
	chat.End()
	srv.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := tracetest.SpanStubsFromReadOnlySpans(mem.spans)
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	got := map[string]map[string]string{}
	for _, s := range spans {
		m := map[string]string{}
		for _, kv := range s.Attributes {
			m[string(kv.Key)] = kv.Value.Emit()
		}
		if len(m) != len(s.Attributes) {
			t.Errorf("%s: attributes repeated: %v", s.Name, s.Attributes)
		}
		got[s.Name] = m
		if s.Name == "chat claude-sonnet-4-5" && s.Status.Code != codes.Error {
			t.Errorf("chat span status %v, want Error", s.Status)
		}
	}
	for name, want := range map[string]map[string]string{
		"chat claude-sonnet-4-5": {"gen_ai.request.model": "claude-sonnet-4-5", "ctxproxy.tenant": "acme",
			"ctxproxy.edits.written": `["clear_thinking_20251015"]`, "extra": "1", "error.type": "timeout"},
		"POST /v1/messages": {"http.request.method": "POST", "http.route": "/v1/messages", "url.path": "/v1/messages"},
	} {
		for k, v := range want {
			if got[name][k] != v {
				t.Errorf("%s: %s = %q, want %q (all: %v)", name, k, got[name][k], v, got[name])
			}
		}
	}
}

// keptSpans keeps what it is given past Shutdown (tracetest's in-memory
// exporter forgets it then).
type keptSpans struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func (k *keptSpans) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.spans = append(k.spans, s...)
	return nil
}

func (k *keptSpans) Shutdown(context.Context) error { return nil }
