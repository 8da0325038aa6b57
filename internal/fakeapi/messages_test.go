package fakeapi

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestTheDefaultReplyIsATextOkWithEstimatedUsage(t *testing.T) {
	_, base := newServer(t)
	b := body("")
	resp, out := do(t, base, call{body: b})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d %s", resp.StatusCode, out)
	}
	m := gjson.ParseBytes(out)
	checks := map[string]string{
		"type":               "message",
		"role":               "assistant",
		"model":              "claude-sonnet-4-5",
		"content.0.type":     "text",
		"content.0.text":     "ok",
		"stop_reason":        "end_turn",
		"stop_sequence":      "",
		"context_management": "",
	}
	for path, want := range checks {
		if got := m.Get(path).String(); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	if !strings.HasPrefix(m.Get("id").Str, "msg_fake_") {
		t.Errorf("id %q", m.Get("id").Str)
	}
	msgs := gjson.Get(b, "messages").Raw
	if got, want := m.Get("usage.input_tokens").Int(), Tokens(len(`{"role":"user","content":"hi"}`)); got != want || len(msgs) == 0 {
		t.Errorf("input_tokens %d, want %d", got, want)
	}
	if m.Get("usage.output_tokens").Int() < 1 {
		t.Errorf("output_tokens %d", m.Get("usage.output_tokens").Int())
	}
}

func TestQueuedRepliesAreServedInOrderThenTheResponderThenTheDefault(t *testing.T) {
	api, base := newServer(t)
	api.Enqueue(TextReply("one"), TextReply("two"))
	api.SetResponder(func(r *Request) Reply { return TextReply("from responder for " + r.Model) })
	var got []string
	for range 3 {
		_, out := do(t, base, call{body: body("")})
		got = append(got, gjson.GetBytes(out, "content.0.text").Str)
	}
	want := []string{"one", "two", "from responder for claude-sonnet-4-5"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
	api.SetResponder(nil)
	_, out := do(t, base, call{body: body("")})
	if gjson.GetBytes(out, "content.0.text").Str != "ok" {
		t.Errorf("default after responder removed: %s", out)
	}
}

func TestRequestsRecordsWhatWasSent(t *testing.T) {
	api, base := newServer(t)
	b := body(`{"tools":[` + toolA + `]}`)
	do(t, base, call{path: "/v1/messages?beta=true", body: b, header: map[string]string{"X-Custom": "1"}})
	reqs := api.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Method != "POST" || r.Path != "/v1/messages" || r.RawQuery != "beta=true" || r.Header.Get("X-Custom") != "1" ||
		string(r.Body) != b || r.Model != "claude-sonnet-4-5" || r.Status != 200 || r.Outcome != OutcomeOK ||
		len(r.Messages) != 1 || compactJSON(string(r.Tools)) != "["+toolA+"]" || !strings.HasPrefix(r.ReplyID, "msg_fake_") {
		t.Errorf("recorded %+v", r)
	}
	if strings.Join(r.Betas, ",") != defaultBetas {
		t.Errorf("betas %q", r.Betas)
	}
	reqs[0].Body[0] = 'X'
	reqs[0].Header.Set("X-Custom", "2")
	if again := api.Requests()[0]; again.Body[0] != '{' || again.Header.Get("X-Custom") != "1" {
		t.Error("Requests does not return copies")
	}
	api.Reset()
	if len(api.Requests()) != 0 {
		t.Error("Reset kept requests")
	}
}

func TestTheRecordLimitKeepsTheMostRecentRequests(t *testing.T) {
	api, base := newServer(t, WithRecordLimit(2))
	for range 3 {
		do(t, base, call{body: body("")})
	}
	reqs := api.Requests()
	if len(reqs) != 2 || reqs[0].Seq != 2 || reqs[1].Seq != 3 {
		t.Errorf("kept %d: %+v", len(reqs), reqs)
	}
}

// richReply has every block kind the fake streams.
func richReply() Reply {
	return Reply{ID: "msg_rich", Content: []json.RawMessage{
		Thinking("Let me think about the weather in Paris.", "sig-abc=="),
		RedactedThinking("opaque-data"),
		Text("I'll check the weather for you — un instant."),
		ToolUse("toolu_w", "get_weather", map[string]any{"city": "Paris", "units": "metric", "days": []int{1, 2, 3}}),
		ToolUse("toolu_m", "memory", map[string]any{"command": "view", "path": "/memories"}),
	}, Usage: &Usage{InputTokens: 120, OutputTokens: 45, CacheReadInputTokens: 7, CacheCreationInputTokens: 3},
		AppliedEdits: []json.RawMessage{AppliedEdit(editClearToolUses, 2, 500)}}
}

func TestAStreamHasTheRealEventSequence(t *testing.T) {
	api, base := newServer(t, WithTextChunks(3))
	api.Enqueue(richReply())
	resp, out := do(t, base, call{body: body(`{"stream":true}`)})
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content-type %q: %s", ct, out)
	}
	evs, err := parseSSE(t, bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	want := "message_start ping " +
		"content_block_start content_block_delta content_block_delta content_block_delta content_block_delta content_block_stop " + // thinking: 3 + signature
		"content_block_start content_block_stop " + // redacted
		"content_block_start content_block_delta content_block_delta content_block_delta content_block_stop " + // text
		"content_block_start content_block_delta content_block_delta content_block_delta content_block_stop " + // tool_use
		"content_block_start content_block_delta content_block_delta content_block_delta content_block_stop " + // memory
		"message_delta message_stop"
	if got := names(evs); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	start := gjson.Parse(evs[0].data)
	if start.Get("message.id").Str != "msg_rich" || start.Get("message.stop_reason").Type != gjson.Null ||
		start.Get("message.usage.input_tokens").Int() != 120 || start.Get("message.usage.output_tokens").Int() != 1 ||
		start.Get("message.content").Raw != "[]" || start.Get("message.context_management").Type != gjson.Null {
		t.Errorf("message_start %s", evs[0].data)
	}
	// Per block: the deltas of each index rebuild the block.
	text := map[int64]string{}
	partial := map[int64]string{}
	sigs := map[int64]string{}
	for _, e := range evs {
		d := gjson.Parse(e.data)
		i := d.Get("index").Int()
		switch d.Get("delta.type").Str {
		case "text_delta":
			text[i] += d.Get("delta.text").Str
		case "thinking_delta":
			text[i] += d.Get("delta.thinking").Str
		case "signature_delta":
			sigs[i] += d.Get("delta.signature").Str
		case "input_json_delta":
			piece := d.Get("delta.partial_json").Str
			if json.Valid([]byte(piece)) {
				t.Errorf("index %d: input piece %q is JSON on its own", i, piece)
			}
			partial[i] += piece
		}
		if e.name == "content_block_start" {
			cb := d.Get("content_block")
			if typ := cb.Get("type").Str; (typ == "tool_use") && cb.Get("input").Raw != "{}" {
				t.Errorf("tool_use starts with input %s", cb.Get("input").Raw)
			}
		}
	}
	if text[0] != "Let me think about the weather in Paris." || sigs[0] != "sig-abc==" {
		t.Errorf("thinking %q sig %q", text[0], sigs[0])
	}
	if text[2] != "I'll check the weather for you — un instant." {
		t.Errorf("text %q", text[2])
	}
	if compactJSON(partial[3]) != `{"city":"Paris","days":[1,2,3],"units":"metric"}` {
		t.Errorf("tool input %q", partial[3])
	}
	if gjson.Get(partial[4], "command").Str != "view" || gjson.Get(partial[4], "path").Str != "/memories" {
		t.Errorf("memory input %q", partial[4])
	}
	if cb := gjson.Get(evs[8].data, "content_block"); cb.Get("type").Str != "redacted_thinking" || cb.Get("data").Str != "opaque-data" {
		t.Errorf("redacted block %s", evs[8].data)
	}
	md := gjson.Parse(evs[len(evs)-2].data)
	if md.Get("delta.stop_reason").Str != "tool_use" || md.Get("usage.output_tokens").Int() != 45 ||
		md.Get("usage.cache_read_input_tokens").Int() != 7 ||
		compactJSON(md.Get("context_management").Raw) != `{"applied_edits":[{"type":"clear_tool_uses_20250919","cleared_tool_uses":2,"cleared_input_tokens":500}]}` {
		t.Errorf("message_delta %s", md.Raw)
	}
}

func TestStreamedAndPlainRepliesCarryTheSameMessage(t *testing.T) {
	api, base := newServer(t, WithTextChunks(4))
	api.Enqueue(richReply(), richReply())
	_, plain := do(t, base, call{body: body("")})
	_, streamed := do(t, base, call{body: body(`{"stream":true}`)})
	evs, err := parseSSE(t, bytes.NewReader(streamed))
	if err != nil {
		t.Fatal(err)
	}
	rebuilt := accumulate(t, evs)
	if normJSON(t, rebuilt) != normJSON(t, string(plain)) {
		t.Errorf("stream rebuilt\n%s\nplain\n%s", normJSON(t, rebuilt), normJSON(t, string(plain)))
	}
}

// accumulate rebuilds the final message from events, the way SDKs do.
func accumulate(t *testing.T, evs []event) string {
	t.Helper()
	var msg map[string]any
	var blocks []map[string]any
	inputs := map[int]string{}
	for _, e := range evs {
		var d map[string]any
		if err := json.Unmarshal([]byte(e.data), &d); err != nil {
			t.Fatal(err)
		}
		switch e.name {
		case "message_start":
			msg = d["message"].(map[string]any)
		case "content_block_start":
			blocks = append(blocks, d["content_block"].(map[string]any))
		case "content_block_delta":
			i := int(d["index"].(float64))
			delta := d["delta"].(map[string]any)
			switch delta["type"] {
			case "text_delta":
				blocks[i]["text"] = blocks[i]["text"].(string) + delta["text"].(string)
			case "thinking_delta":
				blocks[i]["thinking"] = blocks[i]["thinking"].(string) + delta["thinking"].(string)
			case "signature_delta":
				blocks[i]["signature"] = delta["signature"]
			case "input_json_delta":
				inputs[i] += delta["partial_json"].(string)
			}
		case "content_block_stop":
			i := int(d["index"].(float64))
			if s, ok := inputs[i]; ok {
				var in any
				if err := json.Unmarshal([]byte(s), &in); err != nil {
					t.Fatalf("block %d input %q: %v", i, s, err)
				}
				blocks[i]["input"] = in
			}
		case "message_delta":
			delta := d["delta"].(map[string]any)
			msg["stop_reason"] = delta["stop_reason"]
			msg["stop_sequence"] = delta["stop_sequence"]
			msg["usage"] = d["usage"]
			msg["context_management"] = d["context_management"]
		}
	}
	msg["content"] = blocks
	b, _ := json.Marshal(msg)
	return string(b)
}

func TestToolUseBlocksGetIDsAndAToolUseStopReason(t *testing.T) {
	api, base := newServer(t)
	api.Enqueue(Blocks(MemoryCreate("/memories/a.md", "x")), Blocks(MemoryCreate("/memories/a.md", "x")))
	_, a := do(t, base, call{body: body("")})
	_, b := do(t, base, call{body: body("")})
	ida, idb := gjson.GetBytes(a, "content.0.id").Str, gjson.GetBytes(b, "content.0.id").Str
	if !strings.HasPrefix(ida, "toolu_fake_") || ida == idb {
		t.Errorf("ids %q %q", ida, idb)
	}
	if gjson.GetBytes(a, "stop_reason").Str != "tool_use" || gjson.GetBytes(a, "content.0.input.file_text").Str != "x" {
		t.Errorf("reply %s", a)
	}
}

func TestScriptAnswersByConversationPosition(t *testing.T) {
	api, base := newServer(t)
	api.SetResponder(Script(Blocks(MemoryView("/memories")), TextReply("done")))
	_, first := do(t, base, call{body: body("")})
	id := gjson.GetBytes(first, "content.0.id").Str
	if gjson.GetBytes(first, "content.0.name").Str != "memory" {
		t.Fatalf("turn 0: %s", first)
	}
	second := body(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":` + gjson.GetBytes(first, "content").Raw +
		`},{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + id + `","content":"empty"}]}]}`)
	_, out := do(t, base, call{body: second})
	if gjson.GetBytes(out, "content.0.text").Str != "done" {
		t.Errorf("turn 1: %s", out)
	}
	// Past the end the last turn repeats; a new conversation starts over.
	_, again := do(t, base, call{body: body("")})
	if gjson.GetBytes(again, "content.0.name").Str != "memory" {
		t.Errorf("new conversation: %s", again)
	}
}

func TestCountTokens(t *testing.T) {
	_, base := newServer(t)
	resp, out := do(t, base, call{path: "/v1/messages/count_tokens", body: body(`{"max_tokens":null}`)})
	if resp.StatusCode != 200 || compactJSON(string(out)) != `{"input_tokens":`+itoa(Tokens(len(`{"role":"user","content":"hi"}`)))+`,"context_management":null}` {
		t.Errorf("%d %s", resp.StatusCode, out)
	}
	resp, out = do(t, base, call{path: "/v1/messages/count_tokens", body: body(`{"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]}}`)})
	if resp.StatusCode != 200 || gjson.GetBytes(out, "context_management.original_input_tokens").Int() != gjson.GetBytes(out, "input_tokens").Int() {
		t.Errorf("%d %s", resp.StatusCode, out)
	}
}

func TestOtherV1PathsAnswerAndAreRecorded(t *testing.T) {
	api, base := newServer(t)
	resp, err := httpGet(base + "/v1/models?limit=2")
	if err != nil {
		t.Fatal(err)
	}
	if resp.status != 200 || gjson.Get(resp.body, "data.0.type").Str != "model" || resp.header.Get("request-id") == "" {
		t.Errorf("%d %s", resp.status, resp.body)
	}
	_, out := do(t, base, call{path: "/v1/files", body: `{"x":1}`})
	if gjson.GetBytes(out, "type").Str != "fake_passthrough" || gjson.GetBytes(out, "path").Str != "/v1/files" {
		t.Errorf("%s", out)
	}
	reqs := api.Requests()
	if len(reqs) != 2 || reqs[0].Path != "/v1/models" || reqs[0].RawQuery != "limit=2" || string(reqs[1].Body) != `{"x":1}` {
		t.Errorf("recorded %+v", reqs)
	}
}

// normJSON re-marshals s so key order does not matter.
func normJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
