package policy

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func testPolicy(t *testing.T, name string) *Policy {
	t.Helper()
	path := filepath.Join("testdata", "policies", name+".yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(path, data)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const batchParamsPlain = `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`

func batchBody(params ...string) string {
	var b strings.Builder
	b.WriteString(`{"requests": [`)
	for i, p := range params {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`{"custom_id":"req-` + string(rune('a'+i)) + `","params":` + p + `}`)
	}
	b.WriteString("]}")
	return b.String()
}

func TestRewriteBatch(t *testing.T) {
	tests := []struct {
		name, policy string
		body         string
		// checks on the rewritten body
		memoryTool   bool // every params has the memory tool
		edits        string
		excludeMem   bool
		betaAdded    bool
		unchangedOut bool
	}{
		{name: "enforce with inject memory: each params gets the edits and the memory tool",
			policy: "enforce-inject", body: batchBody(batchParamsPlain, batchParamsPlain),
			memoryTool: true, edits: EditClearToolUses, excludeMem: true, betaAdded: true},
		{name: "proxy memory: edits with memory excluded, but no memory tool (no loop runs in a batch)",
			policy: "enforce-proxy", body: batchBody(batchParamsPlain),
			memoryTool: false, edits: EditClearToolUses, excludeMem: true, betaAdded: true},
		{name: "policy off: the body is left as it came",
			policy: "off-off", body: batchBody(batchParamsPlain), unchangedOut: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy(t, tc.policy)
			h := http.Header{}
			out, info, err := p.RewriteBatch([]byte(tc.body), h)
			if err != nil {
				t.Fatal(err)
			}
			if tc.unchangedOut {
				if string(out) != tc.body || info.Rewritten != 0 || h.Get("Anthropic-Beta") != "" {
					t.Fatalf("changed: %s %+v %v", out, info, h)
				}
				return
			}
			if !gjson.ValidBytes(out) {
				t.Fatalf("invalid JSON: %s", out)
			}
			if info.BetaAdded != tc.betaAdded || (tc.betaAdded && h.Get("Anthropic-Beta") != BetaContextManagement) {
				t.Fatalf("beta: %+v %v", info, h)
			}
			reqs := gjson.GetBytes(out, "requests").Array()
			if len(reqs) != info.Requests || info.Rewritten != len(reqs) {
				t.Fatalf("info %+v for %d requests", info, len(reqs))
			}
			for i, r := range reqs {
				params := r.Get("params")
				hasTool := params.Get(`tools.#(name=="memory")`).Exists()
				if hasTool != tc.memoryTool {
					t.Errorf("requests[%d] memory tool = %v, want %v: %s", i, hasTool, tc.memoryTool, params.Raw)
				}
				if got := params.Get("context_management.edits.0.type").Str; got != tc.edits {
					t.Errorf("requests[%d] edit = %q, want %q", i, got, tc.edits)
				}
				ex := params.Get("context_management.edits.0.exclude_tools").Raw
				if strings.Contains(ex, `"memory"`) != tc.excludeMem {
					t.Errorf("requests[%d] exclude_tools %s", i, ex)
				}
				if r.Get("custom_id").Str == "" || params.Get("model").Str != "claude-sonnet-4-5" {
					t.Errorf("requests[%d] lost bytes the policy does not own: %s", i, r.Raw)
				}
				if it := info.Items[i]; it.Model != params.Get("model").Str || it.MaxTokens != params.Get("max_tokens").Int() ||
					it.Bytes != len(params.Raw) {
					t.Errorf("requests[%d] item %+v for %s", i, it, params.Raw)
				}
			}
			// Bytes outside params are kept: the spacing of the requests array.
			if !strings.HasPrefix(string(out), `{"requests": [{"custom_id":"req-a","params":{`) {
				t.Fatalf("prefix changed: %.80s", out)
			}
		})
	}
}

func TestRewriteBatchRefusals(t *testing.T) {
	conflict := `{"model":"m","max_tokens":1,"messages":[],"tools":[{"name":"memory","input_schema":{}}]}`
	tests := []struct {
		name, body, want string
	}{
		{"a params the policy refuses is named by index and custom_id",
			batchBody(batchParamsPlain, conflict), `requests[1] (custom_id "req-b"): tools[0] is a tool named "memory"`},
		{"malformed JSON says where", `{"requests":[}`, "malformed JSON at line 1"},
		{"a body without requests", `{"foo":1}`, "requests: Field required"},
		{"requests that is not an array", `{"requests":{}}`, "requests must be an array"},
		{"an empty batch", `{"requests":[]}`, "at least one request"},
		{"a request without params", `{"requests":[{"custom_id":"x"}]}`, `requests[0] (custom_id "x"): params: Field required`},
		{"params that is not an object", `{"requests":[{"custom_id":"x","params":[]}]}`, `requests[0] (custom_id "x"): params must be an object`},
		{"requests given twice", `{"requests":[],"requests":[]}`, `"requests" more than once`},
	}
	p := testPolicy(t, "enforce-inject")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			_, _, err := p.RewriteBatch([]byte(tc.body), h)
			var re *RequestError
			if !errors.As(err, &re) || re.Status != http.StatusBadRequest || re.Type != "invalid_request_error" {
				t.Fatalf("err = %v, want a 400 RequestError", err)
			}
			if !strings.Contains(re.Message, tc.want) {
				t.Fatalf("message %q does not contain %q", re.Message, tc.want)
			}
			if h.Get("Anthropic-Beta") != "" {
				t.Fatalf("a refused batch changed the headers: %v", h)
			}
		})
	}
}
