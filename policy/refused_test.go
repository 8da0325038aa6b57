package policy

import (
	"net/http"
	"slices"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/capabilities"
)

// learnedModels is stubModels with the refusals the proxy learned.
type learnedModels struct {
	stubModels
	r *capabilities.Refusals
}

func (m learnedModels) Refuses(tenant, model, thinking, edit string) bool {
	return m.r.Has(capabilities.Refusal{Tenant: tenant, Model: model, Thinking: thinking, Edit: edit})
}

const refusingPolicy = `tenant: acme
context_management:
  mode: enforce
  threads: pass
  clear_thinking: {keep: all}
  clear_tool_uses: {trigger: {type: input_tokens, value: 30000}}
memory: {mode: off}
`

func btBody(model, thinking, cm string) string {
	b := `{"model":"` + model + `","max_tokens":10,"thinking":{"type":"` + thinking + `"}`
	if cm != "" {
		b += `,"context_management":` + cm
	}
	return b + `,"messages":[{"role":"user","content":"hi"}]}`
}

func TestALearnedRefusalStopsTheClearThinkingEditForThatModelAndThinkingTypeOnly(t *testing.T) {
	p := mustParse(t, refusingPolicy)
	r := &capabilities.Refusals{}
	p.models = learnedModels{stubModels{"m-bt": {BetweenTools: capabilities.Yes}, "m-other": {BetweenTools: capabilities.Yes}}, r}
	r.Add(capabilities.Refusal{Tenant: "acme", Model: "m-bt", Thinking: "between_tools", Edit: EditClearThinking})
	for _, tt := range []struct {
		name, model, thinking string
		want                  []string
		added                 bool
	}{
		{"the refused model under between_tools gets no clear_thinking", "m-bt", "between_tools", []string{EditClearToolUses}, false},
		{"the refused model with thinking enabled still gets it", "m-bt", "enabled", []string{EditClearThinking, EditClearToolUses}, true},
		{"another model under between_tools still gets it", "m-other", "between_tools", []string{EditClearThinking, EditClearToolUses}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := btBody(tt.model, tt.thinking, "")
			if tt.thinking == "enabled" {
				body = `{"model":"` + tt.model + `","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`
			}
			_, info, err := p.Rewrite([]byte(body), http.Header{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(info.Edits, tt.want) || info.ClearThinkingAdded != tt.added {
				t.Errorf("edits %v added %v, want %v %v", info.Edits, info.ClearThinkingAdded, tt.want, tt.added)
			}
		})
	}
}

func TestClearThinkingIsAddedOnlyWhereTheClientSentNone(t *testing.T) {
	models := stubModels{"m-bt": {BetweenTools: capabilities.Yes}}
	ct := `{"edits":[{"type":"clear_thinking_20251015"}]}`
	for _, tt := range []struct {
		name, policy, cm string
		added            bool
	}{
		{"enforce, the client sent no edit", refusingPolicy, "", true},
		{"enforce, the client sent its own clear_thinking", refusingPolicy, ct, false},
		{"default, the client sent no edit", "tenant: acme\ncontext_management:\n  mode: default\n  clear_thinking: {}\nmemory: {mode: off}\n", "", true},
		{"default, the client's clear_thinking is kept", "tenant: acme\ncontext_management:\n  mode: default\n  clear_thinking: {}\nmemory: {mode: off}\n", ct, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, tt.policy)
			p.models = models
			_, info, err := p.Rewrite([]byte(btBody("m-bt", "between_tools", tt.cm)), http.Header{})
			if err != nil {
				t.Fatal(err)
			}
			if info.ClearThinkingAdded != tt.added || !slices.Contains(info.Edits, EditClearThinking) {
				t.Errorf("added %v (edits %v), want %v", info.ClearThinkingAdded, info.Edits, tt.added)
			}
		})
	}
}

func TestRefusedEditKnowsTheRefusalOfItsOwnEditOnly(t *testing.T) {
	added := &RewriteInfo{ClearThinkingAdded: true, Edits: []string{EditClearThinking, EditClearToolUses}}
	notAdded := &RewriteInfo{Edits: []string{EditClearThinking}}
	apiErr := func(msg string) string {
		return `{"type":"error","error":{"type":"invalid_request_error","message":"` + msg + `"},"request_id":"req_1"}`
	}
	fakeMsg := `context_management.edits.0: clear_thinking_20251015 requires extended thinking; set thinking to {\"type\":\"enabled\",...} or {\"type\":\"adaptive\"}`
	apiMsg := "`clear_thinking_20251015` strategy requires `thinking` to be enabled or adaptive"
	for _, tt := range []struct {
		name   string
		info   *RewriteInfo
		status int
		body   string
		want   bool
	}{
		{"the fake's refusal, at the edit's path", added, 400, apiErr(fakeMsg), true},
		{"the API's refusal, as reported", added, 400, apiErr(apiMsg), true},
		{"the API's older wording", added, 400, apiErr("`clear_thinking_20251015` strategy requires `thinking` to be enabled"), true},
		{"the client's own clear_thinking is the client's", notAdded, 400, apiErr(apiMsg), false},
		{"a path at another edit is not ours", added, 400, apiErr(`context_management.edits.1: clear_thinking_20251015 requires extended thinking`), false},
		{"a path elsewhere is not ours", added, 400, apiErr(`messages.0.content: clear_thinking_20251015 requires extended thinking`), false},
		{"another complaint about the edit is not this refusal", added, 400, apiErr(`context_management.edits.0.keep: clear_thinking_20251015 keep must be positive`), false},
		{"another 400 is not ours", added, 400, apiErr("messages: at least one message is required"), false},
		{"a coded 400 is another refusal", added, 400, `{"type":"error","error":{"type":"invalid_request_error","message":"` + apiMsg + `","details":{"error_code":"organization_url_fetch_disabled"}}}`, false},
		{"another error type is not ours", added, 400, `{"type":"error","error":{"type":"api_error","message":"` + apiMsg + `"}}`, false},
		{"another status is not ours", added, 422, apiErr(apiMsg), false},
		{"a body that is no error is not ours", added, 400, `not json`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			edit, ok := RefusedEdit(tt.info, tt.status, []byte(tt.body))
			if ok != tt.want || ok && edit != EditClearThinking {
				t.Errorf("RefusedEdit = %q, %v; want %v", edit, ok, tt.want)
			}
		})
	}
}

func TestWithoutEditTakesOutOnlyTheRefusedEdit(t *testing.T) {
	ctJSON := `{"type":"clear_thinking_20251015","keep":"all"}`
	ctuJSON := `{"type":"clear_tool_uses_20250919"}`
	for _, tt := range []struct {
		name, body string
		info       RewriteInfo
		wantCM     string // context_management as resent; "" when none
		wantBeta   string
	}{
		{"the other edits stay", `{"a":1,"context_management":{"edits":[` + ctJSON + `,` + ctuJSON + `]}}`,
			RewriteInfo{Edits: []string{EditClearThinking, EditClearToolUses}, NeedsBeta: true, BetaAdded: true}, `{"edits":[` + ctuJSON + `]}`, BetaContextManagement},
		{"context_management goes with its only edit, and the beta the rewrite added", `{"a":1,"context_management":{"edits":[` + ctJSON + `]}}`,
			RewriteInfo{Edits: []string{EditClearThinking}, NeedsBeta: true, BetaAdded: true}, "", ""},
		{"the beta stays for the memory tool", `{"a":1,"context_management":{"edits":[` + ctJSON + `]}}`,
			RewriteInfo{Edits: []string{EditClearThinking}, NeedsBeta: true, BetaAdded: true, MemoryAdded: true}, "", BetaContextManagement},
		{"the client's other context_management members stay", `{"context_management":{"x":1,"edits":[` + ctJSON + `]}}`,
			RewriteInfo{Edits: []string{EditClearThinking}, NeedsBeta: true}, `{"x":1,"edits":[]}`, BetaContextManagement},
	} {
		t.Run(tt.name, func(t *testing.T) {
			info := tt.info
			info.ClearThinkingAdded = true
			h := http.Header{"Anthropic-Beta": {BetaContextManagement}}
			body := []byte(tt.body)
			out, err := WithoutEdit(body, &info, h, EditClearThinking)
			if err != nil {
				t.Fatal(err)
			}
			if string(body) != tt.body {
				t.Errorf("the request as first sent changed: %s", body)
			}
			if got := gjson.GetBytes(out, "context_management").Raw; got != tt.wantCM {
				t.Errorf("context_management %s, want %s", got, tt.wantCM)
			}
			if gjson.GetBytes(out, "a").Raw != gjson.Get(tt.body, "a").Raw {
				t.Errorf("the rest changed: %s", out)
			}
			if got := h.Get("Anthropic-Beta"); got != tt.wantBeta {
				t.Errorf("anthropic-beta %q, want %q", got, tt.wantBeta)
			}
			if slices.Contains(info.Edits, EditClearThinking) || info.ClearThinkingAdded {
				t.Errorf("info still has the edit: %+v", info)
			}
		})
	}
	t.Run("a body without the edit is an error", func(t *testing.T) {
		if _, err := WithoutEdit([]byte(`{"context_management":{"edits":[`+ctuJSON+`]}}`), &RewriteInfo{}, http.Header{}, EditClearThinking); err == nil {
			t.Error("no error")
		}
	})
}
