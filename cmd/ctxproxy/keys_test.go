package main

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/apikey"
	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/pgtest"
	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/stack"
)

const (
	e2eVaultKey   = "sk-ant-api03-e2e-the-tenants-own-key" // held by ctxproxy, from the environment
	e2eAdminToken = "e2e-admin-token"
)

// startVaultProxy runs the binary with the tenant's key in its environment.
func startVaultProxy(t *testing.T, args ...string) *binaries.Process {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"--listen", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--admin-token", e2eAdminToken}, args...)...)
	cmd.Env = append(os.Environ(), "CTXPROXY_LOG_LEVEL=debug", "CTXPROXY_E2E_VAULT_KEY="+e2eVaultKey)
	p, err := binaries.Start(context.Background(), cmd, "ctxproxy listening", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

// keysCLI runs `ctxproxy keys ARGS` against the proxy at addr.
func keysCLI(t *testing.T, addr string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"keys"}, args...)...)
	cmd.Env = append(os.Environ(), "CTXPROXY_URL=http://"+addr, "CTXPROXY_ADMIN_TOKEN="+e2eAdminToken)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ctxproxy keys %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// call sends a request with the given credential header.
func call(t *testing.T, addr, method, path, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

var e2eRoutes = []struct{ name, method, path, body string }{
	{"messages", "POST", "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`},
	{"messages streamed", "POST", "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	{"count_tokens", "POST", "/v1/messages/count_tokens", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`},
	{"batches", "POST", "/v1/messages/batches", `{"requests":[{"custom_id":"a","params":{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}}]}`},
	{"models", "GET", "/v1/models", ``},
	{"any other route", "GET", "/v1/files", ``},
}

// Two replicas on one PostgreSQL database: keys minted on one work on the
// other, every route swaps the credential, revocation and expiry reach the
// other replica within 5 seconds, and no key is ever in a log line, a
// metric, the ledger or a reply.
func TestBinaryKeysAcrossReplicas(t *testing.T) {
	db := pgtest.New(t, "keys_e2e")
	fake, upURL := fakeUpstream(t)
	fake.SetOptions(fakeapi.Options{EchoHeaders: true}) // an upstream that echoes what it was sent
	prices, err := os.ReadFile("../../tokens/builtin_prices.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pols, _, err := stack.Layout(t.TempDir(), map[string]string{
		"prices.yaml":  string(prices),
		"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
		"vault.yaml":   "tenant: vault\nmemory:\n  mode: off\nupstream:\n  api_key_env: CTXPROXY_E2E_VAULT_KEY\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	a := startVaultProxy(t, "--upstream", upURL, "--policies", pols, "--memory-store", db.URL, "--ledger", db.URL)
	b := startVaultProxy(t, "--upstream", upURL, "--policies", pols, "--memory-store", db.URL, "--ledger", db.URL)

	created := keysCLI(t, a.Addr, "create", "--tenant", "vault", "--name", "laptop", "--user", "ana", "--json")
	secret, id := gjson.Get(created, "key").Str, gjson.Get(created, "id").Str
	if !keys.IsKey(secret) || id == "" {
		t.Fatalf("create: %s", created)
	}
	var replies []string // everything a client was sent
	t.Run("a key minted on one replica works on the other, and every route sends the tenant's key instead", func(t *testing.T) {
		for i, rt := range e2eRoutes {
			auth := []string{"X-Api-Key", secret}
			if i%2 == 1 {
				auth = []string{"Authorization", "Bearer " + secret} // as Claude Code sends ANTHROPIC_AUTH_TOKEN
			}
			resp, body := call(t, b.Addr, rt.method, rt.path, rt.body, auth...)
			replies = append(replies, body, headerString(resp.Header))
			up, _ := fake.LastRequest(rt.path)
			if resp.StatusCode != 200 || up.Credential != e2eVaultKey {
				t.Fatalf("%s: %d %s; upstream credential %q", rt.name, resp.StatusCode, body, up.Credential)
			}
		}
		for _, r := range fake.Requests() {
			if strings.Contains(headerString(r.Header), keys.Prefix) {
				t.Fatalf("a ctxproxy key went upstream on %s", r.Path)
			}
		}
	})
	t.Run("the list shows the key without its secret", func(t *testing.T) {
		out := keysCLI(t, b.Addr, "ls", "--tenant", "vault")
		kid := keyIDOf(secret)
		if !strings.Contains(out, "KEY_ID") || !strings.Contains(out, id) || !strings.Contains(out, kid) || strings.Contains(out, secret) {
			t.Fatalf("ls:\n%s", out)
		}
	})
	t.Run("revoked on one replica: refused there at once and on the other within 5 s", func(t *testing.T) {
		keysCLI(t, a.Addr, "revoke", "--tenant", "vault", id)
		revoked := time.Now()
		if resp, body := call(t, a.Addr, "POST", "/v1/messages", e2eRoutes[0].body, "X-Api-Key", secret); resp.StatusCode != 401 ||
			!strings.Contains(body, "revoked") {
			t.Fatalf("on the revoking replica: %d %s", resp.StatusCode, body)
		}
		refusedAfter := pollUntilRefused(t, b.Addr, secret, "revoked", revoked)
		if refusedAfter > 5*time.Second {
			t.Fatalf("the other replica refused the key only %v after the revocation", refusedAfter)
		}
	})
	t.Run("an expired key is refused on both replicas, saying so", func(t *testing.T) {
		out := keysCLI(t, a.Addr, "create", "--tenant", "vault", "--name", "short", "--expires", "3s", "--json")
		short := gjson.Get(out, "key").Str
		expires := gjson.Get(out, "expires_at").Time()
		resp, body := call(t, b.Addr, "POST", "/v1/messages", e2eRoutes[0].body, "X-Api-Key", short)
		if time.Now().Before(expires) && resp.StatusCode != 200 {
			t.Fatalf("before its expiry: %d %s", resp.StatusCode, body)
		}
		for _, p := range []*binaries.Process{a, b} {
			pollUntilRefused(t, p.Addr, short, "expired", time.Now())
		}
	})
	t.Run("an unknown ctxproxy key is refused and goes nowhere", func(t *testing.T) {
		before := len(proxiedCalls(fake))
		resp, body := call(t, b.Addr, "POST", "/v1/messages", e2eRoutes[0].body, "X-Api-Key", keys.Prefix+"not-a-key")
		if resp.StatusCode != 401 || !strings.Contains(body, "unknown") || len(proxiedCalls(fake)) != before {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})
	t.Run("the ledger attributes calls to the key and its user", func(t *testing.T) {
		// The messages calls of the laptop key (plain and streamed) are ana's.
		var anas int
		eventually(t, "the calls reaching the ledger", func() {
			for anas < 2 {
				anas = 0
				for _, r := range ledgerRows(t, db) {
					if gjson.Get(r, "key_id").Str == keyIDOf(secret) {
						if gjson.Get(r, "user_name").Str != "ana" {
							t.Errorf("ledger row %s", r)
							return
						}
						anas++
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
		out, err := exec.Command(binary(t), "report", "--ledger", db.URL, "--group-by", "user").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "USER") || !strings.Contains(string(out), "ana") {
			t.Fatalf("report: %v\n%s", err, out)
		}
	})
	t.Run("no key is in a log line, a metric, the ledger or a reply", func(t *testing.T) {
		var where []string
		for _, p := range []*binaries.Process{a, b} {
			where = append(where, p.Log(), metricsText(t, p))
		}
		where = append(where, ledgerRows(t, db)...)
		where = append(where, replies...)
		for _, s := range where {
			for _, k := range []string{secret, e2eVaultKey} {
				if strings.Contains(s, k) {
					t.Fatalf("a key is in:\n%.3000s", s)
				}
			}
		}
	})
}

func keyIDOf(secret string) string {
	h := apikey.Hash(secret)
	return hex.EncodeToString(h[:4])
}

func headerString(h http.Header) string {
	var b strings.Builder
	for k, vv := range h {
		b.WriteString(k + ": " + strings.Join(vv, ", ") + "\n")
	}
	return b.String()
}

// pollUntilRefused sends requests with secret to addr until one is refused
// saying why, and returns how long after since that request was sent.
func pollUntilRefused(t *testing.T, addr, secret, why string, since time.Time) time.Duration {
	t.Helper()
	var after time.Duration
	eventually(t, "the key being refused", func() {
		for {
			sent := time.Now()
			resp, body := call(t, addr, "POST", "/v1/messages", e2eRoutes[0].body, "X-Api-Key", secret)
			if resp.StatusCode == 401 && strings.Contains(gjson.Get(body, "error.message").Str, why) {
				after = sent.Sub(since)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return after
}

// ledgerRows is every ledger row of the test's schema, as JSON.
func ledgerRows(t *testing.T, db *pgtest.DB) []string {
	t.Helper()
	rows, err := db.Admin.Query(context.Background(), `SELECT row_to_json(l)::text FROM `+db.Schema+`.ctxproxy_ledger l ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}
