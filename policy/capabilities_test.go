package policy

import (
	"net/http"
	"slices"
	"testing"

	"github.com/ctxproxy/ctxproxy/capabilities"
)

// stubModels is a model source answering from a map (tenant ignored).
type stubModels map[string]capabilities.Model

func (s stubModels) Model(_, model string) capabilities.Model { return s[model] }

func (s stubModels) Refuses(_, _, _, _ string) bool { return false }

func TestTheModelsCapabilitiesDecideTheTenantsEdits(t *testing.T) {
	const enforce = `tenant: acme
context_management:
  mode: enforce
  threads: pass
  clear_thinking: {keep: all}
  clear_tool_uses: {trigger: {type: input_tokens, value: 30000}}
  compact: {trigger: {type: input_tokens, value: 100000}}
memory: {mode: off}
`
	const listed = `tenant: acme
context_management:
  mode: enforce
  threads: pass
  clear_thinking: {keep: all}
  clear_tool_uses: {trigger: {type: input_tokens, value: 30000}}
  compact: {models: [claude-opus-5]}
memory: {mode: off}
`
	y, n, u := capabilities.Yes, capabilities.No, capabilities.Unknown
	models := stubModels{
		"m-all":        {ClearThinking: y, ClearToolUses: y, Compact: y, BetweenTools: y},
		"m-none":       {ClearThinking: n, ClearToolUses: n, Compact: n, BetweenTools: n},
		"m-no-compact": {ClearThinking: y, ClearToolUses: y, Compact: n, BetweenTools: n},
		// Unknown entries: the built-in lists (clear_* always, compact by DefaultCompactModels).
		"claude-opus-5-5":  {ClearThinking: u, ClearToolUses: u, Compact: u},
		"claude-haiku-5-5": {},
		// The capabilities say no where the built-in list says yes: they win.
		"claude-opus-4-8": {ClearThinking: y, ClearToolUses: y, Compact: n},
	}
	all := []string{EditClearThinking, EditClearToolUses, EditCompact}
	tests := []struct {
		name, model, thinking string
		policy                string
		want                  []string
	}{
		{"a model that takes every strategy gets every edit", "m-all", "enabled", enforce, all},
		{"a model that takes none gets none", "m-none", "enabled", enforce, nil},
		{"no compact where the model has none, though the policy asks it", "m-no-compact", "enabled", enforce, []string{EditClearThinking, EditClearToolUses}},
		{"a model the endpoint says compacts compacts though no list names it", "m-all", "disabled", enforce, []string{EditClearToolUses, EditCompact}},
		{"unknown capabilities fall back to the built-in list (yes)", "claude-opus-5-5", "enabled", enforce, all},
		{"unknown capabilities fall back to the built-in list (no)", "claude-haiku-5-5", "enabled", enforce, []string{EditClearThinking, EditClearToolUses}},
		{"the capabilities' no beats the built-in list", "claude-opus-4-8", "enabled", enforce, []string{EditClearThinking, EditClearToolUses}},
		{"between_tools counts as thinking where the model lists it", "m-all", "between_tools", enforce, all},
		{"between_tools is no thinking where the model does not list it", "m-no-compact", "between_tools", enforce, []string{EditClearToolUses}},
		{"between_tools is no thinking where nothing is known", "claude-opus-5-5", "between_tools", enforce, []string{EditClearToolUses, EditCompact}},
		{"a policy's own compact.models still bounds a model that compacts", "m-all", "enabled", listed, []string{EditClearThinking, EditClearToolUses}},
		{"a policy's own compact.models, where nothing is known", "claude-opus-5-20260722", "enabled", listed, all},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, tt.policy)
			p.models = models
			body := `{"model":"` + tt.model + `","max_tokens":10,"thinking":{"type":"` + tt.thinking + `"},"messages":[{"role":"user","content":"hi"}]}`
			_, info, err := p.Rewrite([]byte(body), http.Header{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(info.Edits, tt.want) {
				t.Errorf("edits %v, want %v", info.Edits, tt.want)
			}
		})
	}
}

func TestDefaultModeKeepsTheClientsClearThinkingUnderBetweenToolsWhereTheModelListsIt(t *testing.T) {
	p := mustParse(t, "tenant: acme\ncontext_management:\n  mode: default\n  clear_tool_uses: {}\nmemory: {mode: off}\n")
	p.models = stubModels{"m-bt": {BetweenTools: capabilities.Yes}, "m-no-bt": {BetweenTools: capabilities.No}}
	for model, want := range map[string][]string{
		"m-bt":    {EditClearThinking, EditClearToolUses},
		"m-no-bt": {EditClearToolUses},
	} {
		body := `{"model":"` + model + `","max_tokens":10,"thinking":{"type":"between_tools"},"context_management":{"edits":[{"type":"clear_tool_uses_20250919"},{"type":"clear_thinking_20251015"}]},"messages":[{"role":"user","content":"hi"}]}`
		_, info, err := p.Rewrite([]byte(body), http.Header{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(info.Edits, want) {
			t.Errorf("%s: edits %v, want %v", model, info.Edits, want)
		}
	}
}
