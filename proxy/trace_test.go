package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ctxproxy/ctxproxy/tracing"
)

// What the upstream sees of the trace: the proxy's own call span when it
// samples, else the client's traceparent untouched (or none).
func TestUpstreamTraceparent(t *testing.T) {
	const incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const body = `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, sampler, sent string
		want                func(got string) bool
	}{
		{"sampled: the proxy's call span is the parent", "always_on", incoming, func(got string) bool {
			return strings.HasPrefix(got, "00-4bf92f3577b34da6a3ce929d0e0e4736-") && got != incoming && strings.HasSuffix(got, "-01")
		}},
		{"not sampled: the client's traceparent passes as it came", "always_off", incoming, func(got string) bool { return got == incoming }},
		{"not sampled and none sent: none upstream", "always_off", "", func(got string) bool { return got == "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_SAMPLER", tc.sampler)
			tr := tracing.WithExporter(discardExporter{})
			t.Cleanup(func() { tr.Shutdown(context.Background()) })
			h := newHarness(t, func(c *Config) { c.Tracer = tr })
			var hdr []string
			if tc.sent != "" {
				hdr = []string{"Traceparent", tc.sent}
			}
			resp := h.post("/v1/messages", keyAcme, body, hdr...)
			if b := readAll(t, resp.Body); resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if got := h.lastUpstream("/v1/messages").Header.Get("Traceparent"); !tc.want(got) {
				t.Fatalf("upstream traceparent %q (sent %q)", got, tc.sent)
			}
			// The pass-through routes follow the same rule.
			req, _ := http.NewRequest(http.MethodGet, h.proxy.URL+"/v1/models", nil)
			req.Header.Set("X-Api-Key", keyAcme)
			if tc.sent != "" {
				req.Header.Set("Traceparent", tc.sent)
			}
			mresp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, mresp.Body)
			if got := h.lastUpstream("/v1/models").Header.Get("Traceparent"); !tc.want(got) {
				t.Fatalf("pass-through upstream traceparent %q (sent %q)", got, tc.sent)
			}
		})
	}
}

// The memory loop's rounds are calls of their own: each round's upstream
// request names its own call span as the parent, none an earlier round's,
// and the exported chat spans are those parents.
func TestEachMemoryRoundSendsItsOwnTraceparent(t *testing.T) {
	const incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			spans := &keptChatSpans{}
			tr := tracing.WithExporter(spans)
			h := newHarness(t, func(c *Config) { c.Tracer = tr })
			h.fake.SetResponder(memorySession())
			body := simpleBody
			if stream {
				body = withStream(body)
			}
			resp := h.post("/v1/messages", keyAcme, body, "Traceparent", incoming)
			if b := readAll(t, resp.Body); resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			reqs := h.fake.Requests()
			if len(reqs) != 5 {
				t.Fatalf("%d upstream calls, want 5", len(reqs))
			}
			seen := map[string]bool{}
			for i, r := range reqs {
				tp := r.Header.Get("Traceparent")
				parts := strings.Split(tp, "-")
				if len(parts) != 4 || parts[1] != "4bf92f3577b34da6a3ce929d0e0e4736" || seen[parts[2]] {
					t.Fatalf("round %d: traceparent %q (earlier parents %v)", i, tp, seen)
				}
				seen[parts[2]] = true
			}
			chats := spans.chatIDs()
			if len(chats) != 5 {
				t.Fatalf("%d chat spans, want 5", len(chats))
			}
			for _, id := range chats {
				if !seen[id] {
					t.Errorf("chat span %s is no upstream request's parent (parents %v)", id, seen)
				}
			}
		})
	}
}

// keptChatSpans keeps the span IDs of the chat spans it is given.
type keptChatSpans struct {
	mu  sync.Mutex
	ids []string
}

func (k *keptChatSpans) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range spans {
		if strings.HasPrefix(s.Name(), "chat ") {
			k.ids = append(k.ids, s.SpanContext().SpanID().String())
		}
	}
	return nil
}

func (k *keptChatSpans) Shutdown(context.Context) error { return nil }

func (k *keptChatSpans) chatIDs() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.ids...)
}
