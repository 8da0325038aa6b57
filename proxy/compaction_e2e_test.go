package proxy

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// nullCompaction is a compaction block whose summary failed (content null):
// it must reach the client as null, never "" or "null".
const nullCompaction = `{"type":"compaction","content":null,"encrypted_content":"ZW5j"}`

const summaryCompaction = `{"type":"compaction","content":"<summary>the user likes tea</summary>","encrypted_content":"ZW5jMg=="}`

// compactionDeltas returns the data of every compaction_delta event of an SSE body.
func compactionDeltas(body string) []string {
	var out []string
	for _, ev := range events(body) {
		if ev[0] == "content_block_delta" && gjson.Get(ev[1], "delta.type").Str == "compaction_delta" {
			out = append(out, gjson.Get(ev[1], "delta").Raw)
		}
	}
	return out
}

func TestCompactionBlocksPassThroughThePlainRelay(t *testing.T) {
	for _, block := range []string{nullCompaction, summaryCompaction} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", gjson.Get(block, "content").Raw, stream), func(t *testing.T) {
				h := newHarness(t)
				h.fake.Enqueue(fakeapi.Blocks(json.RawMessage(block), fakeapi.Text("go on")))
				body := simpleBody
				if stream {
					body = withStream(body)
				}
				resp := h.post("/v1/messages", keyOther, body) // default tenant: memory off, plain relay
				got := readAll(t, resp.Body)
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, got)
				}
				msg := got
				if stream {
					d := compactionDeltas(got)
					want := `{"type":"compaction_delta","content":` + gjson.Get(block, "content").Raw + `,"encrypted_content":` + gjson.Get(block, "encrypted_content").Raw + `}`
					if len(d) != 1 || d[0] != want {
						t.Fatalf("compaction_delta events %q, want one %s", d, want)
					}
					msg = accumulate(t, got)
				} else if b := gjson.Get(msg, "content.0").Raw; b != block {
					t.Fatalf("block %s, want byte for byte %s", b, block)
				}
				if gjson.Get(msg, "content.0.type").Str != "compaction" || gjson.Get(msg, "content.1.text").Str != "go on" {
					t.Fatalf("reply %s", msg)
				}
			})
		}
	}
}

// A memory round, then an inner call that compacts: the client gets the
// compaction block (first, when not streamed; in its place in the stream,
// where the API ignores what came before it), and every call's iterations.
func TestAMemoryLoopWhoseInnerCallCompacts(t *testing.T) {
	round1 := `{"input_tokens":100,"output_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"iterations":[{"type":"message","input_tokens":100,"output_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}]}`
	round2 := `{"input_tokens":50,"output_tokens":20,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"iterations":[{"type":"compaction","input_tokens":90000,"output_tokens":700,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},{"type":"message","input_tokens":50,"output_tokens":20,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}]}`
	for _, block := range []string{nullCompaction, summaryCompaction} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", gjson.Get(block, "content").Raw, stream), func(t *testing.T) {
				h := newHarness(t)
				h.fake.SetResponder(fakeapi.Script(
					fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("Checking."), fakeapi.MemoryView("/memories")}, RawUsage: json.RawMessage(round1)},
					fakeapi.Reply{Content: []json.RawMessage{json.RawMessage(block), fakeapi.Text("You like tea.")}, RawUsage: json.RawMessage(round2)},
				))
				body := simpleBody
				if stream {
					body = withStream(body)
				}
				resp := h.post("/v1/messages", keyAcme, body)
				got := readAll(t, resp.Body)
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, got)
				}
				if n := len(h.fake.Requests()); n != 2 {
					t.Fatalf("upstream calls %d, want 2", n)
				}
				msg := got
				wantOrder := "compaction,text,text"
				if stream {
					if d := compactionDeltas(got); len(d) != 1 || gjson.Get(d[0], "content").Raw != gjson.Get(block, "content").Raw {
						t.Fatalf("compaction_delta events %q", d)
					}
					msg = accumulate(t, got)
					wantOrder = "text,compaction,text"
				}
				var order []string
				var compaction gjson.Result
				gjson.Get(msg, "content").ForEach(func(_, b gjson.Result) bool {
					order = append(order, b.Get("type").Str)
					if b.Get("type").Str == "compaction" {
						compaction = b
					}
					return true
				})
				if strings.Join(order, ",") != wantOrder {
					t.Fatalf("content types %v, want %s: %s", order, wantOrder, msg)
				}
				if compaction.Get("content").Raw != gjson.Get(block, "content").Raw || compaction.Get("encrypted_content").Str != gjson.Get(block, "encrypted_content").Str {
					t.Errorf("compaction block %s, want %s", compaction.Raw, block)
				}
				it := gjson.Get(msg, "usage.iterations")
				if it.Get("#").Int() != 3 || it.Get("1.type").Str != "compaction" || it.Get("1.input_tokens").Int() != 90000 {
					t.Errorf("usage.iterations %s, want both calls' (3 entries)", it.Raw)
				}
				if gjson.Get(msg, "usage.input_tokens").Int() != 150 {
					t.Errorf("usage %s", gjson.Get(msg, "usage").Raw)
				}
			})
		}
	}
}

// stop_reason "compaction" (pause_after_compaction, on-demand) ends the loop:
// the reply reaches the client as the API sent it.
func TestAReplyStoppingForCompactionEndsTheLoop(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			h := newHarness(t)
			h.fake.SetResponder(fakeapi.Script(fakeapi.Reply{Content: []json.RawMessage{json.RawMessage(summaryCompaction)}, StopReason: "compaction"}))
			body := simpleBody
			if stream {
				body = withStream(body)
			}
			resp := h.post("/v1/messages", keyAcme, body)
			got := readAll(t, resp.Body)
			if stream {
				got = accumulate(t, got)
			}
			if resp.StatusCode != 200 || gjson.Get(got, "stop_reason").Str != "compaction" || gjson.Get(got, "content.#").Int() != 1 ||
				gjson.Get(got, "content.0.content").Str != "<summary>the user likes tea</summary>" {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
			if n := len(h.fake.Requests()); n != 1 {
				t.Errorf("upstream calls %d, want 1", n)
			}
		})
	}
}

// Every figure of a transcript with a compaction, a fallback to another model
// and cache writes of both TTLs, through the proxy and its memory loop, to the
// cent, streamed and not. Prices per million tokens: opus 4.6 $5 in, $25 out,
// $6.25 5m write, $10 1h write; sonnet 4.5 $3, $15, $3.75 5m, $6 1h, $0.30 read.
func TestExactCostOfCompactionFallbackAndCacheWrites(t *testing.T) {
	// Round 1 (a memory call): one message step, 1h cache writes.
	//   1,000×5 + 100×25 + 4,000×10 (1h) = 0.005 + 0.0025 + 0.04 = 0.0475
	round1 := `{"input_tokens":1000,"output_tokens":100,"cache_creation_input_tokens":4000,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":4000},` +
		`"iterations":[{"type":"message","input_tokens":1000,"output_tokens":100,"cache_creation_input_tokens":4000,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":4000}}]}`
	// Round 2: a compaction (opus), then a fallback to sonnet 4.5 with 5m and 1h writes, and 2 web searches.
	//   compaction 180,000×5 + 3,000×25 = 0.975
	//   fallback   2,000×3 + 500×15 + 6,000×3.75 + 4,000×6 + 50,000×0.3 = 0.075
	//   web search 2 × 0.01 = 0.02                                       → 1.07
	round2 := `{"input_tokens":2000,"output_tokens":500,"cache_creation_input_tokens":10000,"cache_read_input_tokens":50000,"server_tool_use":{"web_search_requests":2},` +
		`"iterations":[{"type":"compaction","input_tokens":180000,"output_tokens":3000,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},` +
		`{"type":"fallback_message","model":"claude-sonnet-4-5","input_tokens":2000,"output_tokens":500,"cache_creation_input_tokens":10000,"cache_read_input_tokens":50000,"cache_creation":{"ephemeral_5m_input_tokens":6000,"ephemeral_1h_input_tokens":4000}}]}`
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			prices, err := tokens.LoadPrices("../tokens/builtin_prices.yaml")
			if err != nil {
				t.Fatal(err)
			}
			metrics := tokens.NewMetrics([]string{"acme"}, prices.Models())
			ledger, err := tokens.OpenLedger(t.Context(), "file:"+filepath.Join(t.TempDir(), "ledger.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			defer ledger.Close()
			rec := tokens.NewRecorder(prices, metrics, ledger, nil)
			h := newHarness(t, func(c *Config) { c.Recorder, c.Metrics = rec, metrics })
			h.fake.SetResponder(fakeapi.Script(
				fakeapi.Reply{Content: []json.RawMessage{fakeapi.MemoryView("/memories")}, RawUsage: json.RawMessage(round1)},
				fakeapi.Reply{Content: []json.RawMessage{json.RawMessage(summaryCompaction), fakeapi.Text("done")}, RawUsage: json.RawMessage(round2)},
			))
			body := strings.Replace(simpleBody, "claude-sonnet-4-5", "claude-opus-4-6", 1)
			if stream {
				body = withStream(body)
			}
			resp := h.post("/v1/messages", keyAcme, body)
			if got := readAll(t, resp.Body); resp.StatusCode != 200 {
				t.Fatalf("status %d %s", resp.StatusCode, got)
			}
			if err := rec.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			calls, err := ledger.Query(t.Context(), tokens.Filter{})
			if err != nil || len(calls) != 2 {
				t.Fatalf("ledger: %d calls, %v", len(calls), err)
			}
			want := []struct{ cost, compaction, web, write1h string }{{"0.0475", "0", "0", "0.04"}, {"1.07", "0.975", "0.02", "0.024"}}
			for i, c := range calls {
				w := want[i]
				if c.Cost.String() != tokens.Money(mustUSD(t, w.cost)).String() || c.CompactionCost != mustUSD(t, w.compaction) ||
					c.Breakdown.WebSearch != mustUSD(t, w.web) || c.Breakdown.CacheWrite1h != mustUSD(t, w.write1h) || c.PriceUnknown {
					t.Errorf("call %d: cost %s compaction %s breakdown %+v, want %+v", i, c.Cost, c.CompactionCost, c.Breakdown, w)
				}
			}
			rep := tokens.BuildReport(calls, tokens.GroupByModel)
			if tot := rep.Total; tot.CostUSD != mustUSD(t, "1.1175") || tot.Compactions != 1 || tot.CompactionCostUSD != mustUSD(t, "0.975") ||
				tot.InputTokens != 183000 || tot.OutputTokens != 3600 || tot.WebSearchRequests != 2 {
				t.Errorf("report totals %+v", tot)
			}
		})
	}
}

func mustUSD(t *testing.T, s string) tokens.Money {
	t.Helper()
	m, err := tokens.ParseMoney(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// context_management.threads: unthread_edits answers a threaded request the
// policy adds edits to with the API's own 400, before any upstream call; pass
// forwards it, and an API that refuses edits in threads is relayed unchanged.
// Either way the SDK runners go on unthreaded.
func TestThreadedRequestsUnderBothThreadsSettings(t *testing.T) {
	cases := []struct {
		name     string
		key      string   // beta: unthread_edits (the default); acme: pass
		refuse   []string // the fake's strict mode
		upstream int      // upstream calls for the threaded request
		status   int
	}{
		{"unthread_edits answers itself, lenient API", keyBeta, nil, 0, 400},
		{"unthread_edits answers itself, strict API", keyBeta, []string{"context_management"}, 0, 400},
		{"pass forwards to a lenient API", keyAcme, nil, 1, 200},
		{"pass relays a strict API's refusal", keyAcme, []string{"context_management"}, 1, 400},
	}
	for _, tc := range cases {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.name, stream), func(t *testing.T) {
				h := newHarness(t)
				o := h.fake.CurrentOptions()
				o.ThreadsRefuse = tc.refuse
				h.fake.SetOptions(o)
				body := threadCreate(stream, "")
				resp := h.post("/v1/messages", tc.key, body, "Anthropic-Beta", threadBeta)
				got := readAll(t, resp.Body)
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, got)
				}
				if n := len(h.fake.Requests()); n != tc.upstream {
					t.Errorf("upstream calls %d, want %d", n, tc.upstream)
				}
				if tc.status == 400 {
					e := gjson.Get(got, "error")
					if e.Get("type").Str != "invalid_request_error" || e.Get("details.error_code").Str != "thread_unsupported_request" ||
						e.Get("details.unsupported").Raw != `["context_management"]` {
						t.Fatalf("error %s", got)
					}
				}
				// The runner's fallback: the same turn unthreaded is served, with the edits.
				unthreaded := strings.Replace(body, `"thread":{"type":"create"},`, "", 1)
				resp = h.post("/v1/messages", tc.key, unthreaded, "Anthropic-Beta", threadBeta)
				if got := readAll(t, resp.Body); resp.StatusCode != 200 {
					t.Fatalf("unthreaded: status %d: %s", resp.StatusCode, got)
				}
				reqs := h.fake.Requests()
				if last := reqs[len(reqs)-1]; !gjson.GetBytes(last.Body, "context_management.edits").IsArray() || last.Thread != "" {
					t.Errorf("unthreaded request reached the API without edits or with a thread: %s", last.Body)
				}
			})
		}
	}
}

// The memory loop answers only its own tool_use ids: a server tool's
// (server_tool_use, srvtoolu_…) never gets a tool_result.
func TestTheLoopNeverAnswersAServerTool(t *testing.T) {
	h := newHarness(t)
	srv := json.RawMessage(`{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"tea"}}`)
	res := json.RawMessage(`{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]}`)
	h.fake.SetResponder(fakeapi.Script(
		fakeapi.Reply{Content: []json.RawMessage{srv, res, fakeapi.MemoryView("/memories")}, StopReason: "tool_use"},
		fakeapi.TextReply("done"),
	))
	resp := h.post("/v1/messages", keyAcme, simpleBody)
	got := readAll(t, resp.Body)
	if resp.StatusCode != 200 || gjson.Get(got, "content.#").Int() != 3 || gjson.Get(got, "content.0.id").Str != "srvtoolu_1" {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	reqs := h.fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("upstream calls %d", len(reqs))
	}
	last := gjson.GetBytes(reqs[1].Body, "messages.@reverse.0.content")
	if last.Get("#").Int() != 1 || last.Get("0.type").Str != "tool_result" || strings.HasPrefix(last.Get("0.tool_use_id").Str, "srvtoolu_") {
		t.Errorf("loop turn %s, want one tool_result for the memory call only", last.Raw)
	}
}

// compact.measure_savings: after a call that compacted, the request without
// its compact edit goes to count_tokens, and the ledger's count_tokens line
// says what compaction spared, priced at the model's input price.
func TestCompactionSavingsAreMeasuredWhenAskedFor(t *testing.T) {
	for _, measure := range []bool{false, true} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("measure=%v/stream=%v", measure, stream), func(t *testing.T) {
				pols := testPolicies()
				pols["acme.yaml"] = `tenant: acme
api_keys_sha256: ["` + sha(keyAcme) + `"]
context_management:
  mode: enforce
  clear_tool_uses:
    trigger: { type: input_tokens, value: 30000 }
  compact:
    trigger: { type: input_tokens, value: 50000 }
    measure_savings: ` + fmt.Sprint(measure) + `
memory:
  mode: proxy
`
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
				h := newHarnessWith(t, nil, pols, func(c *Config) { c.Recorder = rec })
				long, _ := json.Marshal(strings.Repeat("log line ", 25000))
				body := `{"model":"claude-opus-4-6","max_tokens":100,"messages":[{"role":"user","content":` + string(long) +
					`},{"role":"assistant","content":"noted"},{"role":"user","content":"why?"}]}`
				if stream {
					body = withStream(body)
				}
				resp := h.post("/v1/messages", keyAcme, body)
				got := readAll(t, resp.Body)
				if resp.StatusCode != 200 || !strings.Contains(got, `"type":"compaction"`) {
					t.Fatalf("status %d: %.300s", resp.StatusCode, got)
				}
				// The measure runs after the reply: closing the server waits for the handler.
				h.proxy.Close()
				if err := rec.Close(t.Context()); err != nil {
					t.Fatal(err)
				}
				calls, err := ledger.Query(t.Context(), tokens.Filter{})
				if err != nil {
					t.Fatal(err)
				}
				if !measure {
					if len(calls) != 1 || len(h.fake.Requests()) != 1 {
						t.Fatalf("%d ledger lines, %d upstream calls; want 1 and 1 without the measurement", len(calls), len(h.fake.Requests()))
					}
					return
				}
				if len(calls) != 2 || calls[1].CountTokens == nil {
					t.Fatalf("ledger %+v, want the call and its count_tokens measure", calls)
				}
				count := h.fake.Requests()[1]
				if !count.CountTokens || strings.Contains(string(count.Body), "compact_20260112") || gjson.GetBytes(count.Body, "max_tokens").Exists() ||
					!gjson.GetBytes(count.Body, "context_management.edits.0").Exists() {
					t.Fatalf("measure request %s", count.Body)
				}
				its := calls[0].Iterations
				without, with := calls[1].CountTokens.InputTokens, its[1].Usage.TotalInput()
				e, _ := prices.Lookup("claude-opus-4-6")
				if calls[1].CompactedInputTokens != with || without <= with || calls[1].CompactionSavings != tokens.Money(without-with)*e.Price.Input {
					t.Errorf("measure: without %d, compacted %d (iteration %d), savings %s", without, calls[1].CompactedInputTokens, with, calls[1].CompactionSavings)
				}
				rep := tokens.BuildReport(calls, tokens.GroupByModel)
				if rep.Total.CompactionSavingsUSD != calls[1].CompactionSavings || rep.Total.Calls != 1 {
					t.Errorf("report totals %+v", rep.Total)
				}
			})
		}
	}
}

// Whether the API refuses a replayed compaction block without the compact
// edit is unverified, so the fake can do both. ctxproxy never strips a
// client's compact edit (enforce mode keeps it when the tenant writes none),
// so a client replaying a block is served either way.
func TestAReplayedCompactionBlockIsServedWhetherOrNotTheAPINeedsTheEdit(t *testing.T) {
	body := `{"model":"claude-opus-4-6","max_tokens":100,"context_management":{"edits":[{"type":"compact_20260112"}]},` +
		`"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[` + summaryCompaction + `,{"type":"text","text":"ok"}]},{"role":"user","content":"go on"}]}`
	for _, needsEdit := range []bool{false, true} {
		t.Run(fmt.Sprintf("needs_edit=%v", needsEdit), func(t *testing.T) {
			h := newHarness(t) // acme enforces clearing edits and writes no compact edit of its own
			o := h.fake.CurrentOptions()
			o.CompactionBlockNeedsEdit = needsEdit
			h.fake.SetOptions(o)
			resp := h.post("/v1/messages", keyAcme, body, "Anthropic-Beta", "compact-2026-01-12")
			if got := readAll(t, resp.Body); resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
			up := h.lastUpstream("/v1/messages")
			if types := gjson.GetBytes(up.Body, "context_management.edits.#.type").String(); !strings.Contains(types, "compact_20260112") ||
				!strings.Contains(types, "clear_tool_uses_20250919") {
				t.Errorf("upstream edits %s, want the tenant's and the client's compact edit", types)
			}
		})
	}
}
