package fakeapi

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func continueBody(prev, messages string, extra ...string) string {
	b := `{"model":"claude-sonnet-4-5","max_tokens":1024,"thread":{"type":"continue","previous_message_id":"` + prev + `"},"messages":` + messages
	for _, e := range extra {
		b += "," + e
	}
	return b + "}"
}

func TestThreads(t *testing.T) {
	api, base := newServer(t)
	api.Enqueue(Blocks(Text("checking"), ToolUse("toolu_a", "get_weather", map[string]string{"city": "Paris"})))
	_, first := do(t, base, call{body: body(`{"thread":{"type":"create"},"tools":[` + toolA + `],"system":"be brief"}`)})
	id := gjson.GetBytes(first, "id").Str
	if id == "" {
		t.Fatalf("create: %s", first)
	}
	answer := `[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_a","content":"sunny"}]}]`

	t.Run("a continue with an unknown id is 404 thread_not_found", func(t *testing.T) {
		resp, out := do(t, base, call{body: continueBody("msg_nope", answer)})
		if resp.StatusCode != 404 || gjson.GetBytes(out, "error.type").Str != "not_found_error" ||
			gjson.GetBytes(out, "error.details.error_code").Str != "thread_not_found" {
			t.Errorf("%d %s", resp.StatusCode, out)
		}
	})
	t.Run("a continue that does not answer the tool_use is rejected", func(t *testing.T) {
		resp, out := do(t, base, call{body: continueBody(id, `[{"role":"user","content":"and?"}]`)})
		if resp.StatusCode != 400 || !strings.Contains(gjson.GetBytes(out, "error.message").Str, "toolu_a") {
			t.Errorf("%d %s", resp.StatusCode, out)
		}
	})
	t.Run("a continue starting with an assistant turn is rejected", func(t *testing.T) {
		resp, out := do(t, base, call{body: continueBody(id, `[{"role":"assistant","content":"x"}]`)})
		if resp.StatusCode != 400 || !strings.Contains(gjson.GetBytes(out, "error.message").Str, "alternate") {
			t.Errorf("%d %s", resp.StatusCode, out)
		}
	})
	var second string
	t.Run("a continue sees the stored conversation and inherits tools and system", func(t *testing.T) {
		resp, out := do(t, base, call{body: continueBody(id, answer)})
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		second = gjson.GetBytes(out, "id").Str
		r, _ := api.LastRequest("/v1/messages")
		if len(r.Messages) != 3 || r.AssistantTurns != 1 || compactJSON(string(r.Tools)) != "["+toolA+"]" ||
			gjson.GetBytes(r.Messages[1], "content.1.id").Str != "toolu_a" {
			t.Errorf("resolved %d messages, tools %s", len(r.Messages), r.Tools)
		}
		// Usage counts the whole conversation plus the inherited system and tools.
		total := len(`"be brief"`) + len(r.Tools)
		for _, m := range r.Messages {
			total += len(m)
		}
		if got := gjson.GetBytes(out, "usage.input_tokens").Int(); got != Tokens(total) {
			t.Errorf("input_tokens %d, want %d", got, Tokens(total))
		}
	})
	t.Run("a reply can be continued only once", func(t *testing.T) {
		resp, out := do(t, base, call{body: continueBody(id, answer)})
		if resp.StatusCode != 400 || gjson.GetBytes(out, "error.details.error_code").Str != "thread_already_continued" {
			t.Errorf("%d %s", resp.StatusCode, out)
		}
	})
	t.Run("the newest reply continues with new tools replacing the thread's", func(t *testing.T) {
		resp, out := do(t, base, call{body: continueBody(second, `[{"role":"user","content":"thanks"}]`, `"tools":[`+memoryTool+`]`)})
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		r, _ := api.LastRequest("/v1/messages")
		if len(r.Messages) != 5 || string(r.Tools) != "["+memoryTool+"]" {
			t.Errorf("resolved %d messages, tools %s", len(r.Messages), r.Tools)
		}
	})
	t.Run("a failed reply leaves the previous reply continuable", func(t *testing.T) {
		api.Enqueue(Blocks(Text("x")))
		_, out := do(t, base, call{body: body(`{"thread":{"type":"create"}}`)})
		prev := gjson.GetBytes(out, "id").Str
		api.Enqueue(Overloaded())
		if resp, _ := do(t, base, call{body: continueBody(prev, `[{"role":"user","content":"more"}]`)}); resp.StatusCode != 529 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		api.Enqueue(Reply{Content: Blocks(Text("long text to cut")).Content, CutAfter: 2})
		do(t, base, call{body: continueBody(prev, `[{"role":"user","content":"more"}]`, `"stream":true`), cut: true})
		if resp, out := do(t, base, call{body: continueBody(prev, `[{"role":"user","content":"more"}]`)}); resp.StatusCode != 200 {
			t.Errorf("retry after failures: %d %s", resp.StatusCode, out)
		}
	})
	t.Run("Reset forgets threads", func(t *testing.T) {
		api.Reset()
		if resp, _ := do(t, base, call{body: continueBody(second, `[{"role":"user","content":"x"}]`)}); resp.StatusCode != 404 {
			t.Errorf("status %d", resp.StatusCode)
		}
	})
}
