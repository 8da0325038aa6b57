package proxy

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// ctxproxy keys (sk-ctx-…): a live one is its tenant and has the tenant's
// key sent upstream; any other is refused with 401 saying why, nothing goes
// upstream, and it never falls through to the default tenant.
func TestCtxproxyKeys(t *testing.T) {
	ctx := context.Background()
	store, err := keys.OpenFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ring := keys.NewKeyring(store)
	prices, err := tokens.LoadPrices("../tokens/builtin_prices.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := tokens.OpenLedger(ctx, "file:"+filepath.Join(t.TempDir(), "ledger.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close()
	rec := tokens.NewRecorder(prices, nil, ledger, nil)
	h := newHarnessWith(t, nil, vaultPolicies(t), func(c *Config) { c.Keys = ring; c.Recorder = rec })
	live, liveSecret, _ := ring.Create(ctx, keys.Spec{Tenant: "vault", Name: "laptop", User: "ana"})
	_, revokedSecret, _ := ring.Create(ctx, keys.Spec{Tenant: "vault", Name: "old"})
	revoked, _ := ring.List(ctx, "vault")
	if _, err := ring.Revoke(ctx, revoked[1].ID); err != nil {
		t.Fatal(err)
	}
	_, expiringSecret, _ := ring.Create(ctx, keys.Spec{Tenant: "vault", Name: "short", ExpiresAt: time.Now().Add(-time.Second)})
	_, orphanSecret, _ := ring.Create(ctx, keys.Spec{Tenant: "acme", Name: "acme has no key of its own"})
	body := forwardedRoutes[0].body

	t.Run("a live key is its tenant; the tenant's key goes upstream", func(t *testing.T) {
		for _, auth := range [][]string{{"X-Api-Key", liveSecret}, {"Authorization", "Bearer " + liveSecret}} {
			resp, b := h.send(http.MethodPost, "/v1/messages", body, auth...)
			up := h.lastUpstream("/v1/messages")
			if resp.StatusCode != 200 || up.Credential != vaultKey || strings.Contains(up.Header.Get("Authorization"), "sk-ctx-") {
				t.Fatalf("%d %s; upstream credential %q", resp.StatusCode, b, up.Credential)
			}
		}
	})
	for _, tc := range []struct{ name, secret, says string }{
		{"a revoked key", revokedSecret, "revoked"},
		{"an expired key", expiringSecret, "expired"},
		{"an unknown key", "sk-ctx-" + strings.Repeat("x", 44), "unknown"},
		{"a key of a tenant that holds no Anthropic key", orphanSecret, "holds no Anthropic key"},
	} {
		t.Run(tc.name+" gets 401 saying so, and nothing goes upstream", func(t *testing.T) {
			for _, rt := range forwardedRoutes {
				before := len(h.fake.Requests())
				resp, b := h.send(rt.method, rt.path, rt.body, "X-Api-Key", tc.secret)
				if resp.StatusCode != 401 || gjson.Get(b, "error.type").Str != "authentication_error" ||
					!strings.Contains(gjson.Get(b, "error.message").Str, tc.says) || strings.Contains(b, "vault") {
					t.Fatalf("%s: %d %s", rt.name, resp.StatusCode, b)
				}
				if n := len(h.fake.Requests()); n != before {
					t.Fatalf("%s: the upstream saw %d requests", rt.name, n-before)
				}
			}
		})
	}
	t.Run("the ledger carries the key id and the user", func(t *testing.T) {
		if err := rec.Close(ctx); err != nil {
			t.Fatal(err)
		}
		calls, err := ledger.Query(ctx, tokens.Filter{})
		if err != nil || len(calls) == 0 {
			t.Fatalf("ledger: %d calls, %v", len(calls), err)
		}
		for _, c := range calls {
			if c.KeyID != live.KeyID() || c.User != "ana" || c.Tenant != "vault" {
				t.Fatalf("ledger call %+v", c)
			}
		}
	})
	t.Run("no log line holds a key", func(t *testing.T) {
		for _, e := range h.logs.All() {
			for k, v := range e.ContextMap() {
				if s, _ := v.(string); strings.Contains(s, "sk-ctx-") || strings.Contains(s, vaultKey) {
					t.Fatalf("log %q field %s holds a key", e.Message, k)
				}
			}
		}
	})
}

// brokenKeys is a key store that cannot answer.
type brokenKeys struct{}

func (brokenKeys) Verify(context.Context, string) (keys.Key, error) {
	return keys.Key{}, errors.New("dial tcp 127.0.0.1:5432: connection refused")
}

// With the key store down, a ctxproxy key cannot be checked: 503, nothing
// upstream, and the default tenant does not step in.
func TestCtxproxyKeysWithTheKeyStoreDown(t *testing.T) {
	h := newHarnessWith(t, nil, vaultPolicies(t), func(c *Config) { c.Keys = brokenKeys{} })
	resp, body := h.send(http.MethodPost, "/v1/messages", forwardedRoutes[0].body, "X-Api-Key", "sk-ctx-"+strings.Repeat("a", 44))
	if resp.StatusCode != 503 || gjson.Get(body, "error.type").Str != "api_error" || strings.Contains(body, "5432") || len(h.fake.Requests()) != 0 {
		t.Fatalf("%d %s; upstream saw %d", resp.StatusCode, body, len(h.fake.Requests()))
	}
}
