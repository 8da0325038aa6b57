package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// /metrics names every tenant with its spend and caps: it is served to
// Prometheus on --metrics-addr (or, without it, on the debug listener),
// never on the listener agents reach.
func TestBinaryServesMetricsApartFromTheAgents(t *testing.T) {
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
	start := func(t *testing.T, args ...string) (agents string, log func() string, addrs map[string]string) {
		p := startProxy(t, append([]string{"--upstream", upURL, "--policies", binPolicies(t), "--memory-dir", t.TempDir(),
			"--ledger", "file:" + filepath.Join(t.TempDir(), "l.jsonl")}, args...)...)
		return p.Addr, p.Log, p.Addrs
	}
	notOnTheAgents := func(t *testing.T, agents string) {
		t.Helper()
		code, body := get(t, "http://"+agents+"/metrics")
		if code != http.StatusNotFound || strings.Contains(body, "acme") || strings.Contains(body, "ctxproxy_") {
			t.Errorf("the agents' listener answers /metrics with %d:\n%.500s", code, body)
		}
	}
	const series = `ctxproxy_cleared_input_tokens_total{`
	t.Run("--metrics-addr serves /metrics and nothing else; the agents' listener answers 404", func(t *testing.T) {
		agents, _, addrs := start(t, "--metrics-addr", "127.0.0.1:0")
		m := addrs["metrics listening"]
		if m == "" || m == agents {
			t.Fatalf("metrics addr %q (agents %q)", m, agents)
		}
		if code, body := get(t, "http://"+m+"/metrics"); code != 200 || !strings.Contains(body, `tenant="acme"`) || !strings.Contains(body, series) {
			t.Errorf("metrics listener: %d %.500s", code, body)
		}
		for _, path := range []string{"/healthz", "/admin/ui/", "/v1/models", "/debug/pprof/"} {
			if code, _ := get(t, "http://"+m+path); code != http.StatusNotFound {
				t.Errorf("the metrics listener answers %s with %d", path, code)
			}
		}
		notOnTheAgents(t, agents)
	})
	t.Run("without --metrics-addr, /metrics is on the debug listener", func(t *testing.T) {
		agents, _, addrs := start(t, "--debug-addr", "127.0.0.1:0")
		dbg := addrs["debug listening"]
		if code, body := get(t, "http://"+dbg+"/metrics"); code != 200 || !strings.Contains(body, `tenant="acme"`) {
			t.Errorf("debug listener: %d %.500s", code, body)
		}
		notOnTheAgents(t, agents)
	})
	t.Run("with neither, /metrics is served nowhere and the log says how to turn it on", func(t *testing.T) {
		agents, log, _ := start(t)
		notOnTheAgents(t, agents)
		if !strings.Contains(log(), "metrics not served: set --metrics-addr") {
			t.Errorf("the start-up log does not say where /metrics went:\n%s", log())
		}
	})
}
