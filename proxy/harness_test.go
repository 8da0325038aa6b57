package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/testwait"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
)

// Keys of the tenants the tests use.
const (
	keyAcme  = "sk-ant-test-acme"
	keyBeta  = "sk-ant-test-beta"
	keyOther = "sk-ant-test-nobody"
)

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// Policies the tests run with: acme enforces edits with memory proxy (and
// forwards threaded requests with them, threads: pass), beta is a second
// proxy-memory tenant (threads: the default, unthread_edits), default applies
// to unknown keys.
func testPolicies() map[string]string {
	return map[string]string{
		"default.yaml": `tenant: default
context_management:
  mode: default
  clear_tool_uses:
    trigger: { type: input_tokens, value: 100000 }
memory:
  mode: off
`,
		"acme.yaml": `tenant: acme
api_keys_sha256: ["` + sha(keyAcme) + `"]
context_management:
  mode: enforce
  threads: pass
  clear_thinking:
    keep: { type: thinking_turns, value: 1 }
  clear_tool_uses:
    trigger: { type: input_tokens, value: 30000 }
    keep: { type: tool_uses, value: 3 }
    clear_at_least: { type: input_tokens, value: 5000 }
    exclude_tools: [web_search]
memory:
  mode: proxy
  max_iterations: 4
`,
		"beta.yaml": `tenant: beta
api_keys_sha256: ["` + sha(keyBeta) + `"]
context_management:
  mode: default
  clear_tool_uses: {}
memory:
  mode: proxy
`,
	}
}

type harness struct {
	t        *testing.T
	fake     *fakeapi.API
	upstream *httptest.Server
	proxy    *httptest.Server
	srv      *Server
	pols     *policy.Store
	polDir   string
	memDir   string
	mem      memoryhook.Store
	logs     *observer.ObservedLogs
}

type harnessOpt func(*Config)

func writePolicies(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		// A name with a '/' is a file in a folder (a memory template).
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// newHarness starts the fake upstream and a proxy in front of it, both on
// 127.0.0.1 ephemeral ports, stopped when the test ends.
func newHarness(t *testing.T, opts ...harnessOpt) *harness {
	return newHarnessWith(t, nil, testPolicies(), opts...)
}

func newHarnessWith(t *testing.T, upstream http.Handler, policies map[string]string, opts ...harnessOpt) *harness {
	t.Helper()
	h := &harness{t: t, polDir: t.TempDir(), memDir: t.TempDir()}
	if upstream == nil {
		h.fake = fakeapi.New()
		upstream = h.fake
	}
	h.upstream = httptest.NewServer(upstream)
	t.Cleanup(h.upstream.Close)
	writePolicies(t, h.polDir, policies)
	core, logs := observer.New(zap.DebugLevel)
	h.logs = logs
	log := zap.New(core)
	fs, err := memoryhook.NewFileStore(h.memDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	h.mem = fs
	u, _ := url.Parse(h.upstream.URL)
	cfg := withLimits(Config{Upstream: u, Memory: fs, Log: log})
	for _, o := range opts {
		o(&cfg)
	}
	var sopts []policy.StoreOption
	if cfg.Models != nil { // the policies decide from the models the proxy feeds, as the binary's
		sopts = append(sopts, policy.WithModels(cfg.Models))
	}
	if h.pols, err = policy.NewStore(h.polDir, log, sopts...); err != nil {
		t.Fatal(err)
	}
	cfg.Policies = h.pols
	if h.srv, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	h.proxy = httptest.NewServer(h.srv)
	t.Cleanup(h.proxy.Close)
	return h
}

// post sends a Messages API request through the proxy with key.
func (h *harness) post(path, key, body string, hdr ...string) *http.Response {
	h.t.Helper()
	return h.postCtx(context.Background(), path, key, body, hdr...)
}

func (h *harness) postCtx(ctx context.Context, path, key, body string, hdr ...string) *http.Response {
	h.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.proxy.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp
}

func readAll(t *testing.T, r io.ReadCloser) string {
	t.Helper()
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// memFile reads a tenant's memory file from disk.
func (h *harness) memFile(tenant, rel string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(h.memDir, tenant, filepath.FromSlash(rel)))
	if err != nil {
		return "", false
	}
	return string(b), true
}

// lastUpstream is the last request the fake saw on path.
func (h *harness) lastUpstream(path string) fakeapi.Request {
	h.t.Helper()
	r, ok := h.fake.LastRequest(path)
	if !ok {
		h.t.Fatalf("upstream saw no request on %s", path)
	}
	return r
}

// eventually is testwait.Eventually, under the name the tests here use.
var eventually = testwait.Eventually

type jsonRaw = json.RawMessage

func scopeOf(tenant string) memoryhook.Scope {
	return memoryhook.Scope{Tenant: tenant, Limits: memoryhook.DefaultLimits()}
}

func mustPath(t *testing.T, p string) memoryhook.Path {
	t.Helper()
	mp, err := memoryhook.ParsePath(p)
	if err != nil {
		t.Fatal(err)
	}
	return mp
}

// withLimits is c with the body limit and timeouts a test's proxy runs with: New requires them
// (proxy.Config has no defaults; serve's are server.DefaultSettings', which package proxy cannot
// import), and these are large enough that no test meets them unless it sets its own.
func withLimits(c Config) Config {
	c.MaxBody, c.UpstreamTimeout, c.StreamIdleTimeout = 32<<20, 10*time.Minute, 5*time.Minute
	return c
}
