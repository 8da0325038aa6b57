package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/pgtest"
	"github.com/ctxproxy/ctxproxy/internal/testwait"
	"github.com/ctxproxy/ctxproxy/stack"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// Through the binary against the fake's model table: a model the tenant's requests used, or that
// its policy names, and that the API lists as deprecated or retired gets a log line,
// ctxproxy_model_retiring{tenant,model,retires_at} 1 while it holds, and a warning on the
// console's page for the tenant; an active model gets none, and the gauge goes when the model
// no longer retires.
func TestBinaryWarnsOfTheModelsATenantUsesThatRetire(t *testing.T) {
	fake := fakeapi.New()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	pols, _, err := stack.Layout(t.TempDir(), map[string]string{
		"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
		"vault.yaml": stack.TenantPolicy("vault", binKey, "memory:\n  mode: off\nupstream:\n  api_key_env: CTXPROXY_E2E_VAULT_KEY\n"+
			"context_management:\n  mode: enforce\n  clear_tool_uses: {}\n  compact:\n    models: [claude-sonnet-4-0, claude-opus-4-8]\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	p := startVaultProxy(t, "--upstream", srv.URL, "--policies", pols, "--memory-dir", t.TempDir(),
		"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"), "--debug-addr", "127.0.0.1:0")
	get := func(t *testing.T, url string) string {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	refresh := func(t *testing.T) {
		t.Helper()
		resp, err := http.Post("http://"+p.Addrs["debug listening"]+"/debug/models/refresh", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	gauges := func(t *testing.T) []string {
		var out []string
		for _, l := range strings.Split(get(t, "http://"+p.Addrs["debug listening"]+"/metrics"), "\n") {
			if strings.HasPrefix(l, "ctxproxy_model_retiring{") {
				out = append(out, l)
			}
		}
		return out
	}
	const (
		named   = `ctxproxy_model_retiring{model="claude-sonnet-4-20250514",retires_at="2026-10-14T00:00:00Z",tenant="vault"} 1`
		used    = `ctxproxy_model_retiring{model="claude-opus-4-5-20251101",retires_at="2027-01-22T00:00:00Z",tenant="vault"} 1`
		retired = `ctxproxy_model_retiring{model="claude-opus-4-1-20250805",retires_at="2026-09-04T00:00:00Z",tenant="vault"} 1`
	)
	t.Run("a model the policy names is reported from the start", func(t *testing.T) {
		if got := gauges(t); len(got) != 1 || got[0] != named {
			t.Errorf("gauges %q, want %q", got, named)
		}
	})

	for _, model := range []string{"claude-opus-4-5", "claude-opus-4-1", "claude-opus-4-8"} {
		sendAs(t, p.Addr, binKey, "/v1/messages", `{"model":"`+model+`","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	}
	refresh(t)
	t.Run("models the tenant used are reported at the next read, retired ones too; active ones never", func(t *testing.T) {
		got := strings.Join(gauges(t), "\n")
		for _, want := range []string{named, used, retired} {
			if !strings.Contains(got, want) {
				t.Errorf("no %s in\n%s", want, got)
			}
		}
		if strings.Contains(got, "claude-opus-4-8") || strings.Count(got, "\n") != 2 {
			t.Errorf("gauges:\n%s", got)
		}
		testwait.Eventually(t, "a log line for each", func() {
			for {
				log := p.Log()
				if strings.Contains(log, `"msg":"model retiring`) && strings.Contains(log, `"model":"claude-opus-4-5-20251101"`) &&
					strings.Contains(log, `"model":"claude-opus-4-1-20250805","lifecycle":"retired"`) {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	})
	t.Run("the console's page for the tenant warns of each", func(t *testing.T) {
		c, _ := consoleClient(t, p.Addr, e2eAdminToken)
		code, page := consoleGet(t, c, p.Addr, "/admin/ui/tenants/vault")
		if code != 200 {
			t.Fatalf("%d %s", code, page)
		}
		for _, want := range []string{
			`Model <code>claude-opus-4-1-20250805</code> is retired; it retired on 2026-09-04T00:00:00Z. This tenant's requests used it`,
			`Model <code>claude-opus-4-5-20251101</code> is deprecated; it retires on 2027-01-22T00:00:00Z.`,
			`Model <code>claude-sonnet-4-20250514</code> is deprecated; it retires on 2026-10-14T00:00:00Z. The policy names it`,
		} {
			if !strings.Contains(page, want) {
				t.Errorf("the page lacks %q:\n%s", want, page[strings.Index(page, "<h1>"):][:1500])
			}
		}
		if strings.Contains(page, "claude-opus-4-8</code> is") {
			t.Error("an active model is warned of")
		}
	})
	t.Run("the gauge goes when the model no longer retires", func(t *testing.T) {
		models := fakeapi.DefaultModels()
		for i := range models {
			if models[i].ID == "claude-opus-4-5-20251101" {
				models[i].Lifecycle, models[i].DeprecatedAt, models[i].RetiresAt = fakeapi.LifecycleActive, "", ""
			}
		}
		fake.SetModels(models)
		refresh(t)
		got := strings.Join(gauges(t), "\n")
		if strings.Contains(got, "claude-opus-4-5") || !strings.Contains(got, named) || !strings.Contains(got, retired) {
			t.Errorf("gauges:\n%s", got)
		}
	})
}

// A restart does not forget which models the tenant used: the proxy reads the last seven days'
// calls from its ledger at start, so a deprecated model the tenant used before a deploy is still
// reported (from the first read, with no request since), and a retired one last used eight days
// ago is not.
func TestBinaryRemembersAcrossARestartTheRetiringModelsATenantUsed(t *testing.T) {
	for _, store := range []struct {
		name string
		spec func(t *testing.T) string
	}{
		{"file ledger", func(t *testing.T) string { return "file:" + filepath.Join(t.TempDir(), "l.jsonl") }},
		{"postgres ledger", func(t *testing.T) string { return pgtest.New(t, "retiring_seed").URL }},
	} {
		t.Run(store.name, func(t *testing.T) {
			ledger := store.spec(t)
			l, err := tokens.OpenLedger(context.Background(), ledger)
			if err != nil {
				t.Fatal(err)
			}
			old := tokens.Call{Time: time.Now().Add(-8 * 24 * time.Hour), Tenant: "vault", Model: "claude-opus-4-1-20250805", Status: 200}
			if err := errors.Join(l.Append(context.Background(), old), l.Close()); err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(fakeapi.New())
			defer srv.Close()
			pols, _, err := stack.Layout(t.TempDir(), map[string]string{
				"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
				"vault.yaml":   stack.TenantPolicy("vault", binKey, "memory:\n  mode: off\nupstream:\n  api_key_env: CTXPROXY_E2E_VAULT_KEY\n"),
			})
			if err != nil {
				t.Fatal(err)
			}
			args := []string{"--upstream", srv.URL, "--policies", pols, "--memory-dir", t.TempDir(),
				"--ledger", ledger, "--debug-addr", "127.0.0.1:0"}
			gauges := func(t *testing.T, p *binaries.Process) string {
				t.Helper()
				resp, err := http.Get("http://" + p.Addrs["debug listening"] + "/metrics")
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				var out []string
				for _, l := range strings.Split(string(b), "\n") {
					if strings.HasPrefix(l, "ctxproxy_model_retiring{") {
						out = append(out, l)
					}
				}
				return strings.Join(out, "\n")
			}
			const used = `ctxproxy_model_retiring{model="claude-opus-4-5-20251101",retires_at="2027-01-22T00:00:00Z",tenant="vault"} 1`

			// The ledger is read beside the start; it says when it is done.
			seeded := func(p *binaries.Process) {
				t.Helper()
				testwait.Eventually(t, "the model usage read from the ledger", func() {
					for !strings.Contains(p.Log(), `"msg":"model usage read from the ledger"`) {
						time.Sleep(10 * time.Millisecond)
					}
				})
			}
			first := startVaultProxy(t, args...)
			seeded(first)
			if got := gauges(t, first); got != "" {
				t.Errorf("a model used eight days ago is reported: %s", got)
			}
			if resp, body := sendAs(t, first.Addr, binKey, "/v1/messages", `{"model":"claude-opus-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if code := first.Stop(); code != 0 {
				t.Fatalf("exit %d\n%s", code, first.Log())
			}

			second := startVaultProxy(t, args...)
			seeded(second)
			if got := gauges(t, second); got != used {
				t.Errorf("after the restart, gauges:\n%s\nwant\n%s\nlog:\n%s", got, used, second.Log())
			}
			if log := second.Log(); !strings.Contains(log, `"msg":"model retiring`) || !strings.Contains(log, `"model":"claude-opus-4-5-20251101"`) {
				t.Errorf("no log line for the model after the restart:\n%s", log)
			}
		})
	}
}
