package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BenchmarkRequestSpans is what tracing adds to one proxied request that is
// sampled: its server span and one chat span with the attributes the proxy
// sets, ended, batched and exported. "otlp-http" exports over OTLP/HTTP to a
// sink in this process that reads and drops each body (the bench's row 4t in
// miniature); "discard" hands the spans to an SDK exporter that drops them,
// the tests' path, which decodes each span's attributes back: not what a
// serving proxy pays. cpu-ns/op is the process's CPU
// per request (getrusage), the batch processor's and the export's goroutines
// included: on a loaded 2-core machine it holds stiller than ns/op.
func BenchmarkRequestSpans(b *testing.B) {
	var received atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		received.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer sink.Close()
	for _, exp := range []string{"discard", "otlp-http"} {
		b.Run(exp, func(b *testing.B) {
			var tr *Tracer
			if exp == "discard" {
				tr = WithExporter(discard{})
			} else {
				b.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", sink.URL+"/v1/traces")
				var err error
				if tr, err = FromEnv(context.Background(), nil, "bench"); err != nil {
					b.Fatal(err)
				}
			}
			received.Store(0)
			r := httptest.NewRequest("POST", "/v1/messages", nil)
			r.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			edits := []string{"clear_thinking_20251015"}
			applied := []string{"clear_thinking_20251015"}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			n := 0
			for b.Loop() {
				if n++; n%256 == 0 {
					// A batch (512 spans) at a time: faster than the exporter,
					// the loop would fill the processor's queue and have
					// spans dropped, not exported.
					tr.Flush(context.Background())
				}
				ctx, srv := tr.StartServer(r, "/v1/messages")
				_, chat := tr.StartChat(ctx, ChatRequest{
					Model: "claude-sonnet-4-5", MaxTokens: 1024, Tenant: "acme", PolicyMode: "enforce", Edits: edits,
				})
				chat.EndChat(ChatResponse{
					Status: 200, ID: "msg_01XFDUDYJgAACzvnptvVoYEL", Model: "claude-sonnet-4-5-20250929", StopReason: "end_turn",
					InputTokens: 1200, OutputTokens: 85, CacheRead: 900, AppliedEdits: applied, ClearedInput: 300, CostUSD: 0.0042,
				})
				srv.EndServer(200, "acme")
			}
			if err := tr.Shutdown(context.Background()); err != nil { // every span exported before the clock stops
				b.Fatal(err)
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			if exp != "discard" {
				// The batch processor drops spans its queue has no room for:
				// a run that exported less did less.
				b.ReportMetric(float64(received.Load())/float64(b.N), "exported-B/op")
			}
		})
	}
}

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// processCPU is the process's user and system time so far, in nanoseconds.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
