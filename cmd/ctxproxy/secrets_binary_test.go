package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/internal/stack"
)

// emptyKeyHash is sha256 of nothing: what `printf %s "$ANTHROPIC_API_KEY" | sha256sum` prints
// when the variable is unset.
const emptyKeyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// vaultPolicies is a policies folder with tenant vault, which holds its own Anthropic key (from
// CTXPROXY_E2E_VAULT_KEY) and lists the hash of vaultClientKey; extra is added to its policy.
func vaultPolicies(t *testing.T, extra string) string {
	t.Helper()
	dir, _, err := stack.Layout(t.TempDir(), map[string]string{
		"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
		"vault.yaml":   vaultPolicy(extra),
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

const vaultClientKey = "sk-ant-vault-client"

func vaultPolicy(extra string, keyHashes ...string) string {
	keyHashes = append([]string{stack.KeyHash(vaultClientKey)}, keyHashes...)
	return "tenant: vault\napi_keys_sha256: [" + strings.Join(keyHashes, ", ") + "]\n" +
		"memory:\n  mode: off\nupstream:\n  api_key_env: CTXPROXY_E2E_VAULT_KEY\n" + extra
}

// startSecretProxy runs the binary with the tenant's key and the admin token in its environment
// (as the README advises: never on the command line).
func startSecretProxy(t *testing.T, args ...string) *binaries.Process {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "CTXPROXY_LOG_LEVEL=debug", "CTXPROXY_E2E_VAULT_KEY="+e2eVaultKey,
		"CTXPROXY_ADMIN_TOKEN="+e2eAdminToken)
	p, err := binaries.Start(context.Background(), cmd, "ctxproxy listening", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

// The sha256 of an empty key in api_keys_sha256 would hand the tenant's own Anthropic key to every
// client that sends no key at all: the loader refuses it, at start, in validate and on reload.
func TestBinaryRefusesTheHashOfAnEmptyKey(t *testing.T) {
	bad := vaultPolicy("", emptyKeyHash)
	const why = "api_keys_sha256[1] is the sha256 of nothing"
	t.Run("validate names the file, the line and why", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "vault.yaml"), []byte(bad), 0o644)
		cmd := exec.Command(binary(t), "validate", "--policies", dir)
		cmd.Env = append(os.Environ(), "CTXPROXY_E2E_VAULT_KEY="+e2eVaultKey)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "vault.yaml:") ||
			!strings.Contains(string(out), why) || !strings.Contains(string(out), "unset") {
			t.Fatalf("validate: %v\n%s", err, out)
		}
	})
	t.Run("serve does not start with it", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "vault.yaml"), []byte(bad), 0o644)
		cmd := exec.Command(binary(t), "--listen", "127.0.0.1:0", "--policies", dir, "--upstream", "http://127.0.0.1:1",
			"--memory-dir", filepath.Join(t.TempDir(), "mem"), "--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
		cmd.Env = append(os.Environ(), "CTXPROXY_E2E_VAULT_KEY="+e2eVaultKey)
		p, err := binaries.Start(context.Background(), cmd, "ctxproxy listening", nil)
		if err == nil {
			p.Kill()
			t.Fatal("ctxproxy started with the empty key's hash in a policy")
		}
		if !strings.Contains(err.Error(), why) {
			t.Fatalf("serve: %v", err)
		}
	})
	t.Run("a reload that adds it is refused, and a client without a key never gets the tenant's", func(t *testing.T) {
		fake, upURL := fakeUpstream(t)
		pols := vaultPolicies(t, "")
		p := startSecretProxy(t, "--upstream", upURL, "--policies", pols, "--memory-dir", filepath.Join(t.TempDir(), "mem"),
			"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
		os.WriteFile(filepath.Join(pols, "vault.yaml"), []byte(bad), 0o644)
		p.Signal(syscall.SIGHUP)
		eventually(t, "the reload", func() {
			for !strings.Contains(p.Log(), "policy reload refused") && !strings.Contains(p.Log(), "policies reloaded") {
				time.Sleep(20 * time.Millisecond)
			}
		})
		if !strings.Contains(p.Log(), why) {
			t.Fatalf("the reload was not refused for the empty key's hash:\n%s", p.Log())
		}
		for _, rt := range e2eRoutes {
			call(t, p.Addr, rt.method, rt.path, rt.body) // no credential at all
			if up, ok := fake.LastRequest(rt.path); ok && up.Credential != "" {
				t.Fatalf("%s: a request without a key went upstream with credential %q", rt.name, up.Credential)
			}
		}
	})
}
