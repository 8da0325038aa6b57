package policy

import (
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

func TestMemoryHistoryAndOperatorTokens(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "acme.yaml", "tenant: acme\noperator_tokens_sha256: ["+hexHash("op-secret")+"]\nmemory:\n  history: {keep_days: 0, keep_latest: 3}\n")
	write(t, dir, "globex.yaml", "tenant: globex\n")
	set, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("history is on by default: 30 days, the latest 10", func(t *testing.T) {
		if h := set.Tenant("globex").Memory.History; h != (memoryhook.Retention{KeepDays: 30, KeepLatest: 10}) {
			t.Errorf("default history %+v", h)
		}
	})
	t.Run("a policy sets keep_days and keep_latest", func(t *testing.T) {
		if h := set.Tenant("acme").Memory.History; h != (memoryhook.Retention{KeepDays: 0, KeepLatest: 3}) {
			t.Errorf("history %+v", h)
		}
	})
	t.Run("an operator token finds its tenant, a near miss none", func(t *testing.T) {
		p, name, ok := set.OperatorToken("op-secret")
		if !ok || p.Tenant != "acme" || name != "op-"+hexHash("op-secret")[:8] {
			t.Errorf("OperatorToken = %v %q %v", p, name, ok)
		}
		for _, tok := range []string{"op-secret ", "", "key"} {
			if _, _, ok := set.OperatorToken(tok); ok {
				t.Errorf("token %q matched", tok)
			}
		}
	})
	t.Run("bad values are load errors with file and line", func(t *testing.T) {
		bad := t.TempDir()
		write(t, bad, "acme.yaml", "tenant: acme\noperator_tokens_sha256: [abc]\nmemory:\n  history: {keep_days: -1, keep: 2}\n")
		_, err := LoadDir(bad)
		for _, want := range []string{"acme.yaml:2: operator_tokens_sha256[0] must be 64 hex digits (the sha256 of the operator token)",
			"acme.yaml:4: memory.history.keep_days", `acme.yaml:4: unknown key "keep" in memory.history`} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v, want %q", err, want)
			}
		}
	})
}
