package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
)

const threadBeta = "message-threads-2026-08-12"

func threadCreate(stream bool, tools string) string {
	b := `{"model":"claude-sonnet-4-5","max_tokens":100,"thread":{"type":"create"},` + tools + `"messages":[{"role":"user","content":"remember tea"}]}`
	if stream {
		b = withStream(b)
	}
	return b
}

func threadContinue(prev, content string) string {
	return `{"model":"claude-sonnet-4-5","max_tokens":100,"thread":{"type":"continue","previous_message_id":"` + prev + `"},"messages":[{"role":"user","content":` + content + `}]}`
}

// replyOf reads a non-streamed or streamed reply into the message the
// client's SDK would hold.
func replyOf(t *testing.T, body string, stream bool) string {
	t.Helper()
	if stream {
		return accumulate(t, body)
	}
	return body
}

func TestTheMemoryLoopContinuesAThreadAndTheClientCanContinueIt(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			h := newHarness(t)
			h.fake.SetResponder(fakeapi.Script(
				fakeapi.Blocks(fakeapi.Text("Saving."), fakeapi.MemoryCreate("/memories/tea.md", "likes tea")),
				fakeapi.TextReply("Saved."),
				fakeapi.TextReply("You like tea."),
			))
			resp := h.post("/v1/messages", keyAcme, threadCreate(stream, ""), "Anthropic-Beta", threadBeta)
			got := readAll(t, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
			msg := replyOf(t, got, stream)
			reqs := h.fake.Requests()
			if len(reqs) != 2 {
				t.Fatalf("upstream calls = %d, want 2", len(reqs))
			}
			loop := reqs[1]
			if loop.Thread != "continue" || loop.PreviousMessageID != reqs[0].ReplyID {
				t.Fatalf("loop call thread=%q prev=%q, want continue from %q", loop.Thread, loop.PreviousMessageID, reqs[0].ReplyID)
			}
			if gjson.GetBytes(loop.Body, "tools").Exists() {
				t.Fatalf("loop call carries a tools array, which would replace the thread's: %s", loop.Body)
			}
			if f, _ := h.memFile("acme", "tea.md"); f != "likes tea" {
				t.Fatalf("memory file = %q", f)
			}
			// The client continues from the id it was handed.
			id := gjson.Get(msg, "id").Str
			if !stream && id != reqs[1].ReplyID {
				t.Fatalf("client got id %s, want the last reply's %s", id, reqs[1].ReplyID)
			}
			resp = h.post("/v1/messages", keyAcme, threadContinue(id, `"what do I like?"`), "Anthropic-Beta", threadBeta)
			got = readAll(t, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("client's continue refused: %d %s", resp.StatusCode, got)
			}
			if prev := h.lastUpstream("/v1/messages").PreviousMessageID; prev != reqs[1].ReplyID {
				t.Fatalf("client's continue went up from %s, want the thread's last reply %s", prev, reqs[1].ReplyID)
			}
		})
	}
}

func TestAMixedReplyInAThreadGetsItsMemoryResultsOnTheClientsContinue(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			h := newHarness(t)
			h.fake.SetResponder(fakeapi.Script(
				fakeapi.Blocks(fakeapi.MemoryCreate("/memories/city.md", "Paris"),
					fakeapi.ToolUse("toolu_w1", "get_weather", map[string]string{"city": "Paris"})),
				fakeapi.TextReply("Sunny in Paris."),
			))
			tools := `"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],`
			resp := h.post("/v1/messages", keyAcme, threadCreate(stream, tools), "Anthropic-Beta", threadBeta)
			msg := replyOf(t, readAll(t, resp.Body), stream)
			if names := gjson.Get(msg, `content.#(type=="tool_use")#.name`).String(); names != `["get_weather"]` {
				t.Fatalf("client got tool_use blocks %s", names)
			}
			// The tool runner continues with only its own result and no tools.
			cont := threadContinue(gjson.Get(msg, "id").Str, `[{"type":"tool_result","tool_use_id":"toolu_w1","content":"sunny"}]`)
			resp = h.post("/v1/messages", keyAcme, cont, "Anthropic-Beta", threadBeta)
			got := readAll(t, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("client's continue refused: %d %s", resp.StatusCode, got)
			}
			up := h.lastUpstream("/v1/messages")
			blocks := gjson.GetBytes(up.Body, "messages.0.content.#.tool_use_id").String()
			if !strings.HasSuffix(blocks, `"toolu_w1"]`) || strings.Count(blocks, ",") != 1 {
				t.Fatalf("continue's tool_results = %s, want the memory result first, then the client's", blocks)
			}
			if gjson.GetBytes(up.Body, "tools").Exists() {
				t.Fatal("a tools array was added to a continue request")
			}
		})
	}
}

func TestAContinueOfAnUnknownThreadIsTheUpstreamsAnswer(t *testing.T) {
	h := newHarness(t)
	resp := h.post("/v1/messages", keyAcme, threadContinue("msg_nope", `"hi"`), "Anthropic-Beta", threadBeta)
	got := readAll(t, resp.Body)
	if resp.StatusCode != 404 || gjson.Get(got, "error.type").Str != "not_found_error" {
		t.Fatalf("status %d body %s", resp.StatusCode, got)
	}
}

// A continue that begins with a mid-conversation system entry: the owed
// memory results still come right after the thread's tool_use, in the
// client's user turn, which moves ahead of the system entry (none may sit
// between a tool_use and its tool_result).
func TestOwedResultsSkipALeadingSystemEntry(t *testing.T) {
	h := newHarness(t)
	h.fake.SetResponder(fakeapi.Script(
		fakeapi.Blocks(fakeapi.MemoryCreate("/memories/city.md", "Paris"),
			fakeapi.ToolUse("toolu_w1", "get_weather", map[string]string{"city": "Paris"})),
		fakeapi.TextReply("Sunny in Paris."),
	))
	tools := `"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],`
	resp := h.post("/v1/messages", keyAcme, threadCreate(false, tools), "Anthropic-Beta", threadBeta)
	msg := readAll(t, resp.Body)
	cont := `{"model":"claude-sonnet-4-5","max_tokens":100,"thread":{"type":"continue","previous_message_id":"` + gjson.Get(msg, "id").Str +
		`"},"messages":[{"role":"system","content":"The user is in Paris."},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_w1","content":"sunny"}]}]}`
	resp = h.post("/v1/messages", keyAcme, cont, "Anthropic-Beta", threadBeta)
	if got := readAll(t, resp.Body); resp.StatusCode != 200 {
		t.Fatalf("continue refused: %d %s", resp.StatusCode, got)
	}
	up := h.lastUpstream("/v1/messages")
	if roles := gjson.GetBytes(up.Body, "messages.#.role").String(); roles != `["user","system"]` {
		t.Fatalf("roles %s, want the user turn with the results first", roles)
	}
	if ids := gjson.GetBytes(up.Body, "messages.0.content.#.tool_use_id").String(); !strings.HasSuffix(ids, `"toolu_w1"]`) || strings.Count(ids, ",") != 1 {
		t.Fatalf("tool_results %s, want the memory result, then the client's", ids)
	}
}

// A thread is continued by its reply's id: ctxproxy finds the conversation by it, and asks the
// API's cache diagnosis against that reply.
func TestAThreadContinueIsTheConversationOfTheReplyItContinues(t *testing.T) {
	h := newHarness(t)
	h.fake.SetResponder(fakeapi.Script(fakeapi.TextReply("Noted."), fakeapi.TextReply("Tea.")))
	resp := h.post("/v1/messages", keyAcme, threadCreate(false, ""), "Anthropic-Beta", threadBeta)
	got := readAll(t, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	id := gjson.Get(got, "id").Str
	if first := h.lastUpstream("/v1/messages"); gjson.GetBytes(first.Body, "diagnostics.previous_message_id").Type != gjson.Null {
		t.Fatalf("the thread's first call names a previous reply: %s", gjson.GetBytes(first.Body, "diagnostics").Raw)
	}
	resp = h.post("/v1/messages", keyAcme, threadContinue(id, `"what do I like?"`), "Anthropic-Beta", threadBeta)
	if got := readAll(t, resp.Body); resp.StatusCode != 200 {
		t.Fatalf("continue: status %d: %s", resp.StatusCode, got)
	}
	if prev := gjson.GetBytes(h.lastUpstream("/v1/messages").Body, "diagnostics.previous_message_id").Str; prev != id {
		t.Errorf("the continue asked the diagnosis against %q, want the reply it continues, %q", prev, id)
	}
}
