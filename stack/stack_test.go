package stack

import (
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/proxy"
)

func TestStartServesATenantThroughTheProxyAndCloseStopsBoth(t *testing.T) {
	const key = "sk-ant-stack-test"
	s, err := Start(Config{Dir: t.TempDir(), Policies: map[string]string{
		"default.yaml": DefaultPolicy,
		"t.yaml":       TenantPolicy("t", key, "context_management:\n  mode: off\nmemory:\n  mode: inject\n"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req, _ := http.NewRequest(http.MethodPost, s.ProxyURL+"/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header = http.Header{"X-Api-Key": {key}, "Anthropic-Version": {"2023-06-01"}, "Content-Type": {"application/json"}}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// The tenant was found by its key hash: memory inject added the tool.
	up, ok := s.Fake.LastRequest("/v1/messages")
	if !ok || !strings.Contains(string(up.Body), `"memory_20250818"`) {
		t.Fatalf("upstream request lacks the memory tool: %s", up.Body)
	}

	s.Close()
	s.Close() // a second Close does nothing
	for _, u := range []string{s.ProxyURL, s.FakeURL} {
		if resp, err := http.Get(u + "/"); err == nil {
			resp.Body.Close()
			t.Errorf("%s still serves after Close", u)
		}
	}
}

func TestTheProxyRunsWithTheBinarysServerSettings(t *testing.T) {
	s, err := Start(Config{Dir: t.TempDir(), Policies: map[string]string{"default.yaml": DefaultPolicy}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want, got := proxy.NewHTTPServer(nil, zap.NewNop()), s.proxyServer
	if got.ReadHeaderTimeout != want.ReadHeaderTimeout || got.ReadTimeout != want.ReadTimeout ||
		got.WriteTimeout != want.WriteTimeout || got.IdleTimeout != want.IdleTimeout ||
		got.MaxHeaderBytes != want.MaxHeaderBytes || got.ErrorLog == nil {
		t.Fatalf("the stack's proxy server differs from the binary's: got %+v, want %+v", got, want)
	}
}

// The stack's ctxproxy is the one serve builds (package server): a tenant's
// per-minute limit holds, and /admin answers under the admin token, neither
// of which the harness had when it wired the proxy itself.
func TestTheStackRunsTheProductionWiring(t *testing.T) {
	const key, admin = "sk-ant-stack-limits", "stack-admin-token"
	s, err := Start(Config{Dir: t.TempDir(), AdminToken: admin, Policies: map[string]string{
		"t.yaml": TenantPolicy("t", key, "limits:\n  requests_per_minute: 1\n"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	post := func() int {
		req, _ := http.NewRequest(http.MethodPost, s.ProxyURL+"/v1/messages",
			strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header = http.Header{"X-Api-Key": {key}, "Anthropic-Version": {"2023-06-01"}, "Content-Type": {"application/json"}}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	t.Run("the second request in the minute is refused by the tenant's limit", func(t *testing.T) {
		if first, second := post(), post(); first != 200 || second != 429 {
			t.Fatalf("statuses %d then %d, want 200 then 429", first, second)
		}
	})
	t.Run("/admin/report answers the admin token", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, s.ProxyURL+"/admin/report", nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
	})
}
