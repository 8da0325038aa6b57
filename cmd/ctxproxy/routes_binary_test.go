package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// rawSend sends a request with exactly this request-target and key.
func rawSend(t *testing.T, addr, method, target, key, body string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Api-Key: %s\r\nAnthropic-Version: 2023-06-01\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		method, target, key, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

func TestBinaryEveryRouteIsUnderThePolicy(t *testing.T) {
	fake, upURL := fakeUpstream(t)
	ledger := filepath.Join(t.TempDir(), "l.jsonl")
	p := startProxy(t, "--upstream", upURL, "--policies", binPolicies(t), "--memory-dir", t.TempDir(),
		"--ledger", "file:"+ledger, "--require-known-tenant")
	msg := `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	batch := `{"requests":[{"custom_id":"one","params":` + msg + `}]}`
	t.Run("--require-known-tenant answers 401 on every route that reaches the upstream", func(t *testing.T) {
		for _, r := range []struct{ method, target, body string }{
			{"POST", "/v1/messages/", msg}, {"POST", "/v1/messages/batches", batch},
			{"GET", "/v1/messages/batches/msgbatch_1", ""}, {"GET", "/v1/models", ""},
		} {
			status, body := rawSend(t, p.Addr, r.method, r.target, "sk-ant-unknown", r.body)
			if status != 401 || gjson.Get(body, "error.type").Str != "authentication_error" {
				t.Errorf("%s %s: %d %s", r.method, r.target, status, body)
			}
		}
		if n := len(proxiedCalls(fake)); n != 0 {
			t.Fatalf("an unknown key reached the upstream %d times", n)
		}
	})
	t.Run("/v1/messages in another spelling is served with the policy", func(t *testing.T) {
		status, body := rawSend(t, p.Addr, "POST", "/V1//%6Dessages/", binKey, msg)
		up, ok := fake.LastRequest("/v1/messages")
		if status != 200 || !ok || !gjson.GetBytes(up.Body, "context_management").Exists() {
			t.Fatalf("%d %s; upstream %s", status, body, up.Body)
		}
	})
	t.Run("a batch gets the policy in its params, with no memory tool in proxy mode", func(t *testing.T) {
		status, body := rawSend(t, p.Addr, "POST", "/v1/messages/batches", binKey, batch)
		up, ok := fake.LastRequest("/v1/messages/batches")
		if status != 200 || !ok {
			t.Fatalf("%d %s", status, body)
		}
		params := gjson.GetBytes(up.Body, "requests.0.params")
		if !params.Get("context_management.edits").Exists() || params.Get("tools").Exists() ||
			!strings.Contains(up.Header.Get("Anthropic-Beta"), "context-management-2025-06-27") {
			t.Fatalf("upstream batch %s", up.Body)
		}
	})
	t.Run("count_tokens is a ledger line with what it counted, billed nothing", func(t *testing.T) {
		count := `{"model":"claude-counted","messages":[{"role":"user","content":"` + strings.Repeat("word ", 500) + `"}]}`
		status, body := rawSend(t, p.Addr, "POST", "/v1/messages/count_tokens", binKey, count)
		if status != 200 {
			t.Fatalf("%d %s", status, body)
		}
		var line string
		eventually(t, "the count_tokens ledger line", func() {
			for line = lastLedgerCall(t, ledger, "claude-counted"); line == ""; line = lastLedgerCall(t, ledger, "claude-counted") {
				time.Sleep(50 * time.Millisecond)
			}
		})
		if gjson.Get(line, "endpoint").Str != "count_tokens" ||
			gjson.Get(line, "count_tokens.input_tokens").Int() != gjson.Get(body, "input_tokens").Int() ||
			gjson.Get(line, "count_tokens.context_management.original_input_tokens").Int() != gjson.Get(body, "context_management.original_input_tokens").Int() ||
			gjson.Get(line, "cost_usd").Float() != 0 {
			t.Fatalf("ledger line %s for reply %s", line, body)
		}
	})
	t.Run("pass-through requests get a log line", func(t *testing.T) {
		rawSend(t, p.Addr, "GET", "/v1/models", binKey, "")
		eventually(t, "the pass-through log line", func() {
			for !strings.Contains(p.Log(), `"path":"/v1/models","passthrough":true,"status":200`) {
				time.Sleep(50 * time.Millisecond)
			}
		})
	})
}
