package policy

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxproxy/ctxproxy/internal/apikey"
)

func TestTheDefaultTenantKeepsMemoryPerKey(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"default.yaml": "tenant: default\nmemory: {mode: proxy}\n",
		"acme.yaml":    "tenant: acme\napi_keys_sha256: [\"" + hexKey("k") + "\"]\nmemory: {mode: proxy}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	def, acme := set.Default(), set.Tenant("acme")
	t.Run("each key of the default tenant has its own store", func(t *testing.T) {
		a, okA := def.MemoryStore(apikey.IDOf("sk-ant-alice"))
		b, okB := def.MemoryStore(apikey.IDOf("sk-ant-bob"))
		if !okA || !okB || a == b || a != "default~"+apikey.IDOf("sk-ant-alice") {
			t.Errorf("stores %q %v, %q %v", a, okA, b, okB)
		}
	})
	t.Run("a request of the default tenant without a key has no store", func(t *testing.T) {
		for _, id := range []string{"", "0123", "0123ABCD", "../../x"} {
			if name, ok := def.MemoryStore(id); ok {
				t.Errorf("key id %q: store %q", id, name)
			}
		}
	})
	t.Run("another tenant's keys share its store", func(t *testing.T) {
		if name, ok := acme.MemoryStore(apikey.IDOf("k")); !ok || name != "acme" {
			t.Errorf("%q %v", name, ok)
		}
		if name, ok := acme.MemoryStore(""); !ok || name != "acme" {
			t.Errorf("no key: %q %v", name, ok)
		}
	})
	t.Run("a store name finds its tenant", func(t *testing.T) {
		for name, want := range map[string]*Policy{
			"default": def, "default~0123abcd": def, "acme": acme,
			"acme~0123abcd": nil, "default~0123ABCD": nil, "default~0123abc": nil, "default~": nil,
			"nobody": nil, "nobody~0123abcd": nil, "default~0123abcd~0123abcd": nil,
		} {
			if got := set.StoreOwner(name); got != want {
				t.Errorf("%q: %v, want %v", name, got, want)
			}
		}
	})
}

func hexKey(k string) string {
	h := apikey.Hash(k)
	return hex.EncodeToString(h[:])
}
