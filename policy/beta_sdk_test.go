package policy

import (
	"go/ast"
	goparser "go/parser"
	"go/token"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// sdkBetas reads the pinned Go SDK's anthropic-beta constants (beta.go, the module go.mod
// requires) with whether each is marked Deprecated.
func sdkBetas(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/anthropics/anthropic-sdk-go/v2").Output()
	if err != nil {
		t.Fatalf("locate the pinned Go SDK: %v", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "beta.go")
	f, err := goparser.ParseFile(token.NewFileSet(), path, nil, goparser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	betas := map[string]bool{} // value → deprecated
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, sp := range g.Specs {
			vs := sp.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "AnthropicBeta" || len(vs.Values) != 1 {
				continue
			}
			lit, ok := vs.Values[0].(*ast.BasicLit)
			if !ok {
				continue
			}
			v, _ := strconv.Unquote(lit.Value)
			betas[v] = vs.Doc != nil && strings.Contains(vs.Doc.Text(), "Deprecated:")
		}
	}
	if len(betas) < 20 || !slices.Contains(keys(betas), "context-management-2025-06-27") {
		t.Fatalf("read %d beta constants from %s: the SDK's layout changed", len(betas), path)
	}
	return betas
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Every value ctxproxy adds to anthropic-beta is one the pinned SDK knows and does not mark
// deprecated (a deprecated or GA beta can make the API answer 400), and never context-1m, which
// the API refused once it went GA though no SDK marks it.
func TestAddedBetasAreThePinnedSDKsAndNoneDeprecated(t *testing.T) {
	sdk := sdkBetas(t)
	t.Run("the SDK reader sees a deprecated value", func(t *testing.T) {
		if !sdk["prompt-caching-2024-07-31"] {
			t.Fatal("prompt-caching-2024-07-31 is not read as deprecated")
		}
	})
	for _, b := range AddedBetas() {
		t.Run(b+" is the SDK's and not deprecated", func(t *testing.T) {
			deprecated, known := sdk[b]
			switch {
			case !known:
				t.Errorf("%s is not a beta of the pinned SDK", b)
			case deprecated:
				t.Errorf("%s is deprecated in the pinned SDK: stop adding it", b)
			case b == "context-1m-2025-08-07":
				t.Error("context-1m is never added")
			}
		})
	}
}

// The rewrite adds a beta only when the outgoing body uses what it turns on.
func TestRewriteAddsOnlyTheBetasTheBodyNeeds(t *testing.T) {
	plain := func(model string) string {
		return `{"model":"` + model + `","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	}
	tests := []struct {
		name, policy, body, client, want string
	}{
		{"nothing written, nothing added", "off-off", plain("claude-opus-5-5"), "", ""},
		{"a client's betas stay its own", "off-off", plain("claude-opus-5-5"), "prompt-caching-2024-07-31", "prompt-caching-2024-07-31"},
		{"enforce without edits or memory adds none", "enforce-none", plain("claude-opus-5-5"), "", ""},
		{"clearing edits add context management only", "default-memoff", plain("claude-opus-5-5"), "", BetaContextManagement},
		{"a compact edit adds the compaction beta", "compact-enforce", plain("claude-opus-5-5"), "", BetaContextManagement + "," + BetaCompact},
		{"a model that does not compact gets no compaction beta", "compact-enforce", plain("claude-haiku-5-5"), "", BetaContextManagement},
		{"a beta the client sent is not added twice", "default-memoff", plain("claude-opus-5-5"), "x-1," + BetaContextManagement, "x-1," + BetaContextManagement},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.client != "" {
				h.Set("Anthropic-Beta", tt.client)
			}
			if _, _, err := testPolicy(t, tt.policy).Rewrite([]byte(tt.body), h); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(h.Values("Anthropic-Beta"), ","); got != tt.want {
				t.Errorf("anthropic-beta %q, want %q", got, tt.want)
			}
		})
	}
}
