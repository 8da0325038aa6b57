package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"gopkg.in/yaml.v3"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/testwait"
	"github.com/ctxproxy/ctxproxy/stack"
)

// These tests drive the built binary, as a user would.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ctxproxy-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "ctxproxy")
		buildErr = binaries.Build(context.Background(), binPath, binaries.Ctxproxy, false)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

const binKey = "sk-ant-binary-test"

// binPolicies is a policies folder without a prices.yaml: the built-in
// price table is in force.
func binPolicies(t *testing.T) string {
	t.Helper()
	dir, _, err := stack.Layout(t.TempDir(), map[string]string{
		"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
		"acme.yaml": stack.TenantPolicy("acme", binKey,
			"context_management:\n  mode: enforce\n  clear_tool_uses:\n    trigger: { type: input_tokens, value: 30000 }\nmemory:\n  mode: proxy\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// startProxy runs the binary on an ephemeral port and waits for its
// listening log line; it is killed when the test ends.
func startProxy(t *testing.T, args ...string) *binaries.Process {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "CTXPROXY_LOG_LEVEL=debug")
	p, err := binaries.Start(context.Background(), cmd, "ctxproxy listening", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

func fakeUpstream(t *testing.T) (*fakeapi.API, string) {
	fake := fakeapi.New()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return fake, srv.URL
}

// proxiedCalls is what the fake saw but the reads of its models list that ctxproxy
// makes on its own (at start, every ten minutes, and once for a pass-through
// tenant whose credential the API took).
func proxiedCalls(fake *fakeapi.API) []fakeapi.Request {
	var out []fakeapi.Request
	for _, r := range fake.Requests() {
		if !strings.HasPrefix(r.Path, "/v1/models") {
			out = append(out, r)
		}
	}
	return out
}

func send(t *testing.T, addr, path, body string) (*http.Response, string) {
	t.Helper()
	return sendAs(t, addr, binKey, path, body)
}

// sendAs is send with another API key.
func sendAs(t *testing.T, addr, key, path, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(body))
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// ctxproxy version prints the appVersion of the Helm chart, so the chart's default image tag is
// the release the binary says it is.
func TestBinaryVersionIsTheChartsAppVersion(t *testing.T) {
	b, err := os.ReadFile("../../deploy/helm/ctxproxy/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil || chart.AppVersion == "" {
		t.Fatalf("Chart.yaml appVersion %q: %v", chart.AppVersion, err)
	}
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(binary(t), arg).CombinedOutput()
		if err != nil || string(out) != "ctxproxy "+chart.AppVersion+"\n" {
			t.Errorf("ctxproxy %s: %v %q, want the chart's appVersion %s", arg, err, out, chart.AppVersion)
		}
	}
}

func TestBinaryValidate(t *testing.T) {
	t.Run("accepts the shipped policies with a line per tenant", func(t *testing.T) {
		out, err := exec.Command(binary(t), "validate", "--policies", "../../policies").CombinedOutput()
		if err != nil {
			t.Fatalf("validate: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "default") {
			t.Fatalf("no summary for tenant default: %s", out)
		}
	})
	t.Run("prints file:line problems and exits 1", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("tenant: bad\ncontext_management:\n  mode: sometimes\n"), 0o644)
		cmd := exec.Command(binary(t), "validate", "--policies", dir)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("exit: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "bad.yaml:3:") {
			t.Fatalf("output does not name bad.yaml:3: %s", out)
		}
	})
}

func TestBinaryServesRecordsAndReports(t *testing.T) {
	fake, upURL := fakeUpstream(t)
	dir := t.TempDir()
	pols := binPolicies(t)
	ledger := filepath.Join(dir, "ledger.jsonl")
	p := startProxy(t, "--upstream", upURL, "--policies", pols, "--memory-dir", filepath.Join(dir, "mem"),
		"--ledger", "file:"+ledger, "--admin-token", "s3cret", "--metrics-addr", "127.0.0.1:0")
	fake.SetResponder(fakeapi.Script(
		fakeapi.Reply{Content: []json.RawMessage{fakeapi.MemoryCreate("/memories/a.md", "hello")}, Usage: &fakeapi.Usage{InputTokens: 1000, OutputTokens: 100}},
		fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("done")}, Usage: &fakeapi.Usage{InputTokens: 2000, OutputTokens: 200},
			AppliedEdits: []json.RawMessage{fakeapi.AppliedEdit("clear_tool_uses_20250919", 2, 5000)}},
	))
	resp, body := send(t, p.Addr, "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || gjson.Get(body, "content.0.text").Str != "done" {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "mem", "acme", "a.md")); err != nil || string(b) != "hello" {
		t.Fatalf("memory file: %q %v", b, err)
	}
	// Metrics count both upstream calls of the loop.
	if metrics := metricsText(t, p); !strings.Contains(metrics, `ctxproxy_requests_total{`) {
		t.Fatalf("metrics lack ctxproxy_requests_total:\n%.2000s", metrics)
	}
	// The admin report needs the token.
	rr, _ := http.Get("http://" + p.Addr + "/admin/report")
	rr.Body.Close()
	if rr.StatusCode != 401 {
		t.Fatalf("report without token: %d", rr.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+p.Addr+"/admin/report?tenant=acme", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	// The ledger is written behind the request: poll until both calls are in.
	var report string
	eventually(t, "both calls reaching the report", func() {
		for {
			r, err := http.DefaultClient.Do(req)
			if err == nil {
				b, _ := io.ReadAll(r.Body)
				r.Body.Close()
				report = string(b)
				if gjson.Get(report, "total.calls").Int() == 2 {
					return
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	if in := gjson.Get(report, "total.input_tokens").Int(); in != 3000 {
		t.Fatalf("report input tokens = %d, want 3000: %s", in, report)
	}
	// Logs never carry the key.
	if strings.Contains(p.Log(), binKey) {
		t.Fatal("a log line carries the API key")
	}
	// After a stop, `ctxproxy report` reads the same ledger.
	p.Signal(syscall.SIGTERM)
	<-p.Done()
	out, err := exec.Command(binary(t), "report", "--ledger", "file:"+ledger, "--json").CombinedOutput()
	if err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if gjson.GetBytes(out, "total.calls").Int() != 2 {
		t.Fatalf("report after restart: %s", out)
	}
}

func TestBinaryReloadsPoliciesOnSIGHUP(t *testing.T) {
	fake, upURL := fakeUpstream(t)
	pols := binPolicies(t)
	p := startProxy(t, "--upstream", upURL, "--policies", pols, "--memory-dir", t.TempDir(), "--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
	body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	send(t, p.Addr, "/v1/messages", body)
	acme, _ := os.ReadFile(filepath.Join(pols, "acme.yaml"))
	os.WriteFile(filepath.Join(pols, "acme.yaml"), []byte(strings.Replace(string(acme), "30000", "4242", 1)), 0o644)
	p.Signal(syscall.SIGHUP)
	eventually(t, "the reload taking effect", func() {
		for {
			send(t, p.Addr, "/v1/messages", body)
			if r, ok := fake.LastRequest("/v1/messages"); ok && gjson.GetBytes(r.Body, "context_management.edits.0.trigger.value").Int() == 4242 {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

func TestBinaryStopsGracefullyOnSIGTERM(t *testing.T) {
	fake, upURL := fakeUpstream(t)
	p := startProxy(t, "--upstream", upURL, "--policies", binPolicies(t), "--memory-dir", t.TempDir(),
		"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"), "--shutdown-grace", "20s")
	// A stream that takes a while: 8 text chunks, 150ms apart.
	fake.Enqueue(fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("one two three four five six seven eight")}, TextChunks: 8, EventDelay: 150 * time.Millisecond})
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.Addr+"/v1/messages", strings.NewReader(`{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Api-Key", binKey)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); line != "event: message_start\n" {
		t.Fatalf("first line %q", line)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New connections are refused once the listener is closed.
	eventually(t, "the listener closing", func() {
		for {
			c, err := net.DialTimeout("tcp", p.Addr, time.Second)
			if err != nil {
				return
			}
			c.Close()
			time.Sleep(20 * time.Millisecond)
		}
	})
	rest, _ := io.ReadAll(br)
	resp.Body.Close()
	if !strings.HasSuffix(string(rest), "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n") {
		t.Fatalf("the open stream did not finish:\n%s", rest)
	}
	select {
	case <-p.Done():
		if p.Err() != nil {
			t.Fatalf("exit: %v\n%s", p.Err(), p.Log())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ctxproxy did not exit after SIGTERM")
	}
}

// eventually is testwait.Eventually, under the name the tests here use.
var eventually = testwait.Eventually

func TestBinaryDebugAddr(t *testing.T) {
	_, upURL := fakeUpstream(t)
	get := func(t *testing.T, url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	start := func(t *testing.T, logLevel string, args ...string) *binaries.Process {
		return startProxy(t, append([]string{"--upstream", upURL, "--policies", binPolicies(t), "--memory-dir", t.TempDir(),
			"--ledger", "file:" + filepath.Join(t.TempDir(), "l.jsonl"), "--log-level", logLevel}, args...)...)
	}
	t.Run("serves pprof and stats on its own listener, logged before the listening line even at warn", func(t *testing.T) {
		p := start(t, "warn", "--debug-addr", "127.0.0.1:0")
		dbg := p.Addrs["debug listening"]
		if dbg == "" || dbg == p.Addr {
			t.Fatalf("debug addr %q (main %q); log:\n%s", dbg, p.Addr, p.Log())
		}
		if code, body := get(t, "http://"+dbg+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
			t.Fatalf("pprof index: %d %.300s", code, body)
		}
		if code, body := get(t, "http://"+dbg+"/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile:") {
			t.Fatalf("goroutine profile: %d %.300s", code, body)
		}
		code, body := get(t, "http://"+dbg+"/debug/stats?gc=1")
		if code != 200 || gjson.Get(body, "goroutines").Int() < 2 || gjson.Get(body, "heap_inuse").Int() == 0 ||
			gjson.Get(body, "stack_inuse").Int() == 0 || gjson.Get(body, "heap_alloc").Int() == 0 || gjson.Get(body, "num_gc").Int() < 2 ||
			gjson.Get(body, "heap_live").Int() == 0 || gjson.Get(body, "heap_goal").Int() < gjson.Get(body, "heap_live").Int() {
			t.Fatalf("stats after gc: %d %s", code, body)
		}
		if code, _ := get(t, "http://"+p.Addr+"/debug/pprof/"); code == 200 {
			t.Fatal("the main listener serves /debug/pprof/")
		}
		if code, _ := get(t, "http://"+p.Addr+"/debug/stats"); code == 200 {
			t.Fatal("the main listener serves /debug/stats")
		}
		if code, _ := get(t, "http://"+p.Addr+"/healthz"); code != 200 {
			t.Fatalf("main listener /healthz: %d", code)
		}
	})
	t.Run("is off by default", func(t *testing.T) {
		p := start(t, "info")
		if len(p.Addrs) != 0 {
			t.Fatalf("lines with an addr before the listening line: %v", p.Addrs)
		}
		if code, _ := get(t, "http://"+p.Addr+"/debug/pprof/"); code == 200 {
			t.Fatal("the main listener serves /debug/pprof/")
		}
	})
}
