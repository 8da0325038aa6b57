package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUpstreamKey(t *testing.T) {
	const envKey = "anthropic-key-from-env"
	t.Setenv("CTXPROXY_TEST_ACME_KEY", envKey+"\n")
	t.Run("api_key_env reads the variable at load, trimmed", func(t *testing.T) {
		p := mustParse(t, "tenant: acme\nupstream:\n  api_key_env: CTXPROXY_TEST_ACME_KEY\n")
		if k, ok := p.UpstreamKey(); !ok || k != envKey {
			t.Fatalf("UpstreamKey = %q, %v", k, ok)
		}
	})
	t.Run("a tenant without one has none", func(t *testing.T) {
		p := mustParse(t, "tenant: acme\n")
		if k, ok := p.UpstreamKey(); ok || k != "" {
			t.Fatalf("UpstreamKey = %q, %v", k, ok)
		}
		var nilPolicy *Policy
		if _, ok := nilPolicy.UpstreamKey(); ok {
			t.Fatal("a nil policy has a key")
		}
	})
	t.Run("api_key_file is read again on every load", func(t *testing.T) {
		dir := t.TempDir()
		write := func(name, s string) {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		write("acme.yaml", "tenant: acme\nupstream: {api_key_file: acme.key}\n")
		for _, key := range []string{"first-key", "second-key"} {
			write("acme.key", key+"\n")
			set, err := LoadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if k, _ := set.Tenant("acme").UpstreamKey(); k != key {
				t.Fatalf("UpstreamKey = %q, want %q", k, key)
			}
		}
	})
	t.Run("printing a policy never shows the key", func(t *testing.T) {
		p := mustParse(t, "tenant: acme\nupstream:\n  api_key_env: CTXPROXY_TEST_ACME_KEY\n")
		for _, s := range []string{fmt.Sprintf("%+v", *p), fmt.Sprintf("%#v", *p), fmt.Sprint(p.Upstream), p.Summary()} {
			if strings.Contains(s, envKey) {
				t.Fatalf("the key is in %q", s)
			}
		}
	})
}

func TestRedactKeys(t *testing.T) {
	for in, want := range map[string]string{
		"no key here":                       "no key here",
		`got "sk-ant-api03-AbC_d-9" at x`:   `got "sk-ant-…" at x`,
		"sk-ant-a sk-ant-b":                 "sk-ant-… sk-ant-…",
		"the prefix (sk-ant-…) stays as is": "the prefix (sk-ant-…) stays as is",
	} {
		if got := redactKeys(in); got != want {
			t.Errorf("redactKeys(%q) = %q, want %q", in, got, want)
		}
	}
}
