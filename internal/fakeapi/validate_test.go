package fakeapi

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

const (
	toolA      = `{"name":"get_weather","input_schema":{"type":"object"}}`
	memoryTool = `{"type":"memory_20250818","name":"memory"}`
	thinkingOn = `"thinking":{"type":"enabled","budget_tokens":1024}`
)

// toolLoop is a conversation where the assistant called a tool.
func toolLoop(result string) string {
	return `"messages":[{"role":"user","content":"weather?"},` +
		`{"role":"assistant","content":[{"type":"text","text":"let me see"},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},` +
		`{"role":"user","content":` + result + `}]`
}

func TestValidation(t *testing.T) {
	cases := []struct {
		name    string
		body    string
		header  map[string]string
		noAuth  bool
		noBetas bool
		path    string
		status  int
		message string // substring of error.message; "" for accepted
	}{
		{name: "a minimal request is accepted", body: body(""), status: 200},
		{name: "malformed JSON is rejected", body: `{"model":`, status: 400, message: "not valid JSON"},
		{name: "a JSON array body is rejected", body: `[]`, status: 400, message: "must be a JSON object"},
		{name: "a missing model is rejected", body: body(`{"model":null}`), status: 400, message: "model: Field required"},
		{name: "a missing max_tokens is rejected", body: body(`{"max_tokens":null}`), status: 400, message: "max_tokens: Field required"},
		{name: "a fractional max_tokens is rejected", body: body(`{"max_tokens":1.5}`), status: 400, message: "max_tokens: Input should be a valid integer"},
		{name: "count_tokens needs no max_tokens", path: "/v1/messages/count_tokens", body: body(`{"max_tokens":null}`), status: 200},
		{name: "missing messages are rejected", body: body(`{"messages":null}`), status: 400, message: "messages: Field required"},
		{name: "empty messages are rejected", body: body(`{"messages":[]}`), status: 400, message: "at least one message"},
		{name: "a first assistant message is rejected", body: body(`{"messages":[{"role":"assistant","content":"x"}]}`), status: 400, message: `first message must use the "user" role`},
		{name: "two user turns in a row are rejected", body: body(`{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`), status: 400, message: "roles must alternate"},
		{name: "an unknown role is rejected", body: body(`{"messages":[{"role":"tool","content":"a"}]}`), status: 400, message: "messages.0.role"},
		{name: "a system message after the first user turn is accepted, as Claude Code sends it",
			body: body(`{"messages":[{"role":"user","content":"a"},{"role":"system","content":[{"type":"text","text":"# Environment","cache_control":{"type":"ephemeral"}}]},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}`), status: 200},
		{name: "a system message as a string is accepted",
			body: body(`{"messages":[{"role":"user","content":"a"},{"role":"system","content":"# Environment"}]}`), status: 200},
		{name: "a system message first is rejected", body: body(`{"messages":[{"role":"system","content":"a"},{"role":"user","content":"b"}]}`), status: 400, message: `first message must use the "user" role`},
		{name: "a system message does not break the alternation rule",
			body: body(`{"messages":[{"role":"user","content":"a"},{"role":"system","content":"s"},{"role":"user","content":"b"}]}`), status: 400, message: "roles must alternate"},
		{name: "a system message between a tool_use and its tool_result is rejected",
			body: body(`{"tools":[` + toolA + `],"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}]},{"role":"system","content":"s"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"x"}]}]}`), status: 400, message: "toolu_1"},
		{name: "a system message with a non-text block is rejected",
			body: body(`{"messages":[{"role":"user","content":"a"},{"role":"system","content":[{"type":"image","source":{}}]}]}`), status: 400, message: "only text blocks"},
		{name: "an empty system message is rejected",
			body: body(`{"messages":[{"role":"user","content":"a"},{"role":"system","content":""}]}`), status: 400, message: "non-empty content"},
		{name: "empty user content is rejected", body: body(`{"messages":[{"role":"user","content":""}]}`), status: 400, message: "non-empty content"},
		{name: "a final empty assistant prefill is accepted", body: body(`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":""}]}`), status: 200},
		{name: "a stream that is not a boolean is rejected", body: body(`{"stream":"yes"}`), status: 400, message: "stream: Input should be a valid boolean"},

		{name: "a tool_use answered first in the next user turn is accepted",
			body: body(`{"tools":[` + toolA + `],` + toolLoop(`[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"},{"type":"text","text":"thanks"}]`) + `}`), status: 200},
		{name: "a tool_use without its tool_result is rejected",
			body: body(`{` + toolLoop(`"no results here"`) + `}`), status: 400, message: "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_1"},
		{name: "a tool_result after other content is rejected",
			body: body(`{` + toolLoop(`[{"type":"text","text":"here"},{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"}]`) + `}`), status: 400, message: "must come first"},
		{name: "a tool_result for an unknown tool_use is rejected",
			body: body(`{` + toolLoop(`[{"type":"tool_result","tool_use_id":"toolu_1","content":"a"},{"type":"tool_result","tool_use_id":"toolu_9","content":"b"}]`) + `}`), status: 400, message: "unexpected `tool_use_id` found in `tool_result` blocks: toolu_9"},
		{name: "a tool_result answering the same tool_use twice is rejected",
			body: body(`{` + toolLoop(`[{"type":"tool_result","tool_use_id":"toolu_1","content":"a"},{"type":"tool_result","tool_use_id":"toolu_1","content":"b"}]`) + `}`), status: 400, message: "unexpected `tool_use_id`"},
		{name: "a tool_result in the first message is rejected",
			body: body(`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"x"}]}]}`), status: 400, message: "unexpected `tool_use_id`"},
		{name: "a final assistant tool_use is rejected",
			body: body(`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"x","input":{}}]}]}`), status: 400, message: "toolu_1"},
		{name: "a thinking block without signature is rejected",
			body: body(`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"thinking","thinking":"hm"}]},{"role":"user","content":"b"}]}`), status: 400, message: "thinking.signature: Field required"},

		{name: "the memory tool is accepted", body: body(`{"tools":[` + memoryTool + `,` + toolA + `]}`), status: 200},
		{name: "a memory tool named otherwise is rejected", body: body(`{"tools":[{"type":"memory_20250818","name":"notes"}]}`), status: 400, message: "Input should be 'memory'"},
		{name: "a custom tool without input_schema is rejected", body: body(`{"tools":[{"name":"x"}]}`), status: 400, message: "tools.0.custom.input_schema: Field required"},
		{name: "a custom tool without name is rejected", body: body(`{"tools":[{"input_schema":{"type":"object"}}]}`), status: 400, message: "tools.0.custom.name: Field required"},
		{name: "duplicate tool names are rejected", body: body(`{"tools":[` + memoryTool + `,{"name":"memory","input_schema":{"type":"object"}}]}`), status: 400, message: "Tool names must be unique"},

		{name: "known and date-shaped betas are accepted", header: map[string]string{"Anthropic-Beta": "claude-code-20250219, oauth-2025-04-20,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14," + BetaContextManagement}, body: body(""), status: 200},
		{name: "an unknown beta name is rejected", header: map[string]string{"Anthropic-Beta": BetaContextManagement + ",invalid-beta-name"}, body: body(""), status: 400, message: "Unsupported beta header: invalid-beta-name"},
		{name: "a denied date-shaped beta is rejected", header: map[string]string{"Anthropic-Beta": "unsupported-beta-2000-01-01"}, body: body(""), status: 400, message: "Unsupported beta header: unsupported-beta-2000-01-01"},
		{name: "a request without an API key is refused", noAuth: true, body: body(""), status: 401, message: "x-api-key header is required"},
		{name: "a bearer token is an API key too", noAuth: true, header: map[string]string{"Authorization": "Bearer tok", "Anthropic-Version": "2023-06-01"}, body: body(""), status: 200},
		{name: "a request without anthropic-version is rejected", noAuth: true, header: map[string]string{"X-Api-Key": "k"}, body: body(""), status: 400, message: "anthropic-version"},

		{name: "context_management without the beta is rejected", noBetas: true, body: body(`{"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]}}`), status: 400, message: "context_management: requires the anthropic-beta header"},
		{name: "the smallest clear_tool_uses edit is accepted", body: body(`{"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]}}`), status: 200},
		{name: "a full clear_tool_uses edit is accepted", body: body(`{"context_management":{"edits":[{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":5},"keep":{"type":"tool_uses","value":2},"clear_at_least":{"type":"input_tokens","value":100},"exclude_tools":["memory"],"clear_tool_inputs":["get_weather"]}]}}`), status: 200},
		{name: "null optional clear_tool_uses fields are accepted", body: body(`{"context_management":{"edits":[{"type":"clear_tool_uses_20250919","clear_at_least":null,"exclude_tools":null,"clear_tool_inputs":null}]}}`), status: 200},
		{name: "clear_tool_inputs true is accepted", body: body(`{"context_management":{"edits":[{"type":"clear_tool_uses_20250919","clear_tool_inputs":true}]}}`), status: 200},
		{name: "clear_tool_inputs of another type is rejected", body: body(`{"context_management":{"edits":[{"type":"clear_tool_uses_20250919","clear_tool_inputs":"all"}]}}`), status: 400, message: "clear_tool_inputs"},
		{name: "an unknown edit field is rejected", body: body(`{"context_management":{"edits":[{"type":"clear_tool_uses_20250919","keep_all":true}]}}`), status: 400, message: "context_management.edits.0.keep_all: Extra inputs are not permitted"},
		{name: "an unknown edit type is rejected", body: body(`{"context_management":{"edits":[{"type":"clear_everything"}]}}`), status: 400, message: "does not match any of the expected tags"},
		{name: "an unknown context_management field is rejected", body: body(`{"context_management":{"edits":[],"mode":"x"}}`), status: 400, message: "context_management.mode"},
		{name: "a trigger of an unknown type is rejected", body: body(`{"context_management":{"edits":[{"type":"clear_tool_uses_20250919","trigger":{"type":"turns","value":3}}]}}`), status: 400, message: "trigger.type"},
		{name: "a trigger without value is rejected", body: body(`{"context_management":{"edits":[{"type":"clear_tool_uses_20250919","trigger":{"type":"input_tokens"}}]}}`), status: 400, message: "trigger.value: Field required"},
		{name: "a trigger with a string value is rejected", body: body(`{"context_management":{"edits":[{"type":"clear_tool_uses_20250919","trigger":{"type":"input_tokens","value":"9"}}]}}`), status: 400, message: "trigger.value: Input should be a valid integer"},
		{name: "a keep of input_tokens is rejected", body: body(`{"context_management":{"edits":[{"type":"clear_tool_uses_20250919","keep":{"type":"input_tokens","value":3}}]}}`), status: 400, message: "keep.type"},
		{name: "an exclude_tools of numbers is rejected", body: body(`{"context_management":{"edits":[{"type":"clear_tool_uses_20250919","exclude_tools":[1]}]}}`), status: 400, message: "exclude_tools.0"},
		{name: "clear_thinking with thinking enabled is accepted", body: body(`{` + thinkingOn + `,"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":1}}]}}`), status: 200},
		{name: "clear_thinking with adaptive thinking and keep all is accepted", body: body(`{"thinking":{"type":"adaptive"},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]}}`), status: 200},
		{name: "clear_thinking with keep type all is accepted", body: body(`{` + thinkingOn + `,"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":{"type":"all"}}]}}`), status: 200},
		{name: "clear_thinking keeping zero turns is rejected", body: body(`{` + thinkingOn + `,"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":0}}]}}`), status: 400, message: "keep.value: Input should be greater than or equal to 1"},
		{name: "clear_thinking with keep some is rejected", body: body(`{` + thinkingOn + `,"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"some"}]}}`), status: 400, message: "keep"},
		{name: "clear_thinking without thinking is rejected", body: body(`{"context_management":{"edits":[{"type":"clear_thinking_20251015"}]}}`), status: 400, message: "requires extended thinking"},
		{name: "clear_thinking with thinking disabled is rejected", body: body(`{"thinking":{"type":"disabled"},"context_management":{"edits":[{"type":"clear_thinking_20251015"}]}}`), status: 400, message: "requires extended thinking"},
		{name: "clear_thinking first then clear_tool_uses is accepted", body: body(`{` + thinkingOn + `,"context_management":{"edits":[{"type":"clear_thinking_20251015"},{"type":"clear_tool_uses_20250919"}]}}`), status: 200},
		{name: "clear_thinking after clear_tool_uses is rejected", body: body(`{` + thinkingOn + `,"context_management":{"edits":[{"type":"clear_tool_uses_20250919"},{"type":"clear_thinking_20251015"}]}}`), status: 400, message: "must be the first edit"},
		{name: "duplicate edit types are rejected", body: body(`{"context_management":{"edits":[{"type":"clear_tool_uses_20250919"},{"type":"clear_tool_uses_20250919"}]}}`), status: 400, message: "duplicate edit type"},
		{name: "a compact edit is accepted", body: body(`{"context_management":{"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens","value":150000},"instructions":"be brief","pause_after_compaction":false}]}}`), status: 200},
		{name: "a small thinking budget is rejected", body: body(`{"thinking":{"type":"enabled","budget_tokens":100}}`), status: 400, message: "greater than or equal to 1024"},
		{name: "a thinking budget over max_tokens is rejected", body: body(`{"max_tokens":1024,"thinking":{"type":"enabled","budget_tokens":2048}}`), status: 400, message: "`max_tokens` must be greater than `thinking.budget_tokens`"},
		{name: "a thread without the beta is rejected", noBetas: true, body: body(`{"thread":{"type":"create"}}`), status: 400, message: "thread: requires the anthropic-beta header"},
		{name: "a thread of an unknown type is rejected", body: body(`{"thread":{"type":"fork"}}`), status: 400, message: "thread.type"},
	}
	_, base := newServer(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := do(t, base, call{path: tc.path, body: tc.body, header: tc.header, noAuth: tc.noAuth, noBetas: tc.noBetas})
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			if !strings.HasPrefix(resp.Header.Get("request-id"), "req_fake_") {
				t.Errorf("request-id header %q", resp.Header.Get("request-id"))
			}
			if tc.status == 200 {
				return
			}
			if gjson.GetBytes(b, "type").Str != "error" || gjson.GetBytes(b, "error.type").Str != errorTypes[tc.status] {
				t.Errorf("error shape: %s", b)
			}
			if msg := gjson.GetBytes(b, "error.message").Str; !strings.Contains(msg, tc.message) {
				t.Errorf("message %q does not contain %q", msg, tc.message)
			}
		})
	}
}

func TestRejectedRequestsAreRecordedWithTheirError(t *testing.T) {
	api, base := newServer(t)
	do(t, base, call{body: body(`{"model":null}`)})
	reqs := api.Requests()
	if len(reqs) != 1 || reqs[0].Status != 400 || reqs[0].Error == nil || reqs[0].Outcome != OutcomeError {
		t.Fatalf("recorded %+v", reqs)
	}
}

type repeatA struct{}

var aaaa = []byte(strings.Repeat("a", 64<<10))

func (repeatA) Read(p []byte) (int, error) { return copy(p, aaaa), nil }

func TestAnOversizedBodyIs413(t *testing.T) {
	_, base := newServer(t, WithOptions(Options{MaxBodyBytes: 1 << 20}))
	b := io.MultiReader(strings.NewReader(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"`),
		io.LimitReader(repeatA{}, 1<<20), strings.NewReader(`"}]}`))
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", b) // chunked: the limit is found by reading
	req.Header.Set("X-Api-Key", "k")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 413 || gjson.GetBytes(out, "error.type").Str != "request_too_large" {
		t.Fatalf("status %d: %.200s", resp.StatusCode, out)
	}
}
