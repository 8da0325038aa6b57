package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/stack"
)

// The SDKs resend a non-streamed request whose reply was cut part-way, with
// x-stainless-retry-count 1: through the binary, a memory-loop request whose reply the client
// dropped after its first bytes is, when resent, answered from what the proxy did (the same
// reply, no upstream call, the memory write not run again); a fresh request (retry count 0) or
// another body runs as usual.
func TestBinaryAnswersAnSDKResendFromWhatItDid(t *testing.T) {
	fake := fakeapi.New()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	pols, mem, err := stack.Layout(t.TempDir(), map[string]string{
		"acme.yaml": stack.TenantPolicy("acme", binKey, "memory:\n  mode: proxy\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, "--upstream", srv.URL, "--policies", pols, "--memory-dir", mem,
		"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
	script := func() {
		fake.SetResponder(fakeapi.Script(
			fakeapi.Reply{Content: []json.RawMessage{fakeapi.MemoryStrReplace("/memories/count.md", "n=0", "n=1")}},
			fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("Counted.")}},
		))
	}
	seed := func() {
		if err := os.MkdirAll(filepath.Join(mem, "acme"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mem, "acme", "count.md"), []byte("n=0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const body = `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"count"}]}`
	raw := func(retry, body string) string {
		return "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + binKey + "\r\nAnthropic-Version: 2023-06-01\r\n" +
			"Content-Type: application/json\r\nX-Stainless-Retry-Count: " + retry + "\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body
	}
	send := func(t *testing.T, retry, body string) (*http.Response, string) {
		t.Helper()
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, raw(retry, body)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	seed()
	script()
	// The first attempt: the client reads the status line and a few bytes, then drops the connection.
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, raw("0", body)); err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 20)
	if _, err := io.ReadFull(c, first); err != nil || !strings.HasPrefix(string(first), "HTTP/1.1 200") {
		t.Fatalf("first bytes %q: %v", first, err)
	}
	c.Close()
	calls := len(proxiedCalls(fake))
	if calls != 2 {
		t.Fatalf("%d upstream calls for the first attempt, want 2", calls)
	}

	resp, got := send(t, "1", body)
	if resp.StatusCode != 200 || !strings.Contains(got, "Counted.") || resp.Header.Get("X-Ctxproxy-Replayed") != "true" {
		t.Fatalf("the resend: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	if n := len(proxiedCalls(fake)); n != calls {
		t.Errorf("the resend made %d upstream calls", n-calls)
	}
	if b, _ := os.ReadFile(filepath.Join(mem, "acme", "count.md")); string(b) != "n=1\n" {
		t.Errorf("count.md = %q, want the one write", b)
	}

	t.Run("a fresh request with the same body runs again", func(t *testing.T) {
		seed()
		script()
		resp, got := send(t, "0", body)
		if resp.StatusCode != 200 || resp.Header.Get("X-Ctxproxy-Replayed") != "" || len(proxiedCalls(fake)) != calls+2 {
			t.Errorf("%d %v %s", resp.StatusCode, resp.Header, got)
		}
	})
	t.Run("a resend of another body runs", func(t *testing.T) {
		before := len(proxiedCalls(fake))
		fake.SetResponder(nil)
		resp, got := send(t, "1", strings.Replace(body, "count", "hello", 1))
		if resp.StatusCode != 200 || resp.Header.Get("X-Ctxproxy-Replayed") != "" || len(proxiedCalls(fake)) != before+1 {
			t.Errorf("%d %v %s", resp.StatusCode, resp.Header, got)
		}
	})
}
