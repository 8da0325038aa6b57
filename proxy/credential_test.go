package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
)

const (
	vaultKey       = "sk-ant-api03-the-tenants-own-key" // the tenant's Anthropic key, held by the proxy
	keyVaultClient = "sk-ant-test-vault-client"         // a client key listed in the tenant's api_keys_sha256
)

// vaultPolicies add tenant vault, whose Anthropic key the proxy holds.
func vaultPolicies(t *testing.T) map[string]string {
	t.Setenv("CTXPROXY_TEST_VAULT_KEY", vaultKey)
	p := testPolicies()
	p["vault.yaml"] = `tenant: vault
api_keys_sha256: ["` + sha(keyVaultClient) + `"]
context_management:
  mode: enforce
  clear_tool_uses: {}
memory:
  mode: proxy
upstream:
  api_key_env: CTXPROXY_TEST_VAULT_KEY
`
	return p
}

// forwardedRoutes are a request on each kind of route the proxy forwards.
var forwardedRoutes = []struct {
	name, method, path, body string
}{
	{"messages", http.MethodPost, "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`},
	{"messages streamed", http.MethodPost, "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	{"count_tokens", http.MethodPost, "/v1/messages/count_tokens", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`},
	{"batches", http.MethodPost, "/v1/messages/batches", `{"requests":[{"custom_id":"a","params":{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}}]}`},
	{"models", http.MethodGet, "/v1/models", ``},
	{"any other route", http.MethodGet, "/v1/files", ``},
}

func (h *harness) send(method, path, body string, hdr ...string) (*http.Response, string) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.proxy.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp, readAll(h.t, resp.Body)
}

func TestATenantsOwnKeyReplacesTheClientsOnEveryRoute(t *testing.T) {
	h := newHarnessWith(t, nil, vaultPolicies(t))
	for _, rt := range forwardedRoutes {
		for _, auth := range [][]string{{"X-Api-Key", keyVaultClient}, {"Authorization", "Bearer " + keyVaultClient}, {"X-Admin-Token", keyVaultClient}} {
			t.Run(rt.name+" with "+auth[0], func(t *testing.T) {
				resp, body := h.send(rt.method, rt.path, rt.body, auth...)
				if resp.StatusCode != 200 {
					t.Fatalf("%d %s", resp.StatusCode, body)
				}
				up := h.lastUpstream(rt.path)
				if up.Credential != vaultKey || up.Header.Get("Authorization") != "" {
					t.Fatalf("upstream got credential %q, authorization %q", up.Credential, up.Header.Get("Authorization"))
				}
				for name, vv := range up.Header {
					if strings.Contains(strings.Join(vv, " "), keyVaultClient) {
						t.Fatalf("the client's key went upstream in %s", name)
					}
				}
			})
		}
	}
	t.Run("a tenant without a key of its own has the client's forwarded as it came", func(t *testing.T) {
		resp, body := h.send(http.MethodGet, "/v1/models", "", "X-Api-Key", keyAcme)
		if resp.StatusCode != 200 || h.lastUpstream("/v1/models").Credential != keyAcme {
			t.Fatalf("%d %s; upstream credential %q", resp.StatusCode, body, h.lastUpstream("/v1/models").Credential)
		}
	})
}

// An upstream that echoes the request's headers, in reply headers, error
// messages and bodies, cannot make the tenant's key reach the client.
func TestTheTenantsKeyNeverComesBack(t *testing.T) {
	h := newHarnessWith(t, nil, vaultPolicies(t))
	h.fake.SetOptions(fakeapi.Options{EchoHeaders: true})
	check := func(t *testing.T, resp *http.Response, body string) {
		t.Helper()
		if strings.Contains(body, vaultKey) {
			t.Fatalf("the tenant's key is in the body: %s", body)
		}
		for name, vv := range resp.Header {
			if strings.Contains(name+strings.Join(vv, " "), vaultKey) {
				t.Fatalf("the tenant's key is in header %s", name)
			}
		}
	}
	for _, rt := range forwardedRoutes {
		t.Run(rt.name, func(t *testing.T) {
			resp, body := h.send(rt.method, rt.path, rt.body, "X-Api-Key", keyVaultClient)
			check(t, resp, body)
			if resp.Header.Get(fakeapi.EchoHeaderPrefix+"X-Api-Key") != redactedKey {
				t.Fatalf("the echo header was not scrubbed but dropped or kept: %v", resp.Header)
			}
		})
	}
	t.Run("an upstream error quoting the request headers", func(t *testing.T) {
		h.fake.Enqueue(fakeapi.Reply{Status: 400, Error: &fakeapi.APIError{Type: "invalid_request_error", Message: "bad"}})
		resp, body := h.send(http.MethodPost, "/v1/messages", forwardedRoutes[0].body, "X-Api-Key", keyVaultClient)
		if resp.StatusCode != 400 || !strings.Contains(body, "X-Api-Key: "+redactedKey) {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		check(t, resp, body)
	})
	t.Run("a request the upstream rejects while validating", func(t *testing.T) {
		resp, body := h.send(http.MethodPost, "/v1/messages/batches", `not json`, "X-Api-Key", keyVaultClient)
		check(t, resp, body)
	})
	t.Run("nor does it reach a log line", func(t *testing.T) {
		for _, e := range h.logs.All() {
			for k, v := range e.ContextMap() {
				if s, _ := v.(string); strings.Contains(s, vaultKey) || strings.Contains(s, keyVaultClient) {
					t.Fatalf("log %q field %s holds a key", e.Message, k)
				}
			}
		}
	})
}

func TestRedactReader(t *testing.T) {
	const secret = "sk-ant-SECRET"
	for _, tc := range []struct{ name, in, want string }{
		{"no secret", "plain text", "plain text"},
		{"one", "a sk-ant-SECRET b", "a [redacted] b"},
		{"at the end", "x sk-ant-SECRET", "x [redacted]"},
		{"a prefix of it at the end stays", "x sk-ant-SEC", "x sk-ant-SEC"},
		{"two, back to back", "sk-ant-SECRETsk-ant-SECRET", "[redacted][redacted]"},
		{"a near miss", "sk-ant-SECRXsk-ant-SECRET", "sk-ant-SECRX[redacted]"},
	} {
		for _, split := range []bool{false, true} {
			name := tc.name
			var r io.Reader = strings.NewReader(tc.in)
			if split {
				name += ", one byte per read"
				r = iotest.OneByteReader(r)
			}
			t.Run(name, func(t *testing.T) {
				got, err := io.ReadAll(&redactReader{r: io.NopCloser(r), secret: []byte(secret)})
				if err != nil || string(got) != tc.want {
					t.Fatalf("got %q, %v; want %q", got, err, tc.want)
				}
			})
		}
	}
}

// A key file (a mounted secret) is read again on reload: after a rotation of
// the secret and a reload, the new key goes upstream.
func TestATenantKeyFileIsReadAgainOnReload(t *testing.T) {
	p := testPolicies()
	p["filed.yaml"] = "tenant: filed\napi_keys_sha256: [\"" + sha(keyVaultClient) + "\"]\nupstream:\n  api_key_file: filed.key\n"
	p["filed.key"] = "sk-ant-first-key\n"
	h := newHarnessWith(t, nil, p)
	for _, key := range []string{"sk-ant-first-key", "sk-ant-rotated-key"} {
		writePolicies(t, h.polDir, map[string]string{"filed.key": key + "\n"})
		if err := h.pols.Reload(); err != nil {
			t.Fatal(err)
		}
		resp, body := h.send(http.MethodGet, "/v1/models", "", "X-Api-Key", keyVaultClient)
		if got := h.lastUpstream("/v1/models").Credential; resp.StatusCode != 200 || got != key {
			t.Fatalf("%d %s; upstream credential %q, want %q", resp.StatusCode, body, got, key)
		}
	}
}
