package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/stack"
	"github.com/ctxproxy/ctxproxy/internal/testwait"
)

// consoleGet is the body of a console page, read with c.
func consoleGet(t *testing.T, c *http.Client, addr, path string) (int, string) {
	t.Helper()
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// A refused policy reload is shown to the admin token with every problem,
// and to a tenant token with its own policy file's problems only: another
// tenant's file names, lines and messages stay out of its pages.
func TestConsoleShowsATenantTokenOnlyItsOwnPolicyProblems(t *testing.T) {
	st := startConsole(t)
	admin, _ := consoleClient(t, st.addr, consoleAdmin)
	beta, _ := consoleClient(t, st.addr, consoleOperator)

	// Both files break; the last good policies (and beta's operator token) stay in force.
	for name, body := range map[string]string{
		"acme.yaml": stack.TenantPolicy("acme", binKey, "memory:\n  mode: acme-secret-mode\n"),
		"beta.yaml": stack.TenantPolicy("beta", betaKey, "operator_tokens_sha256: [\""+stack.KeyHash(consoleOperator)+"\"]\nmemory:\n  mode: beta-typo\n"),
	} {
		if err := os.WriteFile(filepath.Join(st.pols, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, "a refused reload naming both files", func() {
		for {
			_, page := consoleGet(t, admin, st.addr, "/admin/ui/health")
			if strings.Contains(page, "acme.yaml:4") && strings.Contains(page, "beta.yaml:5") {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	for _, path := range []string{"/admin/ui/", "/admin/ui/health"} {
		t.Run("the admin token sees every problem on "+path, func(t *testing.T) {
			_, page := consoleGet(t, admin, st.addr, path)
			for _, want := range []string{"acme.yaml:4", "acme-secret-mode", "beta.yaml:5", "beta-typo"} {
				if !strings.Contains(page, want) {
					t.Errorf("lacks %q:\n%s", want, page)
				}
			}
			if strings.Contains(page, st.pols) {
				t.Errorf("shows the policies folder's host path:\n%s", page)
			}
		})
		t.Run("beta's token sees beta's problem and nothing of acme's on "+path, func(t *testing.T) {
			code, page := consoleGet(t, beta, st.addr, path)
			if code != http.StatusOK || !strings.Contains(page, "beta.yaml:5") || !strings.Contains(page, "beta-typo") {
				t.Errorf("%d, lacks beta's own problem:\n%s", code, page)
			}
			for _, leak := range []string{"acme", st.pols} {
				if strings.Contains(page, leak) {
					t.Errorf("shows %q:\n%s", leak, page)
				}
			}
			if !strings.Contains(page, "1 problem(s) in policy files this token may not see") {
				t.Errorf("does not say a problem elsewhere was left out:\n%s", page)
			}
		})
	}
}
