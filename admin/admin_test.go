package admin

import (
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/keys"
)

const adminToken = "admin-secret-token"

// operatorToken is acme's operator token, as a policy would list it.
const operatorToken = "acme-operator-token"

func newAPI(t *testing.T, auth Auth) (*httptest.Server, *keys.Keyring) {
	t.Helper()
	store, err := keys.OpenFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ring := keys.NewKeyring(store)
	report := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"tenant":"` + r.URL.Query().Get("tenant") + `"}`))
	})
	srv := httptest.NewServer(New(Config{Auth: auth, Keys: ring, Report: report,
		Tenant: func(name string) (bool, bool) {
			return name == "acme" || name == "plain" || name == "beta", name != "plain"
		}}))
	t.Cleanup(srv.Close)
	return srv, ring
}

func call(t *testing.T, srv *httptest.Server, token, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestKeyAPI(t *testing.T) {
	auth := Auth{AdminToken: adminToken, Operator: func(h [32]byte) (Principal, bool) {
		return Principal{Tenant: "acme", Name: "acme-ops"}, h == sha256.Sum256([]byte(operatorToken))
	}}
	srv, ring := newAPI(t, auth)
	var created KeyJSON
	t.Run("create answers 201 with the key, once", func(t *testing.T) {
		st, b := call(t, srv, adminToken, "POST", "/admin/keys", `{"tenant":"acme","name":"laptop","user":"ana","expires_at":"2099-01-01T00:00:00Z"}`)
		if st != 201 {
			t.Fatalf("%d %s", st, b)
		}
		if err := json.Unmarshal([]byte(b), &created); err != nil {
			t.Fatal(err)
		}
		k, err := ring.Verify(t.Context(), created.Key)
		if err != nil || k.ID != created.ID || created.Tenant != "acme" || created.User != "ana" || created.ExpiresAt == nil ||
			!strings.HasPrefix(created.Key, keys.Prefix) || created.KeyID != k.KeyID() {
			t.Fatalf("created %+v; verify %v", created, err)
		}
	})
	t.Run("list shows every field but the key", func(t *testing.T) {
		st, b := call(t, srv, adminToken, "GET", "/admin/keys?tenant=acme", "")
		if st != 200 || strings.Contains(b, created.Key) || gjson.Get(b, "data.#").Int() != 1 ||
			gjson.Get(b, "data.0.key_id").Str != created.KeyID || !gjson.Get(b, "data.0.last_used_at").Exists() ||
			gjson.Get(b, "data.0.revoked_at").Type != gjson.Null {
			t.Fatalf("%d %s", st, b)
		}
	})
	t.Run("rotate with a grace keeps the old key working", func(t *testing.T) {
		st, b := call(t, srv, adminToken, "POST", "/admin/keys/"+created.ID+"/rotate", `{"grace":"1h"}`)
		if st != 201 || gjson.Get(b, "name").Str != "laptop" || gjson.Get(b, "user").Str != "ana" || gjson.Get(b, "id").Str == created.ID {
			t.Fatalf("%d %s", st, b)
		}
		if _, err := ring.Verify(t.Context(), created.Key); err != nil {
			t.Fatalf("old key: %v", err)
		}
		if _, err := ring.Verify(t.Context(), gjson.Get(b, "key").Str); err != nil {
			t.Fatalf("new key: %v", err)
		}
	})
	t.Run("revoke takes effect at once", func(t *testing.T) {
		st, b := call(t, srv, adminToken, "POST", "/admin/keys/"+created.ID+"/revoke", "")
		if st != 200 || gjson.Get(b, "revoked_at").Type == gjson.Null || gjson.Get(b, "key").Exists() {
			t.Fatalf("%d %s", st, b)
		}
		if _, err := ring.Verify(t.Context(), created.Key); err != keys.ErrRevoked {
			t.Fatalf("verify: %v", err)
		}
	})
	for _, tc := range []struct {
		name, token, method, path, body string
		status                          int
		typ                             string
	}{
		{"no token: 401", "", "GET", "/admin/keys?tenant=acme", "", 401, "authentication_error"},
		{"a wrong token: 401", "nope", "GET", "/admin/keys?tenant=acme", "", 401, "authentication_error"},
		{"no tenant: 400", adminToken, "POST", "/admin/keys", `{"name":"x"}`, 400, "invalid_request_error"},
		{"no name: 400", adminToken, "POST", "/admin/keys", `{"tenant":"acme"}`, 400, "invalid_request_error"},
		{"an unknown field: 400", adminToken, "POST", "/admin/keys", `{"tenant":"acme","name":"x","role":"admin"}`, 400, "invalid_request_error"},
		{"an unknown tenant: 400", adminToken, "POST", "/admin/keys", `{"tenant":"nobody","name":"x"}`, 400, "invalid_request_error"},
		{"a tenant that holds no Anthropic key: 400", adminToken, "POST", "/admin/keys", `{"tenant":"plain","name":"x"}`, 400, "invalid_request_error"},
		{"a bad expires_at: 400", adminToken, "POST", "/admin/keys", `{"tenant":"acme","name":"x","expires_at":"tomorrow"}`, 400, "invalid_request_error"},
		{"a past expires_at: 400", adminToken, "POST", "/admin/keys", `{"tenant":"acme","name":"x","expires_at":"2001-01-01T00:00:00Z"}`, 400, "invalid_request_error"},
		{"a bad grace: 400", adminToken, "POST", "/admin/keys/" + "key_x/rotate", `{"grace":"soon"}`, 400, "invalid_request_error"},
		{"an unknown id: 404", adminToken, "POST", "/admin/keys/key_nope/revoke", "", 404, "not_found_error"},
		{"rotating a revoked key: 409", adminToken, "POST", "/admin/keys/" + "REVOKED/rotate", "", 409, "invalid_request_error"},
		{"an id of another tenant than ?tenant says: 404", adminToken, "POST", "/admin/keys/" + "REVOKED/revoke?tenant=beta", "", 404, "not_found_error"},
		{"an unknown route: 404", adminToken, "GET", "/admin/nothing", "", 404, "not_found_error"},
		{"a tenant's operator cannot mint for another tenant: 403", operatorToken, "POST", "/admin/keys", `{"tenant":"beta","name":"x"}`, 403, "permission_error"},
		{"nor list another tenant's keys: 403", operatorToken, "GET", "/admin/keys?tenant=beta", "", 403, "permission_error"},
		{"nor read another tenant's report: 403", operatorToken, "GET", "/admin/report?tenant=beta", "", 403, "permission_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := strings.ReplaceAll(tc.path, "REVOKED", created.ID)
			st, b := call(t, srv, tc.token, tc.method, path, tc.body)
			if st != tc.status || gjson.Get(b, "type").Str != "error" || gjson.Get(b, "error.type").Str != tc.typ {
				t.Fatalf("%d %s", st, b)
			}
		})
	}
	t.Run("a tenant's operator manages its own keys and reads its own report", func(t *testing.T) {
		if st, b := call(t, srv, operatorToken, "POST", "/admin/keys", `{"tenant":"acme","name":"ci"}`); st != 201 {
			t.Fatalf("%d %s", st, b)
		}
		if st, b := call(t, srv, operatorToken, "GET", "/admin/keys", ""); st != 200 || gjson.Get(b, "data.#").Int() != 3 {
			t.Fatalf("%d %s", st, b)
		}
		if st, b := call(t, srv, operatorToken, "GET", "/admin/report", ""); st != 200 || gjson.Get(b, "tenant").Str != "acme" {
			t.Fatalf("%d %s", st, b)
		}
	})
	for name, auth := range map[string]Auth{
		"without any token the API is disabled: 404":             {},
		"with an operator lookup but no operator token yet, too": {Operator: auth.Operator, HasOperators: func() bool { return false }},
	} {
		t.Run(name, func(t *testing.T) {
			off, _ := newAPI(t, auth)
			if st, b := call(t, off, operatorToken, "GET", "/admin/keys?tenant=acme", ""); st != 404 || gjson.Get(b, "error.type").Str != "not_found_error" {
				t.Fatalf("%d %s", st, b)
			}
		})
	}
}
