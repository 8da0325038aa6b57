// Package compat_test proves the official Go SDK works through ctxproxy with
// nothing changed but the base URL and the key: every call goes SDK →
// ctxproxy → fake upstream, all on 127.0.0.1 ephemeral ports.
package compat_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"go.uber.org/zap/zaptest"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/stack"
)

// Tenant keys. The SDK sends them as it sends a real key; ctxproxy finds the
// tenant by the key's sha256 and forwards the key unchanged.
const (
	keyAgent  = "sk-ant-compat-go-agent"  // memory proxy, edits enforced
	keyInject = "sk-ant-compat-go-inject" // memory inject
	vaultKey  = "sk-ant-compat-go-vault"  // tenant vault's own key, held by ctxproxy
	// keyUnthread is agent's policy with context_management.threads left at
	// its default, unthread_edits (agent says threads: pass).
	keyUnthread = "sk-ant-compat-go-unthread"
)

// policies: agent runs memory in the proxy and clears old tool uses as soon
// as there are more than two (so a short test conversation shows
// applied_edits); inject only adds the memory tool.
func policies() map[string]string {
	return map[string]string{
		"default.yaml": stack.DefaultPolicy,
		"agent.yaml": stack.TenantPolicy("agent", keyAgent, `context_management:
  mode: enforce
  threads: pass
  clear_thinking:
    keep: all
  clear_tool_uses:
    trigger: { type: tool_uses, value: 2 }
    keep: { type: tool_uses, value: 1 }
memory:
  mode: proxy
  max_iterations: 6
`),
		"unthread.yaml": stack.TenantPolicy("unthread", keyUnthread, `context_management:
  mode: enforce
  clear_thinking:
    keep: all
  clear_tool_uses:
    trigger: { type: tool_uses, value: 2 }
    keep: { type: tool_uses, value: 1 }
memory:
  mode: proxy
  max_iterations: 6
`),
		"inject.yaml": stack.TenantPolicy("inject", keyInject, `context_management:
  mode: default
memory:
  mode: inject
`),
		// vault: ctxproxy holds its Anthropic key (a mounted secret file); its
		// clients use ctxproxy keys.
		"vault.yaml": "tenant: vault\nmemory:\n  mode: proxy\nupstream:\n  api_key_file: vault.key\n",
		"vault.key":  vaultKey + "\n",
	}
}

type env struct {
	fake     *fakeapi.API
	proxyURL string
	memDir   string
	keys     *keys.Keyring // mints ctxproxy keys
}

// start runs a fake upstream and ctxproxy in front of it; both stop when the
// test ends.
func start(t *testing.T, opts ...fakeapi.Option) *env {
	t.Helper()
	s, err := stack.Start(stack.Config{Dir: t.TempDir(), Policies: policies(), Fake: fakeapi.New(opts...), Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return &env{fake: s.Fake, proxyURL: s.ProxyURL, memDir: s.MemoryDir, keys: s.Keys}
}

// client is the official SDK pointed at ctxproxy, built exactly as the
// README's Go snippet says (the lines between the README markers).
// calls is what the fake saw but the reads of its models list that ctxproxy
// makes on its own (at start, every ten minutes, and once for a pass-through
// tenant whose credential the API took).
func (e *env) calls() []fakeapi.Request {
	var out []fakeapi.Request
	for _, r := range e.fake.Requests() {
		if !strings.HasPrefix(r.Path, "/v1/models") {
			out = append(out, r)
		}
	}
	return out
}

func (e *env) client(apiKey string) anthropic.Client {
	baseURL := e.proxyURL
	// README:go-begin
	client := anthropic.NewClient(
		option.WithBaseURL(baseURL), // ctxproxy, e.g. "http://localhost:8080"
		option.WithAPIKey(apiKey),   // your Anthropic key, unchanged; ctxproxy picks the tenant by its sha256
	)
	// README:go-end
	return client
}

// memFile reads one of a tenant's memory files from ctxproxy's store on disk.
func (e *env) memFile(tenant, rel string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(e.memDir, tenant, filepath.FromSlash(rel)))
	return string(b), err == nil
}
