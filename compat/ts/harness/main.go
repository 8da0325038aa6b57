// Command harness serves the TypeScript compat suite: a fake upstream
// (internal/fakeapi, scripted over its /_fake/ control endpoints) and a real
// ctxproxy in front of it, both on 127.0.0.1 ephemeral ports, with temporary
// tenant policies and memory folder. It prints one JSON line with the URLs,
// folders and tenant keys, then runs until its standard input closes (the
// node test that spawned it ended or died) or it gets SIGINT/SIGTERM, and
// removes its folders.
//
// With CTXPROXY_BIN and FAKEAPI_BIN set (paths of the built cmd/ctxproxy and
// cmd/fakeapi) it runs those binaries, as a user would, instead of serving
// both in process; "mode" in the JSON line says which.
//
//	go run ./compat/ts/harness
//	{"mode":"in-process","proxy":"http://127.0.0.1:41231","fake":"http://127.0.0.1:35511","memory_dir":"/tmp/...","keys":{"agent":"...","inject":"..."}}
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	ctxkeys "github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/stack"
)

// Tenant keys the node tests use (not real keys; the fake accepts any).
var keys = map[string]string{
	"agent":  "sk-ant-compat-ts-agent",  // memory proxy, context editing enforced
	"inject": "sk-ant-compat-ts-inject", // memory inject: the client runs memory
	// agent's policy with context_management.threads at its default, unthread_edits
	"unthread": "sk-ant-compat-ts-unthread",
	// cacheAsks clears old tool uses and asks the API's cache diagnosis (the default when a
	// policy clears); cacheQuiet clears the same and does not ask (cache_diagnostics: false).
	"cacheAsks":  "sk-ant-compat-ts-cache-asks",
	"cacheQuiet": "sk-ant-compat-ts-cache-quiet",
}

// cacheClearing is the cache tenants' context management: old tool uses cleared once there
// are more than two.
const cacheClearing = `context_management:
  clear_tool_uses:
    trigger: { type: tool_uses, value: 2 }
    keep: { type: tool_uses, value: 1 }
`

// The agent tenant clears old tool uses once there are more than two, so a
// short test conversation shows applied_edits.
func policies() map[string]string {
	return map[string]string{
		"default.yaml": stack.DefaultPolicy,
		"agent.yaml": stack.TenantPolicy("agent", keys["agent"], `operator_tokens_sha256: ["`+stack.KeyHash(operatorToken)+`"]
context_management:
  mode: enforce
  threads: pass
  clear_thinking:
    keep: all
  clear_tool_uses:
    trigger: { type: tool_uses, value: 2 }
    keep: { type: tool_uses, value: 1 }
memory:
  mode: proxy
  max_iterations: 8
`),
		"unthread.yaml": stack.TenantPolicy("unthread", keys["unthread"], `context_management:
  mode: enforce
  clear_thinking:
    keep: all
  clear_tool_uses:
    trigger: { type: tool_uses, value: 2 }
    keep: { type: tool_uses, value: 1 }
memory:
  mode: proxy
  max_iterations: 8
`),
		"cache-asks.yaml":  stack.TenantPolicy("cache-asks", keys["cacheAsks"], cacheClearing),
		"cache-quiet.yaml": stack.TenantPolicy("cache-quiet", keys["cacheQuiet"], cacheClearing+"accounting:\n  cache_diagnostics: false\n"),
		"inject.yaml": stack.TenantPolicy("inject", keys["inject"], `context_management:
  mode: default
  threads: pass
  clear_tool_uses:
    trigger: { type: tool_uses, value: 2 }
    keep: { type: tool_uses, value: 1 }
memory:
  mode: inject
`),
		// vault: ctxproxy holds its Anthropic key (a mounted secret file); its
		// clients get ctxproxy keys (keys["vault"], minted at start).
		// Its memory is scoped: a shared read-only team folder, the rest each
		// user's own; vaultOperatorToken is its operators'.
		"vault.yaml": `tenant: vault
operator_tokens_sha256: ["` + stack.KeyHash(vaultOperatorToken) + `"]
memory:
  mode: proxy
  scopes:
    - {path: /memories/team, store: tenant, model_access: read}
    - {path: /memories, store: user}
upstream:
  api_key_file: vault.key
`,
		"vault.key": vaultUpstreamKey + "\n",
	}
}

// operatorToken is tenant agent's memory operator token
// (operator_tokens_sha256): the SDK's memoryStores client uses it as apiKey.
const operatorToken = "ctxproxy-compat-ts-agent-operator"

// vaultOperatorToken is tenant vault's memory operator token.
const vaultOperatorToken = "ctxproxy-compat-ts-vault-operator"

// vaultUpstreamKey is tenant vault's own key: what the fake must see for
// every request made with the vault's ctxproxy key.
const vaultUpstreamKey = "sk-ant-compat-ts-vault"

// withKeys is keys plus the vault's minted ctxproxy key.
func withKeys(vault string) map[string]string {
	out := map[string]string{"vault": vault}
	for k, v := range keys {
		out[k] = v
	}
	return out
}

type ready struct {
	Mode      string            `json:"mode"`
	Proxy     string            `json:"proxy"`
	Fake      string            `json:"fake"`
	MemoryDir string            `json:"memory_dir"`
	Policies  string            `json:"policies_dir"`
	Keys      map[string]string `json:"keys"`
	// VaultUpstreamKey is the key upstream gets for keys["vault"].
	VaultUpstreamKey string `json:"vault_upstream_key"`
	// OperatorToken is tenant agent's memory operator token.
	OperatorToken string `json:"operator_token"`
	// VaultOperatorToken is tenant vault's.
	VaultOperatorToken string `json:"vault_operator_token"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root, err := os.MkdirTemp("", "ctxproxy-compat-ts-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)

	if bin, fbin := os.Getenv("CTXPROXY_BIN"), os.Getenv("FAKEAPI_BIN"); bin != "" || fbin != "" {
		if bin == "" || fbin == "" {
			return errors.New("set both CTXPROXY_BIN and FAKEAPI_BIN, or neither")
		}
		info := ready{Mode: "binaries", VaultUpstreamKey: vaultUpstreamKey, OperatorToken: operatorToken, VaultOperatorToken: vaultOperatorToken}
		if info.Policies, info.MemoryDir, err = stack.Layout(root, policies()); err != nil {
			return err
		}
		stopAll, err := runBinaries(ctx, &info, bin, fbin, root)
		if err != nil {
			return err
		}
		defer stopAll()
		return serveUntilDone(ctx, info)
	}

	log := zap.NewNop()
	if os.Getenv("HARNESS_DEBUG") != "" {
		log, _ = zap.NewDevelopment()
	}
	s, err := stack.Start(stack.Config{Dir: root, Policies: policies(), Log: log})
	if err != nil {
		return err
	}
	defer s.Close()
	_, vault, err := s.Keys.Create(ctx, ctxkeys.Spec{Tenant: "vault", Name: "compat-ts", User: "node"})
	if err != nil {
		return err
	}
	return serveUntilDone(ctx, ready{Mode: "in-process", Proxy: s.ProxyURL, Fake: s.FakeURL, MemoryDir: s.MemoryDir, Policies: s.PoliciesDir,
		Keys: withKeys(vault), VaultUpstreamKey: vaultUpstreamKey, OperatorToken: operatorToken, VaultOperatorToken: vaultOperatorToken})
}

// serveUntilDone announces info and waits for the parent to close our stdin
// (or die), or for a signal.
func serveUntilDone(ctx context.Context, info ready) error {
	line, _ := json.Marshal(info)
	fmt.Println(string(line))

	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	select {
	case <-ctx.Done():
	case <-stdinClosed:
	}
	return nil
}
