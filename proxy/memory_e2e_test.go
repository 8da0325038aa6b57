package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/apikey"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/testwait"
)

// The agent session the issue names: view, create, str_replace, view, then
// an answer. Each round states its usage so the sums can be checked.
func memorySession() func(*fakeapi.Request) fakeapi.Reply {
	u := func(in, out int64) *fakeapi.Usage { return &fakeapi.Usage{InputTokens: in, OutputTokens: out} }
	return fakeapi.Script(
		fakeapi.Reply{Content: []jsonRaw{fakeapi.Text("Let me check my memory."), fakeapi.MemoryView("/memories")}, Usage: u(100, 10)},
		fakeapi.Reply{Content: []jsonRaw{fakeapi.MemoryCreate("/memories/prefs.md", "# Preferences\n- tea\n")}, Usage: u(200, 20)},
		fakeapi.Reply{Content: []jsonRaw{fakeapi.MemoryStrReplace("/memories/prefs.md", "- tea", "- green tea")}, Usage: u(300, 30)},
		fakeapi.Reply{Content: []jsonRaw{fakeapi.MemoryView("/memories/prefs.md")}, Usage: u(400, 40)},
		fakeapi.Reply{Content: []jsonRaw{fakeapi.Text("You like green tea.")}, Usage: u(500, 50)},
	)
}

func withStream(body string) string {
	out, _ := sjson.Set(body, "stream", true)
	return out
}

func TestMemoryLoopRunsTheModelsCallsAndAnswersOnce(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			h := newHarness(t)
			h.fake.SetResponder(memorySession())
			body := simpleBody
			if stream {
				body = withStream(body)
			}
			resp := h.post("/v1/messages", keyAcme, body)
			got := readAll(t, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
			msg := got
			if stream {
				msg = accumulate(t, got)
			}
			if n := len(h.fake.Requests()); n != 5 {
				t.Fatalf("upstream calls = %d, want 5", n)
			}
			file, ok := h.memFile("acme", "prefs.md")
			if !ok || file != "# Preferences\n- green tea\n" {
				t.Fatalf("memory file = %q (exists %v)", file, ok)
			}
			if _, ok := h.memFile("beta", "prefs.md"); ok {
				t.Fatal("the second tenant's store has the file")
			}
			// The client sees one message without memory calls.
			if strings.Contains(gjson.Get(msg, "content").Raw, `"memory"`) {
				t.Fatalf("client received a memory tool_use: %s", msg)
			}
			texts := gjson.Get(msg, "content.#.text").String()
			if texts != `["Let me check my memory.","You like green tea."]` {
				t.Fatalf("client content texts = %s", texts)
			}
			if gjson.Get(msg, "stop_reason").Str != "end_turn" {
				t.Fatalf("stop_reason = %s", gjson.Get(msg, "stop_reason").Str)
			}
			if in, out := gjson.Get(msg, "usage.input_tokens").Int(), gjson.Get(msg, "usage.output_tokens").Int(); in != 1500 || out != 150 {
				t.Fatalf("usage = %d in / %d out, want the sum 1500 / 150", in, out)
			}
			// The last view showed the edited file with the exact result string.
			last := h.lastUpstream("/v1/messages")
			result := gjson.GetBytes(last.Body, "messages.@reverse.0.content.0.content").Str
			want := "Here's the content of /memories/prefs.md with line numbers:\n     1\t# Preferences\n     2\t- green tea\n     3\t"
			if result != want {
				t.Fatalf("last tool_result = %q\nwant %q", result, want)
			}
			// Sending the message back as the next assistant turn is a valid request.
			next := `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":` +
				gjson.Get(msg, "content").Raw + `},{"role":"user","content":"thanks"}]}`
			h.fake.SetResponder(nil)
			resp = h.post("/v1/messages", keyAcme, next)
			if b := readAll(t, resp.Body); resp.StatusCode != 200 {
				t.Fatalf("client's follow-up was refused: %d %s", resp.StatusCode, b)
			}
		})
	}
}

func TestASecondTenantSeesNoneOfTheFirstTenantsMemory(t *testing.T) {
	h := newHarness(t)
	h.fake.SetResponder(memorySession())
	readAll(t, h.post("/v1/messages", keyAcme, simpleBody).Body)
	h.fake.Reset()
	h.fake.SetResponder(fakeapi.Script(
		fakeapi.Blocks(fakeapi.MemoryView("/memories/prefs.md")),
		fakeapi.Blocks(fakeapi.Text("done")),
	))
	readAll(t, h.post("/v1/messages", keyBeta, simpleBody).Body)
	last := h.lastUpstream("/v1/messages")
	res := gjson.GetBytes(last.Body, "messages.@reverse.0.content.0")
	if !res.Get("is_error").Bool() || res.Get("content").Str != "Error: The path /memories/prefs.md does not exist. Please provide a valid path." {
		t.Fatalf("tenant beta's view of acme's file = %s", res.Raw)
	}
}

// The default tenant's clients are strangers: each key's memory is its own,
// and a request without a key (an upstream that takes none) has no memory.
func TestTheDefaultTenantsMemoryIsKeptPerKey(t *testing.T) {
	pols := testPolicies()
	pols["default.yaml"] = "tenant: default\nmemory:\n  mode: proxy\n"
	fake := fakeapi.New()
	keyless := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") == "" {
			r.Header.Set("X-Api-Key", "sk-ant-upstream-takes-any")
		}
		fake.ServeHTTP(w, r)
	})
	h := newHarnessWith(t, keyless, pols)
	result := func(key string, call jsonRaw) gjson.Result {
		t.Helper()
		fake.Reset()
		fake.SetResponder(fakeapi.Script(fakeapi.Blocks(call), fakeapi.Blocks(fakeapi.Text("done"))))
		if resp := h.post("/v1/messages", key, simpleBody); resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", key, resp.StatusCode, readAll(t, resp.Body))
		} else {
			readAll(t, resp.Body)
		}
		last, _ := fake.LastRequest("/v1/messages")
		return gjson.GetBytes(last.Body, "messages.@reverse.0.content.0")
	}
	const alice, bob = "sk-ant-stranger-alice", "sk-ant-stranger-bob"
	if r := result(alice, fakeapi.MemoryCreate("/memories/secret.md", "alice salary 123k\n")); r.Get("is_error").Bool() {
		t.Fatalf("alice's create: %s", r.Raw)
	}
	if r := result(bob, fakeapi.MemoryView("/memories/secret.md")); r.Get("content").Str != "Error: The path /memories/secret.md does not exist. Please provide a valid path." {
		t.Errorf("bob's view of alice's file: %s", r.Raw)
	}
	if r := result(alice, fakeapi.MemoryView("/memories/secret.md")); !strings.Contains(r.Get("content").Str, "alice salary 123k") {
		t.Errorf("alice's view of her file: %s", r.Raw)
	}
	if r := result("", fakeapi.MemoryView("/memories")); r.Get("content").Str != "Error: memory store unavailable: memory here is kept per API key, and this request has none" {
		t.Errorf("a keyless view: %s", r.Raw)
	}
	if _, ok := h.memFile("default~"+apikey.IDOf(alice), "secret.md"); !ok {
		t.Error("alice's file is not in her key's store")
	}
	if _, ok := h.memFile("default", "secret.md"); ok {
		t.Error("alice's file is in the default tenant's shared store")
	}
}

func TestAMixedReplyHandsTheClientOnlyItsOwnTools(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			h := newHarness(t)
			h.fake.Enqueue(fakeapi.Blocks(
				fakeapi.Text("Saving that, and checking the weather."),
				fakeapi.MemoryCreate("/memories/city.md", "Paris"),
				fakeapi.ToolUse("toolu_weather", "get_weather", map[string]string{"city": "Paris"}),
			))
			req := `{"model":"claude-sonnet-4-5","max_tokens":100,"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"weather?"}]}`
			if stream {
				req = withStream(req)
			}
			resp := h.post("/v1/messages", keyAcme, req)
			got := readAll(t, resp.Body)
			msg := got
			if stream {
				msg = accumulate(t, got)
			}
			if gjson.Get(msg, "stop_reason").Str != "tool_use" {
				t.Fatalf("stop_reason = %s: %s", gjson.Get(msg, "stop_reason").Str, msg)
			}
			if names := gjson.Get(msg, `content.#(type=="tool_use")#.name`).String(); names != `["get_weather"]` {
				t.Fatalf("tool_use blocks the client got: %s", names)
			}
			if f, _ := h.memFile("acme", "city.md"); f != "Paris" {
				t.Fatalf("memory call was not run: %q", f)
			}
			if n := len(h.fake.Requests()); n != 1 {
				t.Fatalf("upstream calls = %d, want 1", n)
			}
			// The client answers its tool with the content exactly as received.
			next := `{"model":"claude-sonnet-4-5","max_tokens":100,"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":` +
				gjson.Get(msg, "content").Raw + `},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_weather","content":"sunny"}]}]}`
			resp = h.post("/v1/messages", keyAcme, next)
			if b := readAll(t, resp.Body); resp.StatusCode != 200 {
				t.Fatalf("the client's next request was refused: %d %s", resp.StatusCode, b)
			}
		})
	}
}

func TestTheMemoryLoopStopsAtMaxIterationsWithPauseTurn(t *testing.T) {
	cases := []struct {
		name       string
		blocks     []jsonRaw // every reply
		wantBlocks int64     // the client's, over 5 rounds
	}{
		{"replies with text and a memory call", []jsonRaw{fakeapi.Text("again"), fakeapi.MemoryView("/memories")}, 5},
		{"replies of memory calls only", []jsonRaw{fakeapi.MemoryView("/memories")}, 0},
	}
	for _, tc := range cases {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, stream=%v", tc.name, stream), func(t *testing.T) {
				h := newHarness(t) // acme: max_iterations 4
				h.fake.SetResponder(func(*fakeapi.Request) fakeapi.Reply { return fakeapi.Blocks(tc.blocks...) })
				body := simpleBody
				if stream {
					body = withStream(body)
				}
				resp := h.post("/v1/messages", keyAcme, body)
				got := readAll(t, resp.Body)
				msg := got
				if stream {
					msg = accumulate(t, got)
				}
				// The first call, then one more per memory round.
				if n := len(h.fake.Requests()); n != 5 {
					t.Fatalf("upstream calls = %d, want 1 + max_iterations (4)", n)
				}
				if gjson.Get(msg, "stop_reason").Str != "pause_turn" {
					t.Fatalf("stop_reason = %q, want pause_turn", gjson.Get(msg, "stop_reason").Str)
				}
				if strings.Contains(gjson.Get(msg, "content").Raw, "tool_use") {
					t.Fatalf("client got a tool_use at the cap: %s", msg)
				}
				if n := gjson.Get(msg, "content.#").Int(); n != tc.wantBlocks {
					t.Fatalf("client got %d blocks, want %d: %s", n, tc.wantBlocks, msg)
				}
			})
		}
	}
}

func TestInjectModeLeavesMemoryCallsToTheClient(t *testing.T) {
	p := testPolicies()
	p["acme.yaml"] = strings.Replace(p["acme.yaml"], "mode: proxy", "mode: inject", 1)
	h := newHarnessWith(t, nil, p)
	h.fake.Enqueue(fakeapi.Blocks(fakeapi.MemoryView("/memories")))
	got := readAll(t, h.post("/v1/messages", keyAcme, simpleBody).Body)
	if gjson.Get(got, "content.0.name").Str != "memory" || len(h.fake.Requests()) != 1 {
		t.Fatalf("inject mode did not hand the memory call to the client: %s", got)
	}
}

func TestConcurrentEditsOfOneFileAllLand(t *testing.T) {
	h := newHarness(t)
	if _, err := h.mem.Create(t.Context(), scopeOf("acme"), mustPath(t, "/memories/log.md"), "start\n"); err != nil {
		t.Fatal(err)
	}
	h.fake.SetResponder(func(r *fakeapi.Request) fakeapi.Reply {
		if r.AssistantTurns > 0 {
			return fakeapi.TextReply("noted")
		}
		n := gjson.GetBytes(r.Messages[0], "content").Str
		if strings.HasSuffix(n, "0") { // every tenth edit is a str_replace
			return fakeapi.Blocks(fakeapi.MemoryStrReplace("/memories/log.md", "start", "start "+n))
		}
		return fakeapi.Blocks(fakeapi.MemoryInsert("/memories/log.md", 1, "line "+n+"\n"))
	})
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"%d"}]}`, i)
			resp := h.post("/v1/messages", keyAcme, body)
			if b := readAll(t, resp.Body); resp.StatusCode != 200 {
				t.Errorf("request %d: %d %s", i, resp.StatusCode, b)
			}
		}()
	}
	wg.Wait()
	file, _ := h.memFile("acme", "log.md")
	for i := range 100 {
		want := fmt.Sprintf("line %d\n", i)
		if i%10 == 0 {
			want = fmt.Sprintf(" %d", i)
		}
		if !strings.Contains(file, want) {
			t.Errorf("edit %d is missing from the file", i)
		}
	}
}

// TestAMemoryRoundOnAPooledBodyContinuesTheClientsBytes: a body large enough for a pooled
// buffer goes upstream as its rewritten parts, and the request after a memory round is built
// from those parts while the buffer is still the request's: each upstream request holds the
// one before it, the client's message intact, however the parts were joined.
func TestAMemoryRoundOnAPooledBodyContinuesTheClientsBytes(t *testing.T) {
	filler := strings.Repeat("transcript ", minPooledBody/10)
	body := `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"` + filler + `"}]}`
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			h := newHarness(t)
			h.fake.SetResponder(memorySession())
			b := body
			if stream {
				b = withStream(b)
			}
			resp := h.post("/v1/messages", keyAcme, b)
			if got := readAll(t, resp.Body); resp.StatusCode != 200 {
				t.Fatalf("status %d: %.300s", resp.StatusCode, got)
			}
			var prev []gjson.Result
			n := 0
			for _, r := range h.fake.Requests() {
				if r.Path != "/v1/messages" {
					continue
				}
				n++
				msgs := gjson.GetBytes(r.Body, "messages").Array()
				if len(msgs) != len(prev)+2 && prev != nil || len(msgs) == 0 {
					t.Fatalf("request %d has %d messages after %d", n, len(msgs), len(prev))
				}
				if msgs[0].Get("content").Str != filler {
					t.Fatalf("request %d: the client's message is not as sent: %.80q", n, msgs[0].Get("content").Str)
				}
				for i, m := range prev {
					if msgs[i].Raw != m.Raw {
						t.Fatalf("request %d: message %d is not the previous request's", n, i)
					}
				}
				prev = msgs
			}
			if n != 5 {
				t.Fatalf("%d upstream requests, want 5", n)
			}
		})
	}
}

// A memory-loop request whose rounds wrote is answered again from what it did when an SDK resends
// it (x-stainless-retry-count 1), on a pooled body too: its key is taken from the client's bytes
// only when the loop wrote, after the rewrite and the rounds, which must have left them as sent.
func TestAResentPooledBodyIsAnsweredFromWhatTheLoopDid(t *testing.T) {
	for _, size := range []int{100, 2 * minPooledBody} {
		t.Run(fmt.Sprintf("%d bytes of transcript", size), func(t *testing.T) {
			h := newHarness(t)
			h.fake.SetResponder(memorySession())
			body := `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"` + strings.Repeat("t", size) + `"}]}`
			resp := h.post("/v1/messages", keyAcme, body)
			first := readAll(t, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %.300s", resp.StatusCode, first)
			}
			calls := len(h.fake.Requests())
			resp = h.post("/v1/messages", keyAcme, body, "X-Stainless-Retry-Count", "1")
			got := readAll(t, resp.Body)
			if resp.StatusCode != 200 || resp.Header.Get("X-Ctxproxy-Replayed") != "true" || got != first {
				t.Fatalf("the resend was not answered from the first reply: %d %v %.200s", resp.StatusCode, resp.Header, got)
			}
			if n := len(h.fake.Requests()); n != calls {
				t.Errorf("the resend made %d upstream calls", n-calls)
			}
			h.fake.SetResponder(nil)
			resp = h.post("/v1/messages", keyAcme, strings.Replace(body, `"tt`, `"ut`, 1), "X-Stainless-Retry-Count", "1")
			if readAll(t, resp.Body); resp.Header.Get("X-Ctxproxy-Replayed") != "" {
				t.Errorf("a resend of another body was answered from the first")
			}
		})
	}
}

// The request log says how long the proxy's own work in the memory rounds took (from each
// round's reply to the next call begun), for requests that made rounds: part of the request's
// own time, none of its upstream time.
func TestTheRequestLogTimesTheMemoryRounds(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			h := newHarness(t)
			h.fake.SetResponder(memorySession())
			body := simpleBody
			if stream {
				body = withStream(body)
			}
			if resp := h.post("/v1/messages", keyAcme, body); readAll(t, resp.Body) == "" || resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			h.fake.SetResponder(nil)
			readAll(t, h.post("/v1/messages", keyAcme, body).Body)
			// The lines by their calls: a request is logged after its client has the reply.
			var loop, plain map[string]any
			testwait.Eventually(t, "both request log lines", func() {
				for loop == nil || plain == nil {
					time.Sleep(time.Millisecond)
					for _, e := range h.logs.FilterMessage("request").All() {
						switch f := e.ContextMap(); f["upstream_calls"] {
						case int64(5):
							loop = f
						case int64(1):
							plain = f
						}
					}
				}
			})
			rounds, d, up := loop["memory_rounds_duration"], loop["duration"], loop["upstream_duration"]
			r, ok := rounds.(time.Duration)
			if !ok || r <= 0 || r > d.(time.Duration)-up.(time.Duration) {
				t.Errorf("memory_rounds_duration %v, want more than none and at most the request's own time %v − %v", rounds, d, up)
			}
			if v, ok := plain["memory_rounds_duration"]; ok {
				t.Errorf("a request without a round logged memory_rounds_duration %v", v)
			}
		})
	}
}
