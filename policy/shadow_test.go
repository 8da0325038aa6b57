package policy

import (
	"net/http"
	"testing"

	"github.com/tidwall/gjson"
)

// A candidate rewrites a request as the tenant's policy would with the candidate's
// context_management in place of its own: its edits, the tenant's memory tool.
func TestShadowCandidateRewrite(t *testing.T) {
	p, err := Parse("lab.yaml", []byte(`tenant: lab
context_management:
  mode: enforce
  clear_tool_uses: { trigger: { type: input_tokens, value: 100000 } }
memory: { mode: proxy }
shadow:
  sample: 0.5
  candidates:
    - name: keep-5
      context_management:
        mode: enforce
        clear_tool_uses: { trigger: { type: input_tokens, value: 80000 }, keep: { type: tool_uses, value: 5 } }
    - name: no-edits
      context_management: { mode: off }
    - name: compacting
      context_management: { mode: enforce, compact: {} }
`))
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"claude-opus-4-6","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	tests := []struct {
		candidate string
		edits     string
		compacts  bool
	}{
		{"keep-5", `[{"type":"clear_tool_uses_20250919","trigger":{"type":"input_tokens","value":80000},"keep":{"type":"tool_uses","value":5},"exclude_tools":["memory"]}]`, false},
		{"no-edits", ``, false},
		{"compacting", `[{"type":"compact_20260112","pause_after_compaction":false}]`, true},
	}
	for _, tt := range tests {
		t.Run(tt.candidate+" writes its own edits and the tenant's memory tool", func(t *testing.T) {
			c, ok := p.Shadow.Candidate(tt.candidate)
			if !ok {
				t.Fatalf("no candidate %q", tt.candidate)
			}
			if c.Policy.Shadow != nil {
				t.Error("a candidate's policy has a shadow block of its own")
			}
			out, _, err := c.Policy.Rewrite(body, http.Header{})
			if err != nil {
				t.Fatal(err)
			}
			if got := gjson.GetBytes(out, "context_management.edits").Raw; got != tt.edits {
				t.Errorf("edits = %s, want %s", got, tt.edits)
			}
			if got := gjson.GetBytes(out, "tools.#(name==\"memory\").type").Str; got != MemoryToolType {
				t.Errorf("memory tool = %q, want the tenant's", got)
			}
			if c.Compacts() != tt.compacts {
				t.Errorf("Compacts() = %v, want %v", c.Compacts(), tt.compacts)
			}
		})
	}
	t.Run("the tenant's own rewrite is unchanged by its candidates", func(t *testing.T) {
		out, _, err := p.Rewrite(body, http.Header{})
		if err != nil {
			t.Fatal(err)
		}
		want := `[{"type":"clear_tool_uses_20250919","trigger":{"type":"input_tokens","value":100000},"exclude_tools":["memory"]}]`
		if got := gjson.GetBytes(out, "context_management.edits").Raw; got != want {
			t.Errorf("edits = %s, want %s", got, want)
		}
	})
}
