// Package stack runs the fake upstream (internal/fakeapi) and a ctxproxy in
// front of it, both in process on 127.0.0.1 ephemeral ports, with the given
// policy files and a file memory store: the set-up the compat suites and
// `ctxproxy demo` share. The ctxproxy is built as `ctxproxy serve` builds it
// (package server: limits, metrics, tracing, admin and console included),
// so the suites test the production wiring. It imports packages above
// internal/, so it is not under internal/: nothing there imports upward.
package stack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/proxy"
	"github.com/ctxproxy/ctxproxy/server"
)

// DefaultPolicy is default.yaml with everything off, for clients that match
// no tenant.
const DefaultPolicy = "tenant: default\ncontext_management:\n  mode: off\nmemory:\n  mode: off\n"

// ListPrices is a prices file with the list prices (USD per million tokens,
// as in the built-in table, tokens/builtin_prices.yaml) of the model the scripted sessions use.
const ListPrices = `models:
  - prefix: claude-sonnet-4-5
    input: 3
    output: 15
    cache_write: 3.75
    cache_read: 0.30
  - prefix: claude-sonnet-4-6
    input: 3
    output: 15
    cache_write: 3.75
    cache_read: 0.30
`

// KeyHash is the sha256 hex of an API key, as api_keys_sha256 lists it.
func KeyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// TenantPolicy is the policy file of tenant, matched by key; body is the
// rest of the YAML (context_management, memory, ...).
func TenantPolicy(tenant, key, body string) string {
	return "tenant: " + tenant + "\napi_keys_sha256: [\"" + KeyHash(key) + "\"]\n" + body
}

// Layout makes dir hold policies/ with the given files (name → content) and
// an empty memories/, the folders the in-process stack and the ctxproxy
// binary are given.
func Layout(dir string, policies map[string]string) (policiesDir, memoryDir string, err error) {
	policiesDir, memoryDir = filepath.Join(dir, "policies"), filepath.Join(dir, "memories")
	for _, d := range []string{policiesDir, memoryDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", "", err
		}
	}
	for name, body := range policies {
		if err := os.WriteFile(filepath.Join(policiesDir, name), []byte(body), 0o644); err != nil {
			return "", "", fmt.Errorf("write policy %s: %w", name, err)
		}
	}
	return policiesDir, memoryDir, nil
}

// Config says what to run.
type Config struct {
	Dir      string            // gets policies/ and memories/ (see Layout)
	Policies map[string]string // policy files, name → content
	Fake     *fakeapi.API      // nil: fakeapi.New logging to Log, named "fake"
	Log      *zap.Logger       // nil: no logs
	// Prices is a prices file laid over the built-in table, as --prices;
	// "": the built-in table (or prices.yaml among Policies).
	Prices string
	// AdminToken is --admin-token: of the memory operator API
	// (/v1/memory_stores), /admin and the console; tenants'
	// operator_tokens_sha256 work too. The audit log is
	// Dir/memory-audit.jsonl.
	AdminToken string
}

// LedgerFile is the usage ledger in the Dir, a file: ledger; it is whole
// once Close returns.
const LedgerFile = "ledger.jsonl"

// Stack is a running fake upstream and ctxproxy.
type Stack struct {
	Fake                   *fakeapi.API
	FakeURL, ProxyURL      string // http://127.0.0.1:port
	PoliciesDir, MemoryDir string
	// Keys mints the ctxproxy keys (sk-ctx-…) the proxy accepts; they are
	// kept in the Dir's keys.json.
	Keys *keys.Keyring

	proxyServer *http.Server
	stops       []func() // in the order Close runs them
}

// Start runs the fake upstream and a ctxproxy in front of it. Close stops
// both.
func Start(cfg Config) (_ *Stack, err error) {
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	s := &Stack{Fake: cfg.Fake}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.Fake == nil {
		s.Fake = fakeapi.New(fakeapi.WithLogger(log.Named("fake")))
	}
	if s.PoliciesDir, s.MemoryDir, err = Layout(cfg.Dir, cfg.Policies); err != nil {
		return nil, err
	}
	fake := &http.Server{Handler: s.Fake, ReadHeaderTimeout: 10 * time.Second}
	if s.FakeURL, err = s.serve(fake, log); err != nil {
		return nil, err
	}
	srv, err := server.Open(context.Background(), server.Settings{
		Upstream:   s.FakeURL,
		Policies:   s.PoliciesDir,
		MemoryDir:  s.MemoryDir, // keys.json and memory-audit.jsonl go in its parent, the Dir
		Ledger:     "file:" + filepath.Join(cfg.Dir, LedgerFile),
		Prices:     cfg.Prices,
		AdminToken: cfg.AdminToken,
		Version:    "stack",
		Log:        log,
		Lifecycle:  log,
	})
	if err != nil {
		return nil, err
	}
	s.Keys = srv.Keys
	s.stops = append([]func(){srv.Close}, s.stops...) // after the proxy stops serving, before the fake
	// The server the binary listens with: its timeouts, its limits.
	s.proxyServer = proxy.NewHTTPServer(srv.Handler, log)
	if s.ProxyURL, err = s.serve(s.proxyServer, log); err != nil {
		return nil, err
	}
	return s, nil
}

// serve runs hs on 127.0.0.1:0; Close stops it before what was served
// earlier, so the proxy goes before its upstream and its memory store.
func (s *Stack) serve(hs *http.Server, log *zap.Logger) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listen: %w", err)
	}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serve", zap.String("addr", ln.Addr().String()), zap.Error(err))
		}
	}()
	s.stops = append([]func(){func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if hs.Shutdown(ctx) != nil {
			_ = hs.Close()
		}
	}}, s.stops...)
	return "http://" + ln.Addr().String(), nil
}

// Close stops the proxy, then closes its stores (the ledger flushed), then
// stops the fake upstream. Calling it again does nothing, so a caller can stop the proxy
// early (to flush its recorder) and still defer Close.
func (s *Stack) Close() {
	stops := s.stops
	s.stops = nil
	for _, stop := range stops {
		stop()
	}
}
