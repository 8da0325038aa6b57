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
