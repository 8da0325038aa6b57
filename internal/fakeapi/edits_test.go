package fakeapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

var bigResult = `"` + strings.Repeat("x", 400) + `"`

// toolHistory: five tool uses (the third is memory), each with a 400-byte result.
func toolHistory() []string {
	msgs := []string{`{"role":"user","content":"go"}`}
	for k := 1; k <= 5; k++ {
		name := "get_weather"
		if k == 3 {
			name = "memory"
		}
		msgs = append(msgs,
			fmt.Sprintf(`{"role":"assistant","content":[{"type":"tool_use","id":"t%d","name":"%s","input":{"n":%d}}]}`, k, name, k),
			fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t%d","content":%s}]}`, k, bigResult))
	}
	return msgs
}

// thinkingHistory: three assistant turns with a thinking block each.
func thinkingHistory() []string {
	msgs := []string{`{"role":"user","content":"q1"}`}
	for k := 1; k <= 3; k++ {
		msgs = append(msgs,
			fmt.Sprintf(`{"role":"assistant","content":[{"type":"thinking","thinking":"%s","signature":"s%d"},{"type":"text","text":"a%d"}]}`, strings.Repeat("h", 100), k, k),
			fmt.Sprintf(`{"role":"user","content":"q%d"}`, k+1))
	}
	return msgs
}

const tools = `[{"name":"get_weather","input_schema":{"type":"object"}},{"type":"memory_20250818","name":"memory"}]`

func TestContextEditingMath(t *testing.T) {
	thinkingBlock := len(`{"type":"thinking","thinking":"` + strings.Repeat("h", 100) + `","signature":"s1"}`)
	resultFreed := len(bigResult) - placeholderLen
	cases := []struct {
		name    string
		msgs    []string
		edits   string
		applied string // expected applied_edits, with %d for the computed numbers
		freed   int    // bytes freed in total
	}{
		{name: "clear_tool_uses clears all but the kept, never excluded tools",
			msgs:    toolHistory(),
			edits:   `{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":2},"keep":{"type":"tool_uses","value":2},"exclude_tools":["memory"]}`,
			applied: fmt.Sprintf(`[{"type":"clear_tool_uses_20250919","cleared_tool_uses":2,"cleared_input_tokens":%d}]`, Tokens(2*resultFreed)),
			freed:   2 * resultFreed},
		{name: "clear_tool_inputs also frees the inputs of the named tools",
			msgs:    toolHistory(),
			edits:   `{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":2},"keep":{"type":"tool_uses","value":2},"exclude_tools":["memory"],"clear_tool_inputs":["get_weather"]}`,
			applied: fmt.Sprintf(`[{"type":"clear_tool_uses_20250919","cleared_tool_uses":2,"cleared_input_tokens":%d}]`, Tokens(2*resultFreed+2*(len(`{"n":1}`)-2))),
			freed:   2*resultFreed + 2*(len(`{"n":1}`)-2)},
		{name: "without exclusions the memory tool use is cleared too",
			msgs:    toolHistory(),
			edits:   `{"type":"clear_tool_uses_20250919","trigger":{"type":"input_tokens","value":100},"keep":{"type":"tool_uses","value":1}}`,
			applied: fmt.Sprintf(`[{"type":"clear_tool_uses_20250919","cleared_tool_uses":4,"cleared_input_tokens":%d}]`, Tokens(4*resultFreed)),
			freed:   4 * resultFreed},
		{name: "an input_tokens trigger above the prompt clears nothing",
			msgs:    toolHistory(),
			edits:   `{"type":"clear_tool_uses_20250919","trigger":{"type":"input_tokens","value":100000}}`,
			applied: `[]`},
		{name: "a tool_uses trigger not exceeded clears nothing",
			msgs:    toolHistory(),
			edits:   `{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":5},"keep":{"type":"tool_uses","value":0}}`,
			applied: `[]`},
		{name: "clear_at_least above what would be freed clears nothing",
			msgs:    toolHistory(),
			edits:   `{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":1},"keep":{"type":"tool_uses","value":3},"clear_at_least":{"type":"input_tokens","value":100000}}`,
			applied: `[]`},
		{name: "the default keep is three tool uses",
			msgs:    toolHistory(),
			edits:   `{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":1}}`,
			applied: fmt.Sprintf(`[{"type":"clear_tool_uses_20250919","cleared_tool_uses":2,"cleared_input_tokens":%d}]`, Tokens(2*resultFreed)),
			freed:   2 * resultFreed},
		{name: "clear_thinking keeps the thinking of the last N assistant turns",
			msgs:    thinkingHistory(),
			edits:   `{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":1}}`,
			applied: fmt.Sprintf(`[{"type":"clear_thinking_20251015","cleared_thinking_turns":2,"cleared_input_tokens":%d}]`, Tokens(2*thinkingBlock)),
			freed:   2 * thinkingBlock},
		{name: "clear_thinking keeping all clears nothing",
			msgs:    thinkingHistory(),
			edits:   `{"type":"clear_thinking_20251015","keep":"all"}`,
			applied: `[]`},
		{name: "both edits report in order",
			msgs:  append(thinkingHistory()[:5], toolHistory()[1:]...),
			edits: `{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":1}},{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":1},"keep":{"type":"tool_uses","value":4}}`,
			applied: fmt.Sprintf(`[{"type":"clear_thinking_20251015","cleared_thinking_turns":2,"cleared_input_tokens":%d},{"type":"clear_tool_uses_20250919","cleared_tool_uses":1,"cleared_input_tokens":%d}]`,
				Tokens(2*thinkingBlock), Tokens(resultFreed)),
			freed: 2*thinkingBlock + resultFreed},
	}
	_, base := newServer(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msgs := "[" + strings.Join(tc.msgs, ",") + "]"
			total := len(tools)
			for _, m := range tc.msgs {
				total += len(m)
			}
			extra := `"tools":` + tools + `,"messages":` + msgs + `,"context_management":{"edits":[` + tc.edits + `]}`
			if strings.Contains(tc.edits, "clear_thinking") {
				extra += `,` + thinkingOn
			}
			resp, out := do(t, base, call{body: body("{" + extra + "}")})
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, out)
			}
			if got := compactJSON(gjson.GetBytes(out, "context_management.applied_edits").Raw); got != tc.applied {
				t.Errorf("applied_edits\n got %s\nwant %s", got, tc.applied)
			}
			if got, want := gjson.GetBytes(out, "usage.input_tokens").Int(), Tokens(total-tc.freed); got != want {
				t.Errorf("input_tokens %d, want %d", got, want)
			}
			_, counted := do(t, base, call{path: "/v1/messages/count_tokens", body: body("{" + extra + "}")})
			if got := compactJSON(string(counted)); got != fmt.Sprintf(`{"input_tokens":%d,"context_management":{"original_input_tokens":%d}}`, Tokens(total-tc.freed), Tokens(total)) {
				t.Errorf("count_tokens %s", got)
			}
		})
	}
}

func TestAlreadyClearedResultsAreNotCountedAgain(t *testing.T) {
	msgs := toolHistory()
	msgs[2] = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"` + ClearedPlaceholder + `"}]}`
	_, base := newServer(t)
	edits := `{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":1},"keep":{"type":"tool_uses","value":3}}`
	_, out := do(t, base, call{body: body(`{"messages":[` + strings.Join(msgs, ",") + `],"context_management":{"edits":[` + edits + `]}}`)})
	if got := gjson.GetBytes(out, "context_management.applied_edits.0.cleared_tool_uses").Int(); got != 1 {
		t.Errorf("cleared %d, want 1: %s", got, out)
	}
}

func TestTheDefaultThinkingKeepFollowsTheModel(t *testing.T) {
	cases := map[string]int64{
		"claude-opus-4-8":            -1,
		"claude-opus-4-5-20251101":   -1,
		"claude-sonnet-4-6":          -1,
		"claude-sonnet-5":            -1,
		"claude-sonnet-4-5-20250929": 1,
		"claude-haiku-4-5-20251001":  1,
		"claude-opus-4-1-20250805":   1,
		"some-other-model":           -1,
	}
	for model, want := range cases {
		if got := defaultThinkingKeep(model); got != want {
			t.Errorf("%s: keep %d, want %d", model, got, want)
		}
	}
}

func TestAnAppliedEditsOverrideWins(t *testing.T) {
	api, base := newServer(t)
	api.Enqueue(Reply{AppliedEdits: []json.RawMessage{AppliedEdit(editClearThinking, 3, 15000)}})
	_, out := do(t, base, call{body: body("")})
	if got := compactJSON(gjson.GetBytes(out, "context_management").Raw); got != `{"applied_edits":[{"type":"clear_thinking_20251015","cleared_thinking_turns":3,"cleared_input_tokens":15000}]}` {
		t.Errorf("%s", got)
	}
}
