package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"github.com/ctxproxy/ctxproxy/internal/apikey"
	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/memoryhook"
)

func withRetries(n int) map[string]string {
	p := testPolicies()
	p["acme.yaml"] += fmt.Sprintf("upstream:\n  retries: %d\n  retry_base_delay: 1ms\n  retry_max_delay: 5ms\n", n)
	return p
}

func TestUpstreamErrorsAreRelayedWithTheirHeaders(t *testing.T) {
	for _, status := range []int{429, 529, 500, 503} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d stream=%v", status, stream), func(t *testing.T) {
				h := newHarness(t)
				r := fakeapi.ErrorReply(status, apierr.Type(status), "upstream says no")
				r.Header = http.Header{"Retry-After": {"3"}, "Anthropic-Ratelimit-Requests-Remaining": {"0"}}
				h.fake.Enqueue(r)
				body := simpleBody
				if stream {
					body = withStream(body)
				}
				resp := h.post("/v1/messages", keyAcme, body)
				got := readAll(t, resp.Body)
				if resp.StatusCode != status || gjson.Get(got, "error.message").Str != "upstream says no" {
					t.Fatalf("status %d body %s", resp.StatusCode, got)
				}
				if resp.Header.Get("Retry-After") != "3" || resp.Header.Get("Anthropic-Ratelimit-Requests-Remaining") != "0" || resp.Header.Get("Request-Id") == "" {
					t.Fatalf("headers not relayed: %v", resp.Header)
				}
				if n := len(h.fake.Requests()); n != 1 {
					t.Fatalf("%d upstream calls without retries configured, want 1", n)
				}
			})
		}
	}
}

func TestOptInRetriesRecoverBeforeAnyByteReachedTheClient(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			h := newHarnessWith(t, nil, withRetries(2))
			h.fake.Enqueue(fakeapi.Overloaded(), fakeapi.RateLimited("0"), fakeapi.TextReply("third time"))
			body := simpleBody
			if stream {
				body = withStream(body)
			}
			resp := h.post("/v1/messages", keyAcme, body)
			got := readAll(t, resp.Body)
			if stream {
				got = accumulate(t, got)
			}
			if resp.StatusCode != 200 || !strings.Contains(got, "third time") {
				t.Fatalf("status %d body %s", resp.StatusCode, got)
			}
			if n := len(h.fake.Requests()); n != 3 {
				t.Fatalf("upstream calls = %d, want 3", n)
			}
		})
	}
}

func TestRetriesHonourRetryAfter(t *testing.T) {
	h := newHarnessWith(t, nil, withRetries(1))
	r := fakeapi.Overloaded()
	r.Header = http.Header{"Retry-After-Ms": {"300"}}
	h.fake.Enqueue(r, fakeapi.TextReply("ok"))
	readAll(t, h.post("/v1/messages", keyAcme, simpleBody).Body)
	reqs := h.fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("upstream calls = %d", len(reqs))
	}
	// A lower bound only: the proxy must have waited at least what it was told.
	if gap := reqs[1].Time.Sub(reqs[0].Time); gap < 300*time.Millisecond {
		t.Fatalf("retried after %v, before the 300ms retry-after-ms", gap)
	}
}

func TestRetriesGiveUpAfterTheirCountWithTheLastError(t *testing.T) {
	h := newHarnessWith(t, nil, withRetries(2))
	h.fake.Enqueue(fakeapi.Overloaded(), fakeapi.Overloaded(), fakeapi.Overloaded(), fakeapi.TextReply("never"))
	resp := h.post("/v1/messages", keyAcme, simpleBody)
	got := readAll(t, resp.Body)
	if resp.StatusCode != 529 || gjson.Get(got, "error.type").Str != "overloaded_error" || len(h.fake.Requests()) != 3 {
		t.Fatalf("status %d body %s after %d calls", resp.StatusCode, got, len(h.fake.Requests()))
	}
}

func TestNoRetryInsideTheMemoryLoopAfterAMemoryWrite(t *testing.T) {
	h := newHarnessWith(t, nil, withRetries(3))
	h.fake.Enqueue(fakeapi.Blocks(fakeapi.MemoryCreate("/memories/a.md", "x")), fakeapi.Overloaded(), fakeapi.TextReply("too late"))
	resp := h.post("/v1/messages", keyAcme, simpleBody)
	got := readAll(t, resp.Body)
	if resp.StatusCode != 529 {
		t.Fatalf("status %d body %s", resp.StatusCode, got)
	}
	if n := len(h.fake.Requests()); n != 2 {
		t.Fatalf("upstream calls = %d, want 2: the failed loop call must not be retried", n)
	}
	if f, _ := h.memFile("acme", "a.md"); f != "x" {
		t.Fatalf("the acknowledged write is lost: %q", f)
	}
}

// Whether the loop may still retry is what the memory command reports
// (Result.Wrote), not its name: a write refused before it touched the store
// leaves retries on, a write that failed part way turns them off.
func TestLoopRetriesStopOnlyAfterACommandThatMayHaveWritten(t *testing.T) {
	cases := []struct {
		name      string
		call      json.RawMessage
		readOnly  bool
		wantCalls int
		wantCode  int
	}{
		{"a create refused by the guard is retried", fakeapi.MemoryCreate("/etc/passwd", "x"), false, 3, 200},
		{"an unknown command is retried", json.RawMessage(`{"type":"tool_use","id":"toolu_x","name":"memory","input":{"command":"frobnicate"}}`), false, 3, 200},
		{"a create the store failed part way is not", fakeapi.MemoryCreate("/memories/a.md", "x"), true, 2, 529},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessWith(t, nil, withRetries(3))
			if tc.readOnly {
				h.srv.cfg.Memory = readOnlyStore{h.mem}
			}
			h.fake.Enqueue(fakeapi.Blocks(tc.call), fakeapi.Overloaded(), fakeapi.TextReply("done"))
			resp := h.post("/v1/messages", keyAcme, simpleBody)
			got := readAll(t, resp.Body)
			if resp.StatusCode != tc.wantCode {
				t.Fatalf("status %d body %s, want %d", resp.StatusCode, got, tc.wantCode)
			}
			if n := len(h.fake.Requests()); n != tc.wantCalls {
				t.Fatalf("upstream calls = %d, want %d", n, tc.wantCalls)
			}
		})
	}
}

// settleGoroutines waits for goroutines to drop back to at most base+slack.
func settleGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base+2 {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, started with %d:\n%s", n, base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAStreamCutMidwayLeavesNoGoroutineBehind(t *testing.T) {
	h := newHarness(t)
	http.DefaultClient.CloseIdleConnections()
	base := runtime.NumGoroutine()
	for range 20 {
		h.fake.Enqueue(fakeapi.Reply{Content: fakeapi.TextReply("a b c d e f g").Content, CutAfter: 4})
		got := readAll(t, h.post("/v1/messages", keyAcme, withStream(simpleBody)).Body)
		if !strings.HasSuffix(got, "\n\n") || eventNames(got)[len(eventNames(got))-1] != "error" {
			t.Fatalf("stream did not end with an error event: %s", got)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	h.srv.up.client.CloseIdleConnections()
	settleGoroutines(t, base)
}

func TestAClientGoneMidLoopCancelsTheUpstreamAndLeavesNoTornFile(t *testing.T) {
	h := newHarness(t)
	text := strings.Repeat("remember this line\n", 5000)
	reached := make(chan struct{})
	h.fake.SetResponder(func(r *fakeapi.Request) fakeapi.Reply {
		if r.AssistantTurns == 0 {
			return fakeapi.Blocks(fakeapi.MemoryCreate("/memories/big.md", text))
		}
		close(reached)
		return fakeapi.Reply{Delay: time.Minute, Content: fakeapi.TextReply("never").Content}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.proxy.URL+"/v1/messages", strings.NewReader(simpleBody))
		req.Header.Set("X-Api-Key", keyAcme)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	eventually(t, "the loop's second upstream call", func() { <-reached })
	cancel()
	eventually(t, "the request ending", func() { <-done })
	eventually(t, "the upstream seeing the cancel", func() {
		for {
			if r, ok := h.fake.LastRequest("/v1/messages"); ok && r.Outcome != "" {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	if f, _ := h.memFile("acme", "big.md"); f != text {
		t.Fatalf("memory file has %d bytes, want %d", len(f), len(text))
	}
	entries, _ := os.ReadDir(filepath.Join(h.memDir, "acme"))
	for _, e := range entries {
		if e.Name() != "big.md" {
			t.Errorf("stray file %s in the tenant's store", e.Name())
		}
	}
}

// readOnlyStore is a memory store whose disk refuses writes.
type readOnlyStore struct{ memoryhook.Store }

func (readOnlyStore) Create(context.Context, memoryhook.Scope, memoryhook.Path, string) (string, error) {
	return "", memoryhook.Unavailable("read-only file system", os.ErrPermission)
}

func TestAFullOrReadOnlyStoreAnswersErrorResultsAndTheRequestCompletes(t *testing.T) {
	t.Run("over the tenant's byte limit", func(t *testing.T) {
		p := testPolicies()
		p["acme.yaml"] += "  limits:\n    max_total_bytes: 1000\n    max_file_bytes: 1000\n"
		h := newHarnessWith(t, nil, p)
		h.fake.SetResponder(fakeapi.Script(fakeapi.Blocks(fakeapi.MemoryCreate("/memories/big.md", strings.Repeat("x", 5000))), fakeapi.TextReply("ok")))
		resp := h.post("/v1/messages", keyAcme, simpleBody)
		if got := readAll(t, resp.Body); resp.StatusCode != 200 {
			t.Fatalf("status %d %s", resp.StatusCode, got)
		}
		res := gjson.GetBytes(h.lastUpstream("/v1/messages").Body, "messages.@reverse.0.content.0")
		if !res.Get("is_error").Bool() || !strings.Contains(res.Get("content").Str, "limit") {
			t.Fatalf("tool_result = %s", res.Raw)
		}
		if _, ok := h.memFile("acme", "big.md"); ok {
			t.Fatal("a file over the limit was written")
		}
	})
	t.Run("read-only", func(t *testing.T) {
		h := newHarness(t)
		h.srv.cfg.Memory = readOnlyStore{h.mem}
		h.fake.SetResponder(fakeapi.Script(fakeapi.Blocks(fakeapi.MemoryCreate("/memories/a.md", "x")), fakeapi.TextReply("ok")))
		resp := h.post("/v1/messages", keyAcme, simpleBody)
		if got := readAll(t, resp.Body); resp.StatusCode != 200 {
			t.Fatalf("status %d %s", resp.StatusCode, got)
		}
		res := gjson.GetBytes(h.lastUpstream("/v1/messages").Body, "messages.@reverse.0.content.0")
		if !res.Get("is_error").Bool() || !strings.HasPrefix(res.Get("content").Str, "Error: memory store unavailable") {
			t.Fatalf("tool_result = %s", res.Raw)
		}
		// The operator sees the outage too, with who and what.
		logged := h.logs.FilterMessage("memory store unavailable").All()
		if len(logged) != 1 {
			t.Fatalf("%d outage log lines, want 1", len(logged))
		}
		f := logged[0].ContextMap()
		if f["tenant"] != "acme" || f["command"] != "create" || f["error"] == nil {
			t.Fatalf("outage logged without tenant, command or cause: %v", f)
		}
	})
}

func TestHostileBodiesGetAClear4xxAndTheServerKeepsServing(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		status int
	}{
		{"truncated JSON", `{"model":"m","messages":[{"role":"user"`, 400},
		{"invalid UTF-8", "{\"model\":\"\xff\xfe\",\"max_tokens\":1,\"messages\":[]}", 400},
		{"duplicate top-level keys", `{"model":"m","max_tokens":1,"messages":[],"model":"n"}`, 400},
		{"100,000 levels of nesting", `{"model":"m","max_tokens":1,"messages":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`, 400},
		{"not JSON at all", "\x00\x01binary", 400},
	}
	h := newHarness(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.post("/v1/messages", keyAcme, tt.body)
			got := readAll(t, resp.Body)
			if resp.StatusCode != tt.status || gjson.Get(got, "type").Str != "error" || gjson.Get(got, "error.type").Str != "invalid_request_error" {
				t.Fatalf("status %d body %.300s", resp.StatusCode, got)
			}
			if n := len(h.fake.Requests()); n != 0 {
				t.Fatalf("the hostile body reached the upstream (%d requests)", n)
			}
		})
	}
	h.fake.Enqueue(fakeapi.TextReply("still here"))
	if got := readAll(t, h.post("/v1/messages", keyAcme, simpleBody).Body); !strings.Contains(got, "still here") {
		t.Fatalf("server stopped serving: %s", got)
	}
}

func TestAHugeDeclaredContentLengthIsRefusedAtOnce(t *testing.T) {
	h := newHarness(t)
	conn, err := net.Dial("tcp", h.proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: 2147483648\r\n\r\n{", keyAcme)
	var resp *http.Response
	eventually(t, "the 413", func() {
		resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 413 || gjson.GetBytes(body, "error.type").Str != "request_too_large" {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
}

func TestASlowBodyIsCutOffAndOthersAreServed(t *testing.T) {
	h := newHarness(t)
	hs := NewHTTPServer(h.srv, h.srv.log)
	hs.ReadTimeout = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\nContent-Length: 100\r\n\r\n{\"mo", keyAcme)
	// A fast client is served while the slow one dribbles.
	h.fake.Enqueue(fakeapi.TextReply("fast"))
	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/messages", strings.NewReader(simpleBody))
	req.Header.Set("X-Api-Key", keyAcme)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp.Body); !strings.Contains(got, "fast") {
		t.Fatalf("fast client got %s", got)
	}
	eventually(t, "the slow client being cut off", func() {
		buf := make([]byte, 4096)
		for {
			if _, err := conn.Read(buf); err != nil {
				return
			}
		}
	})
}

func TestTenantKeysNeverReachAnotherTenantsPolicy(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct{ key, tenant, header string }{
		{keyAcme, "acme", "X-Api-Key"},
		{keyBeta, "beta", "X-Api-Key"},
		{keyAcme, "acme", "Authorization"},
		{keyOther, "default", "X-Api-Key"},
	} {
		h.logs.TakeAll()
		req, _ := http.NewRequest(http.MethodPost, h.proxy.URL+"/v1/messages", strings.NewReader(simpleBody))
		req.Header.Set("Anthropic-Version", "2023-06-01")
		if tc.header == "Authorization" {
			req.Header.Set("Authorization", "Bearer "+tc.key)
		} else {
			req.Header.Set("X-Api-Key", tc.key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp.Body)
		logged := h.logs.FilterMessage("request").All()
		if len(logged) != 1 || logged[0].ContextMap()["tenant"] != tc.tenant {
			t.Fatalf("key for %s via %s served as %v", tc.tenant, tc.header, logged)
		}
		up := h.lastUpstream("/v1/messages")
		if got := apikey.From(up.Header); got != tc.key {
			t.Fatalf("upstream got key %q, want the client's own", got)
		}
	}
}
