package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/internal/apikey"
)

func loadScoped(t *testing.T, files map[string]string) (*Set, error) {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return LoadDir(dir)
}

const scopedAcme = `tenant: acme
memory:
  mode: proxy
  scopes:
    - {path: /memories/team, store: tenant, model_access: read}
    - {path: /memories, store: user, template: templates/new-user}
    - {path: /memories/mine/, store: key}
`

func TestMemoryScopes(t *testing.T) {
	set, err := loadScoped(t, map[string]string{
		"acme.yaml":                      scopedAcme,
		"plain.yaml":                     "tenant: plain\nmemory: {mode: proxy}\n",
		"default.yaml":                   "tenant: default\nmemory: {mode: proxy}\n",
		"templates/new-user/progress.md": "# progress\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	acme, plain, def := set.Tenant("acme"), set.Tenant("plain"), set.Default()
	t.Run("scopes are ordered longest mount first, mounts canonical", func(t *testing.T) {
		var got []string
		for _, s := range acme.MemoryScopes() {
			got = append(got, s.Mount)
		}
		if strings.Join(got, " ") != "/memories/team /memories/mine /memories" {
			t.Errorf("mounts %v", got)
		}
		if !acme.MemoryScopes()[0].ReadOnly || acme.MemoryScopes()[2].ReadOnly {
			t.Error("model_access read not kept")
		}
		if tp := acme.MemoryScopes()[2].Template; !filepath.IsAbs(tp) || filepath.Base(tp) != "new-user" {
			t.Errorf("template %q", tp)
		}
	})
	t.Run("without scopes: one scope at /memories, the tenant's store or each key's in the default tenant", func(t *testing.T) {
		if s := plain.MemoryScopes(); len(s) != 1 || s[0].Mount != "/memories" || s[0].Store != ScopeTenant || plain.Scoped() {
			t.Errorf("plain %+v", s)
		}
		if s := def.MemoryScopes(); len(s) != 1 || s[0].Store != ScopeKey {
			t.Errorf("default %+v", s)
		}
	})
	key := apikey.IDOf("sk-ctx-alice")
	t.Run("stores are chosen by tenant, by the key's user else its key id, by key", func(t *testing.T) {
		sc := acme.MemoryScopes()
		if n, ok := acme.ScopeStoreName(&sc[0], key, "alice"); !ok || n != "acme" {
			t.Errorf("tenant: %q", n)
		}
		alice, _ := acme.ScopeStoreName(&sc[2], key, "alice")
		bob, _ := acme.ScopeStoreName(&sc[2], key, "bob")
		if alice == bob || alice != UserStore("acme", "alice") || !strings.HasPrefix(alice, "acme~u-") {
			t.Errorf("users %q %q", alice, bob)
		}
		if n, ok := acme.ScopeStoreName(&sc[2], key, ""); !ok || n != "acme~"+key {
			t.Errorf("user without a ctxproxy user: %q", n)
		}
		if n, ok := acme.ScopeStoreName(&sc[1], key, "alice"); !ok || n != "acme~"+key {
			t.Errorf("key: %q", n)
		}
		if n, ok := acme.ScopeStoreName(&sc[1], "", "alice"); ok {
			t.Errorf("key scope without a key: %q", n)
		}
	})
	t.Run("a user's and a key's store name their tenant; other tenants own none", func(t *testing.T) {
		for name, want := range map[string]*Policy{
			UserStore("acme", "alice"): acme, "acme~" + key: acme,
			UserStore("plain", "alice"): nil, "plain~" + key: nil,
			UserStore("default", "x"): nil, "default~" + key: def,
			"acme~u-0123": nil, "acme~u-0123456789ABCDEF": nil,
		} {
			if got := set.StoreOwner(name); got != want {
				t.Errorf("%q: %v, want %v", name, got, want)
			}
		}
	})
}

func TestMemoryScopeTemplateCannotEscapeThePoliciesFolder(t *testing.T) {
	outside := t.TempDir()
	dir := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	body := "tenant: acme\nmemory:\n  mode: proxy\n  scopes:\n    - {path: /memories, store: user, template: link}\n"
	if err := os.WriteFile(filepath.Join(dir, "acme.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadDir(dir)
	if err == nil || !strings.Contains(err.Error(), "acme.yaml:5: memory.scopes[0].template \"link\" escapes the policies folder") {
		t.Errorf("err %v", err)
	}
}
