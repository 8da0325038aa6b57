package proxy

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/capabilities"
	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// withModels has the harness's policies decide from the fake's models endpoint, read with acme's
// and beta's keys (as the binary reads a tenant's own key), and the proxy feed what it learns
// back (Config.Models). The caller refreshes it once the harness is up.
func withModels(models **capabilities.Cache) harnessOpt {
	return func(c *Config) {
		*models = capabilities.New(capabilities.Options{Upstream: c.Upstream, Log: c.Log,
			Tenants: func() []capabilities.Tenant {
				return []capabilities.Tenant{{Name: "acme", Key: keyAcme}, {Name: "beta", Key: keyBeta}}
			}})
		c.Models = *models
	}
}

// refusingHarness is a harness whose models are read, with the fake refusing clear_thinking under
// between_tools when refuses says so (the unverified rule, switched).
func refusingHarness(t *testing.T, refuses bool, opts ...harnessOpt) *harness {
	t.Helper()
	var models *capabilities.Cache
	h := newHarness(t, append([]harnessOpt{withModels(&models)}, opts...)...)
	if err := models.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	o := h.fake.CurrentOptions()
	o.December.BetweenToolsRefusesClearThinking = refuses
	h.fake.SetOptions(o)
	return h
}

// betweenToolsBody is a between_tools request to claude-opus-4-8, whose capabilities list
// between_tools: ctxproxy counts it as thinking and adds acme's clear_thinking.
func betweenToolsBody(stream bool, edits string) string {
	b := `{"model":"claude-opus-4-8","max_tokens":100,"thinking":{"type":"between_tools"}`
	if edits != "" {
		b += `,"context_management":{"edits":` + edits + `}`
	}
	b += `,"messages":[{"role":"user","content":"hi"}]}`
	if stream {
		b = withStream(b)
	}
	return b
}

// messagesCalls is what the fake saw on /v1/messages from the seq'th request on: each call's
// status and whether it carried clear_thinking.
func messagesCalls(f *fakeapi.API, from int64) (status []int, clear []bool) {
	for _, r := range f.Requests() {
		if r.Path != "/v1/messages" || r.Seq < from {
			continue
		}
		status = append(status, r.Status)
		clear = append(clear, strings.Contains(gjson.GetBytes(r.Body, "context_management.edits.#.type").Raw, policy.EditClearThinking))
	}
	return status, clear
}

func lastSeq(f *fakeapi.API) int64 {
	rs := f.Requests()
	if len(rs) == 0 {
		return 0
	}
	return rs[len(rs)-1].Seq
}

// Against both behaviours of the fake (whether the API takes clear_thinking with between_tools
// is unverified): where it takes it, ctxproxy's clear_thinking goes up and stays; where it
// refuses it, the request goes once more without it (through the memory loop's rounds too, which
// build on the request as resent), the client never sees the refusal, the refused call is in no
// ledger line, and the next request for that tenant, model and thinking type goes without it at
// once.
func TestAClearThinkingTheUpstreamRefusesUnderBetweenToolsIsTakenBackAndLearned(t *testing.T) {
	for _, refuses := range []bool{false, true} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("refuses=%v/stream=%v", refuses, stream), func(t *testing.T) {
				prices, err := tokens.LoadPrices("../tokens/builtin_prices.yaml")
				if err != nil {
					t.Fatal(err)
				}
				ledger, err := tokens.OpenLedger(t.Context(), "file:"+filepath.Join(t.TempDir(), "ledger.jsonl"))
				if err != nil {
					t.Fatal(err)
				}
				defer ledger.Close()
				rec := tokens.NewRecorder(prices, nil, ledger, nil)
				h := refusingHarness(t, refuses, func(c *Config) { c.Recorder = rec })
				h.fake.SetResponder(fakeapi.Script(
					fakeapi.Blocks(fakeapi.MemoryView("/memories")),
					fakeapi.Blocks(fakeapi.Text("done")),
				))

				// The first request: a memory round, then the answer.
				from := lastSeq(h.fake) + 1
				resp := h.post("/v1/messages", keyAcme, betweenToolsBody(stream, ""))
				got := readAll(t, resp.Body)
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, got)
				}
				if stream {
					got = accumulate(t, got)
				}
				if text := gjson.Get(got, "content.#(type==\"text\").text").Str; text != "done" {
					t.Fatalf("reply %s", got)
				}
				status, clear := messagesCalls(h.fake, from)
				wantStatus, wantClear := []int{200, 200}, []bool{true, true}
				if refuses {
					wantStatus, wantClear = []int{400, 200, 200}, []bool{true, false, false}
				}
				if !slices.Equal(status, wantStatus) || !slices.Equal(clear, wantClear) {
					t.Fatalf("upstream calls: status %v clear_thinking %v, want %v %v", status, clear, wantStatus, wantClear)
				}

				// The next one for the same model and thinking type.
				from = lastSeq(h.fake) + 1
				resp = h.post("/v1/messages", keyAcme, betweenToolsBody(stream, ""))
				if got := readAll(t, resp.Body); resp.StatusCode != 200 {
					t.Fatalf("second request: status %d: %s", resp.StatusCode, got)
				}
				status, clear = messagesCalls(h.fake, from)
				if !slices.Equal(status, []int{200, 200}) || !slices.Equal(clear, []bool{!refuses, !refuses}) {
					t.Fatalf("second request's calls: status %v clear_thinking %v, want no refused call", status, clear)
				}

				learned := h.logs.FilterMessageSnippet("refused an edit ctxproxy added").All()
				if n := len(learned); refuses != (n == 1) || n > 1 {
					t.Fatalf("%d refusal log lines", n)
				} else if refuses && (learned[0].ContextMap()["tenant"] != "acme" || learned[0].ContextMap()["model"] != "claude-opus-4-8") {
					t.Errorf("log line %v", learned[0].ContextMap())
				}
				var refusedLines int
				for _, l := range h.logs.FilterMessage("request").All() {
					if r, _ := l.ContextMap()["edits_refused"].([]any); len(r) == 1 && r[0] == policy.EditClearThinking {
						refusedLines++
						if l.ContextMap()["upstream_calls"] != int64(3) {
							t.Errorf("request log %v: the refused call is one of its calls", l.ContextMap())
						}
					}
				}
				if refusedLines != map[bool]int{false: 0, true: 1}[refuses] {
					t.Errorf("%d request log lines name the refused edit", refusedLines)
				}
				if err := rec.Close(t.Context()); err != nil {
					t.Fatal(err)
				}
				calls, err := ledger.Query(t.Context(), tokens.Filter{})
				if err != nil {
					t.Fatal(err)
				}
				if len(calls) != 4 {
					t.Fatalf("ledger has %d lines, want one per accepted call (4)", len(calls))
				}
				for _, c := range calls {
					if c.Status != 200 {
						t.Errorf("a ledger line for a refused call: %+v", c)
					}
				}
			})
		}
	}
}

// What is not ctxproxy's to take back is relayed as the upstream sent it: a clear_thinking the
// client sent itself, and any other 400.
func TestARefusalOfTheClientsOwnEditIsRelayedUntouched(t *testing.T) {
	const ct = `[{"type":"clear_thinking_20251015"}]`
	for _, tt := range []struct {
		name, key, body string
		stream          bool
		message         string
	}{
		{"the client's clear_thinking (enforce)", keyAcme, betweenToolsBody(false, ct), false, "requires extended thinking"},
		{"the client's clear_thinking (enforce, streamed)", keyAcme, betweenToolsBody(true, ct), true, "requires extended thinking"},
		{"the client's clear_thinking (default mode keeps it)", keyBeta, betweenToolsBody(false, `[{"type":"clear_tool_uses_20250919"},{"type":"clear_thinking_20251015"}]`), false, "requires extended thinking"},
		{"another 400 with ctxproxy's clear_thinking in", keyAcme, `{"model":"claude-opus-4-8","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[]}`, false, "messages"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := refusingHarness(t, true)
			from := lastSeq(h.fake) + 1
			resp := h.post("/v1/messages", tt.key, tt.body)
			got := readAll(t, resp.Body)
			status, _ := messagesCalls(h.fake, from)
			if resp.StatusCode != 400 || !slices.Equal(status, []int{400}) {
				t.Fatalf("client got %d %s; upstream calls %v, want the one refusal relayed", resp.StatusCode, got, status)
			}
			r := h.lastUpstream("/v1/messages")
			if want := fmt.Sprintf(`{"type":"error","error":{"type":"invalid_request_error","message":%q},"request_id":%q}`, r.Error.Message, r.ID); got != want {
				t.Errorf("client got %s\nupstream sent %s", got, want)
			}
			if !strings.Contains(got, tt.message) {
				t.Errorf("refusal %s does not say %q", got, tt.message)
			}
			if n := len(h.logs.FilterMessageSnippet("refused an edit ctxproxy added").All()); n != 0 {
				t.Errorf("learned from a refusal that is not ctxproxy's (%d log lines)", n)
			}
		})
	}
}

// count_tokens gets the same rewrite, so the same refusal: it is taken back and learned too (the
// learned refusal then also spares the Messages call).
func TestCountTokensTakesBackARefusedClearThinkingToo(t *testing.T) {
	h := refusingHarness(t, true)
	body := `{"model":"claude-opus-4-8","thinking":{"type":"between_tools"},"messages":[{"role":"user","content":"hi"}]}`
	from := lastSeq(h.fake) + 1
	resp := h.post("/v1/messages/count_tokens", keyAcme, body)
	if got := readAll(t, resp.Body); resp.StatusCode != 200 || !gjson.Get(got, "input_tokens").Exists() {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	var status []int
	for _, r := range h.fake.Requests() {
		if r.Seq >= from && r.Path == "/v1/messages/count_tokens" {
			status = append(status, r.Status)
		}
	}
	if !slices.Equal(status, []int{400, 200}) {
		t.Fatalf("count_tokens calls %v, want the refusal and the resend", status)
	}
	from = lastSeq(h.fake) + 1
	resp = h.post("/v1/messages", keyAcme, betweenToolsBody(false, ""))
	if got := readAll(t, resp.Body); resp.StatusCode != 200 {
		t.Fatalf("messages: status %d: %s", resp.StatusCode, got)
	}
	if status, clear := messagesCalls(h.fake, from); !slices.Equal(status, []int{200}) || clear[0] {
		t.Errorf("messages calls %v clear_thinking %v: the refusal learned from count_tokens should hold", status, clear)
	}
}
