package fakeapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func serverSearch(id, query string) json.RawMessage {
	return json.RawMessage(`{"type":"server_tool_use","id":"` + id + `","name":"web_search","input":{"query":"` + query + `"}}`)
}

func searchResult(id, text string) json.RawMessage {
	return json.RawMessage(`{"type":"web_search_tool_result","tool_use_id":"` + id + `","content":[{"type":"web_search_result","url":"https://example.com","title":"t","encrypted_content":"` + text + `"}]}`)
}

func TestMaxTokensBoundsEachModelCall(t *testing.T) {
	long := strings.Repeat("word ", 200) // ~250 tokens of text
	cases := []struct {
		name      string
		body      string
		reply     Reply
		calls     int   // message iterations reported (0: no iterations)
		compacted bool  // a compaction iteration comes first
		perCall   int64 // every iteration's output_tokens is at most this
		over      bool  // the top-level output_tokens exceeds max_tokens
	}{
		{name: "a server tool loop is one call per result, each bounded, their sum over max_tokens",
			body:  body(`{"max_tokens":100}`),
			reply: Blocks(Text(long), serverSearch("srvtoolu_1", "a"), searchResult("srvtoolu_1", long), Text(long), serverSearch("srvtoolu_2", "b"), searchResult("srvtoolu_2", "x"), Text(long)),
			calls: 3, perCall: 100, over: true},
		{name: "a reply without server tool results is one call, no iterations",
			body:  body(`{"max_tokens":100}`),
			reply: Blocks(Text("short")), calls: 0, perCall: 100},
		{name: "a scripted usage is served as scripted",
			body:  body(`{"max_tokens":100}`),
			reply: Reply{Content: []json.RawMessage{serverSearch("srvtoolu_1", "a"), searchResult("srvtoolu_1", "x"), Text("ok")}, Usage: &Usage{InputTokens: 5, OutputTokens: 7}},
			calls: 0, perCall: 7},
		{name: "with compaction the compaction call is bounded too and comes first",
			body: body(`{"max_tokens":40,"messages":[{"role":"user","content":"` + strings.Repeat("log ", 60000) + `"}],` +
				`"context_management":{"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens","value":50000},"instructions":"` + strings.Repeat("keep every file name; ", 20) + `"}]}}`),
			reply: Blocks(Text(long), serverSearch("srvtoolu_1", "a"), searchResult("srvtoolu_1", "x"), Text(long)),
			calls: 2, compacted: true, perCall: 40, over: true},
	}
	for _, c := range cases {
		for _, stream := range []bool{false, true} {
			name := c.name
			if stream {
				name += ", streamed"
			}
			t.Run(name, func(t *testing.T) {
				api, base := newServer(t)
				api.Enqueue(c.reply)
				b := c.body
				if stream {
					b = strings.TrimSuffix(b, "}") + `,"stream":true}`
				}
				resp, out := do(t, base, call{body: b})
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %.300s", resp.StatusCode, out)
				}
				usage := gjson.GetBytes(out, "usage")
				if stream {
					evs, err := parseSSE(t, strings.NewReader(string(out)))
					if err != nil {
						t.Fatal(err)
					}
					usage = gjson.Get(evs[len(evs)-2].data, "usage") // message_delta
				}
				maxTokens := gjson.Get(b, "max_tokens").Int()
				its := usage.Get("iterations").Array()
				var msgIn, msgOut int64
				n := 0
				for k, it := range its {
					if it.Get("output_tokens").Int() > c.perCall {
						t.Errorf("iteration %d output %d over %d", k, it.Get("output_tokens").Int(), c.perCall)
					}
					if it.Get("type").Str == "compaction" {
						if k != 0 || !c.compacted {
							t.Errorf("compaction iteration at %d", k)
						}
						continue
					}
					n++
					msgIn += it.Get("input_tokens").Int()
					msgOut += it.Get("output_tokens").Int()
				}
				if n != c.calls {
					t.Fatalf("%d message iterations, want %d: %s", n, c.calls, usage.Raw)
				}
				if c.compacted != (len(its) > 0 && its[0].Get("type").Str == "compaction") {
					t.Errorf("compaction iteration missing: %s", usage.Raw)
				}
				out_ := usage.Get("output_tokens").Int()
				if n > 0 && (usage.Get("input_tokens").Int() != msgIn || out_ != msgOut) {
					t.Errorf("top level %d/%d, message iterations sum to %d/%d", usage.Get("input_tokens").Int(), out_, msgIn, msgOut)
				}
				if (out_ > maxTokens) != c.over {
					t.Errorf("output_tokens %d with max_tokens %d", out_, maxTokens)
				}
				if n > 1 && its[len(its)-1].Get("input_tokens").Int() <= its[len(its)-n].Get("input_tokens").Int() {
					t.Errorf("a later call must read what the earlier ones wrote: %s", usage.Raw)
				}
			})
		}
	}
}
