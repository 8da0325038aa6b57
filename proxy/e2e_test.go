package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
)

const simpleBody = `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`

const thinkingBody = `{"model":"claude-sonnet-4-5","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`

func TestMessagesAreRewrittenAndRelayed(t *testing.T) {
	h := newHarness(t)
	h.fake.Enqueue(fakeapi.TextReply("hello there"))
	resp := h.post("/v1/messages", keyAcme, thinkingBody, "Anthropic-Beta", "files-api-2025-04-14")
	body := readAll(t, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got := gjson.Get(body, "content.0.text").Str; got != "hello there" {
		t.Fatalf("reply text = %q; body %s", got, body)
	}
	if resp.Header.Get("Request-Id") == "" {
		t.Error("the upstream's request-id did not come back")
	}
	up := h.lastUpstream("/v1/messages")
	if got := up.Header.Get("Anthropic-Beta"); got != "files-api-2025-04-14,context-management-2025-06-27" {
		t.Errorf("upstream anthropic-beta = %q", got)
	}
	edits := gjson.GetBytes(up.Body, "context_management.edits.#.type").String()
	if edits != `["clear_thinking_20251015","clear_tool_uses_20250919"]` {
		t.Errorf("upstream edits = %s", edits)
	}
	if ex := gjson.GetBytes(up.Body, "context_management.edits.1.exclude_tools").String(); ex != `["web_search","memory"]` {
		t.Errorf("exclude_tools = %s", ex)
	}
	if tools := gjson.GetBytes(up.Body, "tools").Raw; tools != `[{"type":"memory_20250818","name":"memory"}]` {
		t.Errorf("tools = %s", tools)
	}
}

func TestRepliesAreRelayedByteForByte(t *testing.T) {
	h := newHarness(t)
	h.fake.Enqueue(fakeapi.TextReply("caf\u00e9 \u2603"))
	resp := h.post("/v1/messages", keyOther, simpleBody)
	got := readAll(t, resp.Body)
	// The fake records what it sent; the proxy must not re-encode it.
	want := h.lastUpstream("/v1/messages")
	if resp.StatusCode != 200 || !gjson.Valid(got) || gjson.Get(got, "id").Str != want.ReplyID {
		t.Fatalf("status %d body %s (reply id %s)", resp.StatusCode, got, want.ReplyID)
	}
	if gjson.Get(got, "content.0.text").Str != "caf\u00e9 \u2603" {
		t.Fatalf("text changed: %s", got)
	}
}

func TestProxyErrorsHaveTheAPIShape(t *testing.T) {
	tests := []struct {
		name    string
		opts    []harnessOpt
		key     string
		body    string
		status  int
		errType string
		msgHas  string
	}{
		{"malformed JSON is a 400 that says where", nil, keyAcme, `{"model":"x",`, 400, "invalid_request_error", "line 1"},
		{"a body that is not an object is a 400", nil, keyAcme, `[1,2]`, 400, "invalid_request_error", ""},
		{"a body over --max-body is a 413", []harnessOpt{func(c *Config) { c.MaxBody = 64 }}, keyAcme, simpleBody, 413, "request_too_large", "limit"},
		{"an unknown tenant is a 401 with --require-known-tenant", []harnessOpt{func(c *Config) { c.RequireKnownTenant = true }}, keyOther, simpleBody, 401, "authentication_error", "tenant"},
		{"a client tool named memory of another type is a 400", nil, keyAcme, `{"model":"m","max_tokens":1,"tools":[{"name":"memory","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error", "memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.opts...)
			resp := h.post("/v1/messages", tt.key, tt.body)
			body := readAll(t, resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content-type = %q", ct)
			}
			if gjson.Get(body, "type").Str != "error" || gjson.Get(body, "error.type").Str != tt.errType {
				t.Errorf("body = %s, want error type %s", body, tt.errType)
			}
			if !strings.Contains(gjson.Get(body, "error.message").Str, tt.msgHas) {
				t.Errorf("message %q does not mention %q", gjson.Get(body, "error.message").Str, tt.msgHas)
			}
			if len(h.fake.Requests()) != 0 {
				t.Error("a rejected request reached the upstream")
			}
		})
	}
}

func TestUpstreamFailuresHaveTheAPIShape(t *testing.T) {
	t.Run("an unreachable upstream is a 502 api_error", func(t *testing.T) {
		h := newHarness(t)
		h.upstream.Close() // nothing listens there now
		resp := h.post("/v1/messages", keyAcme, simpleBody)
		body := readAll(t, resp.Body)
		if resp.StatusCode != 502 || gjson.Get(body, "error.type").Str != "api_error" {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
	})
	t.Run("an upstream slower than --upstream-timeout is a 504 timeout_error", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.UpstreamTimeout = 50 * time.Millisecond })
		h.fake.Enqueue(fakeapi.Reply{Delay: 2 * time.Second})
		resp := h.post("/v1/messages", keyAcme, simpleBody)
		body := readAll(t, resp.Body)
		if resp.StatusCode != 504 || gjson.Get(body, "error.type").Str != "timeout_error" {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
	})
	t.Run("upstream errors are relayed unchanged with their headers", func(t *testing.T) {
		h := newHarness(t)
		h.fake.Enqueue(fakeapi.RateLimited("7"))
		resp := h.post("/v1/messages", keyAcme, simpleBody)
		body := readAll(t, resp.Body)
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "7" || gjson.Get(body, "error.type").Str != "rate_limit_error" {
			t.Fatalf("status %d retry-after %q body %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	})
	t.Run("the upstream's own validation errors come back as they were", func(t *testing.T) {
		h := newHarness(t)
		resp := h.post("/v1/messages", keyOther, `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":"x"}]}`)
		body := readAll(t, resp.Body)
		if resp.StatusCode != 400 || gjson.Get(body, "error.type").Str != "invalid_request_error" {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
	})
}

func TestCountTokensIsRewrittenToo(t *testing.T) {
	h := newHarness(t)
	body := `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`
	resp := h.post("/v1/messages/count_tokens", keyAcme, body)
	got := readAll(t, resp.Body)
	if resp.StatusCode != 200 || !gjson.Get(got, "input_tokens").Exists() {
		t.Fatalf("status %d body %s", resp.StatusCode, got)
	}
	up := h.lastUpstream("/v1/messages/count_tokens")
	if !gjson.GetBytes(up.Body, "context_management.edits").Exists() {
		t.Errorf("count_tokens went up without the tenant's edits: %s", up.Body)
	}
	if !strings.Contains(up.Header.Get("Anthropic-Beta"), "context-management-2025-06-27") {
		t.Errorf("count_tokens went up without the beta")
	}
}

func TestOtherRoutesPassThroughUntouched(t *testing.T) {
	h := newHarness(t)
	req, _ := http.NewRequest(http.MethodGet, h.proxy.URL+"/v1/models?limit=5&after_id=x", nil)
	req.Header.Set("X-Api-Key", keyAcme)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("X-Custom", "kept")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp.Body)
	if resp.StatusCode != 200 || !gjson.Valid(body) {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	up := h.lastUpstream("/v1/models")
	if up.Method != "GET" || up.RawQuery != "limit=5&after_id=x" || up.Header.Get("X-Custom") != "kept" || up.Header.Get("X-Api-Key") != keyAcme {
		t.Fatalf("upstream saw %s %s?%s headers %v", up.Method, up.Path, up.RawQuery, up.Header)
	}
	if up.Header.Get("Anthropic-Beta") != "" {
		t.Error("passthrough added a beta header")
	}
	if resp.Header.Get("Request-Id") == "" {
		t.Error("request-id was not relayed")
	}
}

func TestRoutesMatchWhateverTheQuery(t *testing.T) {
	h := newHarness(t)
	resp := h.post("/v1/messages?beta=true", keyAcme, simpleBody)
	readAll(t, resp.Body)
	up := h.lastUpstream("/v1/messages")
	if up.RawQuery != "beta=true" || !gjson.GetBytes(up.Body, "context_management").Exists() {
		t.Fatalf("?beta=true request was not rewritten or lost its query: %q %s", up.RawQuery, up.Body)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	h := newHarness(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(h.proxy.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp.Body)
		if resp.StatusCode != 200 {
			t.Errorf("%s = %d %s", path, resp.StatusCode, body)
		}
	}
}

func TestPolicyReloadAppliesToTheNextRequest(t *testing.T) {
	h := newHarness(t)
	p := testPolicies()
	p["acme.yaml"] = strings.Replace(p["acme.yaml"], "value: 30000", "value: 12345", 1)
	writePolicies(t, h.polDir, map[string]string{"acme.yaml": p["acme.yaml"]})
	if err := h.pols.Reload(); err != nil {
		t.Fatal(err)
	}
	readAll(t, h.post("/v1/messages", keyAcme, simpleBody).Body)
	if v := gjson.GetBytes(h.lastUpstream("/v1/messages").Body, "context_management.edits.0.trigger.value").Int(); v != 12345 {
		t.Fatalf("trigger after reload = %d, want 12345", v)
	}
	// A broken file is refused and the last good set stays in force.
	writePolicies(t, h.polDir, map[string]string{"acme.yaml": "tenant: acme\nbogus: 1\n"})
	if err := h.pols.Reload(); err == nil {
		t.Fatal("a broken policy file was accepted")
	}
	readAll(t, h.post("/v1/messages", keyAcme, simpleBody).Body)
	if v := gjson.GetBytes(h.lastUpstream("/v1/messages").Body, "context_management.edits.0.trigger.value").Int(); v != 12345 {
		t.Fatalf("trigger after a failed reload = %d, want the last good 12345", v)
	}
}

func TestLogLinesNeverCarryTheKey(t *testing.T) {
	h := newHarness(t)
	readAll(t, h.post("/v1/messages", keyAcme, simpleBody).Body)
	entries := h.logs.FilterMessage("request").All()
	if len(entries) != 1 {
		t.Fatalf("%d request log lines, want 1", len(entries))
	}
	f := entries[0].ContextMap()
	if f["tenant"] != "acme" || f["model"] != "claude-sonnet-4-5" || f["status"] != int64(200) {
		t.Errorf("log fields = %v", f)
	}
	if f["key"] != sha(keyAcme)[:8] {
		t.Errorf("key field = %v, want the first 8 hex of its sha256", f["key"])
	}
	for _, e := range h.logs.All() {
		for k, v := range e.ContextMap() {
			if s, ok := v.(string); ok && strings.Contains(s, keyAcme) {
				t.Errorf("log %q field %s carries the API key", e.Message, k)
			}
		}
	}
}

// A hand-written upstream that streams one event and then waits, so the test
// can prove the proxy relays events as they arrive, not at the end.
func TestStreamEventsReachTheClientBeforeTheUpstreamFinishes(t *testing.T) {
	release := make(chan struct{})
	upstreamDone := make(chan struct{})
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(upstreamDone)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	})
	h := newHarnessWith(t, up, testPolicies())
	resp := h.post("/v1/messages", keyAcme, `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	eventually(t, "the first event reaching the client", func() {
		line, _ := br.ReadString('\n')
		if line != "event: message_start\n" {
			t.Errorf("first line = %q", line)
		}
	})
	select {
	case <-upstreamDone:
		t.Fatal("the upstream finished before the client saw the first event")
	default:
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "event: message_stop") {
		t.Fatalf("stream did not end with message_stop: %s", rest)
	}
}

func TestClientDisconnectCancelsTheUpstream(t *testing.T) {
	cancelled := make(chan struct{})
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		io.WriteString(w, "event: ping\ndata: {\"type\":\"ping\"}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(cancelled)
	})
	h := newHarnessWith(t, up, testPolicies())
	ctx, cancel := context.WithCancel(context.Background())
	resp := h.postCtx(ctx, "/v1/messages", keyAcme, `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	br := bufio.NewReader(resp.Body)
	br.ReadString('\n')
	cancel()
	resp.Body.Close()
	eventually(t, "the upstream request being cancelled", func() { <-cancelled })
}

func TestStreamsAreRelayedWhole(t *testing.T) {
	h := newHarness(t)
	h.fake.Enqueue(fakeapi.Blocks(fakeapi.Thinking("let me think", "sig1"), fakeapi.Text("the answer")))
	resp := h.post("/v1/messages", keyAcme, strings.Replace(thinkingBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1))
	body := readAll(t, resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d type %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	names := eventNames(body)
	if names[0] != "message_start" || names[len(names)-1] != "message_stop" || names[len(names)-2] != "message_delta" {
		t.Fatalf("event order = %v", names)
	}
	msg := accumulate(t, body)
	if gjson.Get(msg, "content.1.text").Str != "the answer" || gjson.Get(msg, "content.0.signature").Str != "sig1" {
		t.Fatalf("accumulated message = %s", msg)
	}
}

func TestAnUpstreamCutMidStreamEndsWithAnErrorEvent(t *testing.T) {
	h := newHarness(t)
	h.fake.Enqueue(fakeapi.Reply{Content: fakeapi.TextReply("a b c d e f").Content, CutAfter: 3})
	resp := h.post("/v1/messages", keyAcme, `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	body := readAll(t, resp.Body)
	names := eventNames(body)
	if names[len(names)-1] != "error" {
		t.Fatalf("events = %v, want a final error event", names)
	}
	if !strings.Contains(body, `"type":"error","error":{"type":"api_error"`) {
		t.Fatalf("error event not in the API's shape: %s", body)
	}
}

func TestAStreamIdlePastTheTimeoutEndsWithATimeoutError(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.StreamIdleTimeout = 100 * time.Millisecond })
	h.fake.Enqueue(fakeapi.Reply{Content: fakeapi.TextReply("slow").Content, EventDelay: 3 * time.Second})
	resp := h.post("/v1/messages", keyAcme, `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	body := readAll(t, resp.Body)
	if !strings.Contains(body, "event: error") || !strings.Contains(body, `"timeout_error"`) {
		t.Fatalf("body = %s", body)
	}
}

func TestWithoutADefaultPolicyUnknownClientsGoUpUntouched(t *testing.T) {
	p := testPolicies()
	delete(p, "default.yaml")
	h := newHarnessWith(t, nil, p)
	body := `{"model":"m","max_tokens":5,  "messages":[{"role":"user","content":"hi"}]}`
	readAll(t, h.post("/v1/messages", keyOther, body).Body)
	up := h.lastUpstream("/v1/messages")
	if string(up.Body) != body || up.Header.Get("Anthropic-Beta") != "" {
		t.Fatalf("upstream got %s with beta %q, want the body untouched", up.Body, up.Header.Get("Anthropic-Beta"))
	}
	// It is still validated.
	resp := h.post("/v1/messages", keyOther, `{"model":"m","model":"n"}`)
	if got := readAll(t, resp.Body); resp.StatusCode != 400 {
		t.Fatalf("duplicate key without a policy: %d %s", resp.StatusCode, got)
	}
}

// Streams and plain replies read to their end hand the upstream connection
// back to the pool: a run of requests needs one connection, not one each.
// Compressed streams are the case that needs care: bytes of the coding
// remain after message_stop.
func TestUpstreamConnectionsAreReused(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			h := newHarness(t)
			h.fake.SetOptions(fakeapi.Options{Compress: true})
			var conns atomic.Int32
			srv := httptest.NewUnstartedServer(h.fake)
			srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			h.srv.up.base, _ = url.Parse(srv.URL)
			body := simpleBody
			if stream {
				body = withStream(body)
			}
			for range 20 {
				resp := h.post("/v1/messages", keyAcme, body, "Accept-Encoding", "zstd")
				if got := readAll(t, resp.Body); resp.StatusCode != 200 {
					t.Fatalf("status %d %s", resp.StatusCode, got)
				}
			}
			if n := conns.Load(); n > 3 {
				t.Fatalf("%d upstream connections for 20 sequential requests", n)
			}
		})
	}
}
