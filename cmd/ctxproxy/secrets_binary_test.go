package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/stack"
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

// mintKey mints a ctxproxy key of tenant for user through the admin API.
func mintKey(t *testing.T, addr, tenant, user string) string {
	t.Helper()
	resp, body := call(t, addr, "POST", "/admin/keys", `{"tenant":"`+tenant+`","name":"test","user":"`+user+`"}`,
		"Authorization", "Bearer "+e2eAdminToken)
	if resp.StatusCode != 201 || !keys.IsKey(gjson.Get(body, "key").Str) {
		t.Fatalf("mint a key: %d %s", resp.StatusCode, body)
	}
	return gjson.Get(body, "key").Str
}

// One rule each, on every route: the upstream's anthropic-ratelimit-* headers are hidden from a
// spend-capped tenant only (Messages, count_tokens and pass-through alike), and every ledger line,
// count_tokens' included, carries key_id and, for a ctxproxy key, user.
func TestBinaryRatelimitHeadersAndLedgerFieldsAreOneRuleOnEveryRoute(t *testing.T) {
	fake := fakeapi.New()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Anthropic-Ratelimit-Requests-Remaining", "3999") // the organisation's quota
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	const cappedKey, pacedKey = "sk-ant-capped-client", "sk-ant-paced-client"
	pols, _, err := stack.Layout(t.TempDir(), map[string]string{
		"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
		"vault.yaml":   vaultPolicy(""),
		"capped.yaml":  stack.TenantPolicy("capped", cappedKey, "memory:\n  mode: off\nlimits:\n  spend: [{period: daily, usd: 50}]\n"),
		"paced.yaml":   stack.TenantPolicy("paced", pacedKey, "memory:\n  mode: off\nlimits:\n  requests_per_minute: 100000\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.jsonl")
	p := startSecretProxy(t, "--upstream", up.URL, "--policies", pols, "--memory-dir", filepath.Join(dir, "mem"), "--ledger", "file:"+ledger)

	routes := []struct{ name, method, path, body string }{e2eRoutes[0], e2eRoutes[2], e2eRoutes[4]} // messages, count_tokens, models
	for _, tc := range []struct{ name, key, want string }{
		{"a spend-capped tenant never sees the organisation's ratelimit headers", cappedKey, ""},
		{"a tenant with per-minute limits only sees them, as any other", pacedKey, "3999"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, rt := range routes {
				resp, body := call(t, p.Addr, rt.method, rt.path, rt.body, "X-Api-Key", tc.key)
				if got := resp.Header.Get("Anthropic-Ratelimit-Requests-Remaining"); resp.StatusCode != 200 || got != tc.want {
					t.Errorf("%s: %d, anthropic-ratelimit-requests-remaining %q: %s", rt.name, resp.StatusCode, got, body)
				}
			}
		})
	}
	t.Run("a count_tokens ledger line carries key_id and user, as a Messages one", func(t *testing.T) {
		secret := mintKey(t, p.Addr, "vault", "ana@example.com")
		for i, model := range []string{"claude-ledger-messages", "claude-ledger-count"} {
			path, body := "/v1/messages", `{"model":"`+model+`","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
			if i == 1 {
				path, body = "/v1/messages/count_tokens", `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`
			}
			if resp, b := call(t, p.Addr, "POST", path, body, "Authorization", "Bearer "+secret); resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
			}
			var line string
			eventually(t, "the ledger line of "+path, func() {
				for line = lastLedgerCall(t, ledger, model); line == ""; line = lastLedgerCall(t, ledger, model) {
					time.Sleep(20 * time.Millisecond)
				}
			})
			if gjson.Get(line, "key_id").Str != keyIDOf(secret) || gjson.Get(line, "user").Str != "ana@example.com" ||
				gjson.Get(line, "tenant").Str != "vault" {
				t.Errorf("%s: ledger line %s", path, line)
			}
		}
	})
}

// rawExchange sends a request with key over a connection of its own and returns every byte the
// proxy answered (interim responses and trailers included), up to the connection's close.
func rawExchange(t *testing.T, addr, method, target, key string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Api-Key: %s\r\nAnthropic-Version: 2023-06-01\r\nTE: trailers\r\n\r\n",
		method, target, key)
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An upstream that echoes the credential it was sent in a 103 Early Hints response (as a value and
// as a header name) and in trailers (one announced, one not): none of it reaches a client holding
// only a ctxproxy key, on any pass-through route.
func TestBinaryPassThroughScrubsInterimResponsesAndTrailers(t *testing.T) {
	var credentials sync.Map // what the upstream was sent
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-Api-Key")
		credentials.Store(key, true)
		h := w.Header()
		h.Set("Link", "</hint.css>; rel=preload; as=style")
		h.Set("X-Echo-Key", key)
		h.Set("X-Echo-"+key, "1")
		w.WriteHeader(http.StatusEarlyHints)
		clear(h)
		h.Set("Trailer", "X-Echo-Trailer")
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"data":[]}`)
		h.Set("X-Echo-Trailer", key)
		h.Set(http.TrailerPrefix+"X-Echo-Late", "key="+key)
	}))
	t.Cleanup(up.Close)
	dir := t.TempDir()
	p := startSecretProxy(t, "--upstream", up.URL, "--policies", vaultPolicies(t, ""), "--memory-dir", filepath.Join(dir, "mem"),
		"--ledger", "file:"+filepath.Join(dir, "l.jsonl"))
	secret := mintKey(t, p.Addr, "vault", "ana")
	for _, path := range []string{"/v1/models", "/v1/files", "/v1/messages/batches/msgbatch_1"} {
		t.Run(path, func(t *testing.T) {
			got := rawExchange(t, p.Addr, "GET", path, secret)
			if _, ok := credentials.Load(e2eVaultKey); !ok {
				t.Fatal("the upstream never got the tenant's key: the test tests nothing")
			}
			if strings.Contains(got, e2eVaultKey) {
				t.Fatalf("the tenant's key reached the client:\n%s", got)
			}
			// Scrubbed, not lost: the hint, the reply and the trailers still arrive.
			for _, want := range []string{"HTTP/1.1 103 Early Hints", "Link: </hint.css>", "X-Echo-Key: [redacted]",
				"HTTP/1.1 200 OK", `{"data":[]}`, "X-Echo-Trailer: [redacted]", "X-Echo-Late: key=[redacted]"} {
				if !strings.Contains(got, want) {
					t.Errorf("no %q in the reply:\n%s", want, got)
				}
			}
		})
	}
}

// The compaction measurement's count_tokens call takes the path every upstream call takes: the
// tenant's key goes upstream, and when the upstream answers with an error that quotes the key, the
// operator's log line gives the status and request id, never the body.
func TestBinaryCompactionMeasurementLogsNoUpstreamBody(t *testing.T) {
	fake := fakeapi.New()
	var measured sync.Map // the credentials count_tokens was sent
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/messages/count_tokens" {
			fake.ServeHTTP(w, r)
			return
		}
		key := r.Header.Get("X-Api-Key")
		measured.Store(key, true)
		w.Header().Set("Request-Id", "req_measure_1")
		w.Header().Set("X-Echo-Key", key)
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"type":"error","error":{"type":"invalid_request_error","message":"no such key `+key+`"}}`)
	}))
	t.Cleanup(up.Close)
	dir := t.TempDir()
	pols := vaultPolicies(t, "context_management:\n  mode: enforce\n  compact:\n    trigger: { type: input_tokens, value: 50000 }\n    measure_savings: true\n")
	p := startSecretProxy(t, "--upstream", up.URL, "--policies", pols, "--memory-dir", filepath.Join(dir, "mem"),
		"--ledger", "file:"+filepath.Join(dir, "l.jsonl"))
	long, _ := json.Marshal(strings.Repeat("log line ", 25000)) // about 56,000 tokens for the fake: it compacts
	body := `{"model":"claude-opus-4-6","max_tokens":100,"messages":[{"role":"user","content":` + string(long) +
		`},{"role":"assistant","content":"noted"},{"role":"user","content":"why does it fail?"}]}`
	resp, reply := call(t, p.Addr, "POST", "/v1/messages", body, "X-Api-Key", vaultClientKey)
	if resp.StatusCode != 200 || !strings.Contains(reply, `"type":"compaction"`) {
		t.Fatalf("%d %.300s", resp.StatusCode, reply)
	}
	var line string
	eventually(t, "the measurement's log line", func() {
		for line == "" {
			for _, l := range strings.Split(p.Log(), "\n") {
				if strings.Contains(l, "compaction not measured") {
					line = l
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	if _, ok := measured.Load(e2eVaultKey); !ok {
		t.Fatal("the measurement did not send the tenant's key: the test tests nothing")
	}
	if strings.Contains(p.Log(), e2eVaultKey) || strings.Contains(line, "no such key") || !strings.Contains(line, "req_measure_1") ||
		gjson.Get(line, "tenant").Str != "vault" {
		t.Fatalf("the log line %s\n(log:\n%s)", line, p.Log())
	}
}

// The upstream URL's password is not on /readyz, as it is not in the start-up log line. An admin
// token given as a flag draws a warning at start (the environment is the place for it); neither is
// on /debug/pprof/cmdline. An admin token given in the environment draws no warning.
func TestBinaryKeepsUpstreamPasswordAndAdminTokenOutOfSight(t *testing.T) {
	_, upURL := fakeUpstream(t)
	const password, token = "upstream-s3cret-pass", "flag-admin-token-value"
	withPassword := strings.Replace(upURL, "http://", "http://proxyuser:"+password+"@", 1)
	const warning = "--admin-token is on the command line"
	get := func(t *testing.T, url string) string {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
		}
		return string(b)
	}
	t.Run("flag: warned at start, redacted on /readyz and /debug/pprof/cmdline", func(t *testing.T) {
		dir := t.TempDir()
		p := startProxy(t, "--upstream", withPassword, "--policies", binPolicies(t), "--memory-dir", filepath.Join(dir, "mem"),
			"--ledger", "file:"+filepath.Join(dir, "l.jsonl"), "--admin-token", token, "--debug-addr", "127.0.0.1:0")
		ready := get(t, "http://"+p.Addr+"/readyz")
		if strings.Contains(ready, password) || !strings.Contains(ready, "proxyuser") {
			t.Errorf("/readyz: %s", ready)
		}
		if cmd := get(t, "http://"+p.Addrs["debug listening"]+"/debug/pprof/cmdline"); strings.Contains(cmd, token) ||
			strings.Contains(cmd, password) || !strings.Contains(cmd, "--admin-token\x00[redacted]") || !strings.Contains(cmd, "proxyuser:xxxxx@") {
			t.Errorf("/debug/pprof/cmdline: %q", cmd)
		}
		if !strings.Contains(p.Log(), warning) || !strings.Contains(p.Log(), "CTXPROXY_ADMIN_TOKEN") || strings.Contains(p.Log(), password) {
			t.Errorf("log:\n%s", p.Log())
		}
	})
	t.Run("environment: no warning", func(t *testing.T) {
		dir := t.TempDir()
		p := startSecretProxy(t, "--upstream", upURL, "--policies", binPolicies(t), "--memory-dir", filepath.Join(dir, "mem"),
			"--ledger", "file:"+filepath.Join(dir, "l.jsonl"))
		if resp, body := call(t, p.Addr, "GET", "/admin/keys?tenant=acme", "", "Authorization", "Bearer "+e2eAdminToken); resp.StatusCode != 200 {
			t.Fatalf("the admin token from the environment: %d %s", resp.StatusCode, body)
		}
		if strings.Contains(p.Log(), warning) {
			t.Errorf("warned without the flag:\n%s", p.Log())
		}
	})
	t.Run("--help says to use the environment", func(t *testing.T) {
		out, _ := exec.Command(binary(t), "--help").CombinedOutput()
		if !regexp.MustCompile(`-admin-token string\n\s+token for /admin endpoints; unset disables them. Set it in the environment`).Match(out) {
			t.Errorf("--help:\n%s", out)
		}
	})
}
