package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/shadow"
	"github.com/ctxproxy/ctxproxy/tokens"
	"github.com/ctxproxy/ctxproxy/tracing"
)

const keyLab = "sk-ant-test-lab"

// labPolicies are testPolicies with tenant lab: memory proxy, its own edits, and two shadow
// candidates measured on every request.
func labPolicies(memory string) map[string]string {
	p := testPolicies()
	p["lab.yaml"] = `tenant: lab
api_keys_sha256: ["` + sha(keyLab) + `"]
context_management:
  mode: enforce
  clear_tool_uses: { trigger: { type: tool_uses, value: 1 }, keep: { type: tool_uses, value: 1 } }
memory: { mode: ` + memory + ` }
shadow:
  sample: 1
  candidates:
    - name: keep-2
      context_management:
        mode: enforce
        clear_tool_uses: { trigger: { type: tool_uses, value: 1 }, keep: { type: tool_uses, value: 2 } }
    - name: no-edits
      context_management: { mode: off }
`
	return p
}

// labHarness is a harness whose proxy has a ledger and a policy lab; done waits for the lab
// and the ledger and reads the ledger back.
func labHarness(t *testing.T, memory string, opts ...func(*Config)) (*harness, func() []tokens.Call) {
	t.Helper()
	ledger, err := tokens.OpenLedger(t.Context(), "file:"+filepath.Join(t.TempDir(), "ledger.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ledger.Close() })
	prices := tokens.BuiltinPrices()
	metrics := tokens.NewMetrics([]string{"lab"}, prices.Models())
	rec := tokens.NewRecorder(prices, metrics, ledger, nil)
	var lab *shadow.Lab
	h := newHarnessWith(t, nil, labPolicies(memory), func(c *Config) {
		lab = shadow.New(shadow.Config{Upstream: c.Upstream, Recorder: rec, Metrics: metrics})
		c.Recorder, c.Metrics, c.Lab = rec, metrics, lab
		for _, o := range opts {
			o(c)
		}
	})
	return h, func() []tokens.Call {
		lab.Close(t.Context())
		if err := rec.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		calls, err := ledger.Query(t.Context(), tokens.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		return calls
	}
}

// toolTurns is a conversation with three tool uses, so the candidates' edits differ.
const toolTurns = `{"model":"claude-sonnet-4-5","max_tokens":100,"tools":[{"name":"bash","input_schema":{"type":"object"}}],"messages":[` +
	`{"role":"user","content":"go"},` +
	`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"` + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" + `"}]},` +
	`{"role":"assistant","content":[{"type":"tool_use","id":"t2","name":"bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"` + "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" + `"}]},` +
	`{"role":"assistant","content":[{"type":"tool_use","id":"t3","name":"bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t3","content":"ccc"}]}]}`

// countOf is what the fake's count_tokens answers for the request as candidate name rewrites it.
func countOf(t *testing.T, h *harness, name, body string) (in, orig int64) {
	t.Helper()
	set := h.pols.Current()
	pol, _ := set.Lookup(keyLab)
	c, ok := pol.Shadow.Candidate(name)
	if !ok {
		t.Fatalf("no candidate %s", name)
	}
	hdr := http.Header{}
	out, _, err := c.Policy.Rewrite([]byte(body), hdr)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, h.upstream.URL+"/v1/messages/count_tokens", strings.NewReader(string(shadow.CountBody(out))))
	req.Header = hdr
	req.Header.Set("X-Api-Key", keyLab)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("count_tokens %d %s", resp.StatusCode, b)
	}
	in = gjson.GetBytes(b, "input_tokens").Int()
	orig = in
	if o := gjson.GetBytes(b, "context_management.original_input_tokens"); o.Exists() {
		orig = o.Int()
	}
	return in, orig
}

func TestTheLabMeasuresEachCandidateOnceARequest(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			h, done := labHarness(t, "off")
			body := toolTurns
			if stream {
				body = withStream(body)
			}
			for range 3 {
				resp := h.post("/v1/messages", keyLab, body)
				if got := readAll(t, resp.Body); resp.StatusCode != 200 {
					t.Fatalf("status %d %s", resp.StatusCode, got)
				}
			}
			calls := done()
			real := map[string]bool{}
			lines := map[string]int{}
			for _, c := range calls {
				if c.Shadow == nil {
					real[c.RequestID] = true
				}
			}
			if len(real) != 3 {
				t.Fatalf("%d real calls in the ledger, want 3", len(real))
			}
			for _, c := range calls {
				sh := c.Shadow
				if sh == nil {
					continue
				}
				lines[sh.Name]++
				if !real[sh.Shadows] {
					t.Errorf("%s shadows %q, not a real call's request_id", sh.Name, sh.Shadows)
				}
				in, orig := countOf(t, h, sh.Name, body)
				if sh.InputTokens != in || sh.OriginalInputTokens != orig {
					t.Errorf("%s: input %d, original %d; the fake counts %d, %d", sh.Name, sh.InputTokens, sh.OriginalInputTokens, in, orig)
				}
			}
			if lines["keep-2"] != 3 || lines["no-edits"] != 3 {
				t.Errorf("lines per candidate %v, want 3 each", lines)
			}
		})
	}
}

func TestTheLabMeasuresOnlyTheMemoryLoopsFirstCall(t *testing.T) {
	h, done := labHarness(t, "proxy")
	h.fake.SetResponder(fakeapi.Script(
		fakeapi.Blocks(fakeapi.MemoryView("/memories")),
		fakeapi.TextReply("done"),
	))
	resp := h.post("/v1/messages", keyLab, simpleBody)
	if got := readAll(t, resp.Body); resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, got)
	}
	calls := done()
	var first string
	shadows := 0
	for _, c := range calls {
		if c.Shadow == nil && first == "" {
			first = c.RequestID
		}
		if c.Shadow != nil {
			shadows++
			if c.Shadow.Shadows != first {
				t.Errorf("%s shadows %q, want the first call %q", c.Shadow.Name, c.Shadow.Shadows, first)
			}
		}
	}
	if len(calls)-shadows != 2 || shadows != 2 {
		t.Errorf("%d real calls and %d shadow lines, want 2 and one per candidate (2)", len(calls)-shadows, shadows)
	}
}

func TestTheLabLeavesThreadsCountTokensAndFailuresAlone(t *testing.T) {
	h, done := labHarness(t, "off")
	resp := h.post("/v1/messages", keyLab, threadCreate(false, ""), "Anthropic-Beta", threadBeta)
	readAll(t, resp.Body)
	resp = h.post("/v1/messages/count_tokens", keyLab, toolTurns)
	readAll(t, resp.Body)
	h.fake.SetResponder(func(*fakeapi.Request) fakeapi.Reply { return fakeapi.ErrorReply(529, "overloaded_error", "busy") })
	resp = h.post("/v1/messages", keyLab, toolTurns)
	readAll(t, resp.Body)
	for _, c := range done() {
		if c.Shadow != nil {
			t.Errorf("a shadow line for a threaded, count_tokens or failed call: %+v", c.Shadow)
		}
	}
}

// The lab's count_tokens calls carry the client's trace context, as before
// tracing wrote a call's traceparent into the exchange's upstream header:
// they are no children of the call they shadow.
func TestTheLabSendsTheClientsTraceparent(t *testing.T) {
	const incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tr := tracing.WithExporter(discardExporter{})
	t.Cleanup(func() { tr.Shutdown(context.Background()) })
	h, done := labHarness(t, "off", func(c *Config) { c.Tracer = tr })
	resp := h.post("/v1/messages", keyLab, toolTurns, "Traceparent", incoming)
	if got := readAll(t, resp.Body); resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, got)
	}
	done()
	call := h.lastUpstream("/v1/messages").Header.Get("Traceparent")
	if call == incoming || call == "" {
		t.Fatalf("the call's traceparent %q: want the proxy's call span", call)
	}
	counts := 0
	for _, r := range h.fake.Requests() {
		if r.Path == "/v1/messages/count_tokens" {
			counts++
			if got := r.Header.Get("Traceparent"); got != incoming {
				t.Errorf("a lab count_tokens call sent traceparent %q, want the client's %q", got, incoming)
			}
		}
	}
	if counts == 0 {
		t.Fatal("the lab measured nothing")
	}
}
