package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ctxproxy/ctxproxy/tokens"
)

// rawRequest sends a request with exactly this request-target (no client
// normalisation of the path) and returns the status and body.
func rawRequest(t *testing.T, base, method, target, key, body string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAnthropic-Version: 2023-06-01\r\nContent-Type: application/json\r\n", method, target)
	if key != "" {
		fmt.Fprintf(conn, "X-Api-Key: %s\r\n", key)
	}
	fmt.Fprintf(conn, "Content-Length: %d\r\n\r\n%s", len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

func isAPIError(body, typ string) bool {
	return gjson.Get(body, "type").Str == "error" && gjson.Get(body, "error.type").Str == typ &&
		gjson.Get(body, "error.message").Str != ""
}

func TestMessagesInOtherSpellingsAreServedWithThePolicyOrRefused(t *testing.T) {
	tests := []struct {
		target string
		served bool // else refused with a 404 in the API's shape
	}{
		{"/v1/messages/", true},
		{"//v1/messages", true},
		{"/v1//messages", true},
		{"/v1/./messages", true},
		{"/v1/models/../messages", true},
		{"/v1/%6Dessages", true},
		{"/v1/%256Dessages", true}, // encoded twice
		{"/v1%2Fmessages", true},
		{"/V1/Messages", true},
		{"/v1/MESSAGES?beta=true", true},
		{`/v1\messages`, true},
		{"/v1/messages/count_tokens/", true},
		{"/v1/messages;x", false},
		{"/v1/messages.json", false},
		{"/v1/messages%00", false},
		{"/v1/messages/other", false},
		{"/v1/messages/batches/msgbatch_1/unknown", false},
	}
	for _, tc := range tests {
		name := "served with the policy: " + tc.target
		if !tc.served {
			name = "refused with 404: " + tc.target
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			status, body := rawRequest(t, h.proxy.URL, http.MethodPost, tc.target, keyAcme, simpleBody)
			ups := h.fake.Requests()
			if !tc.served {
				if status != http.StatusNotFound || !isAPIError(body, "not_found_error") {
					t.Fatalf("status %d %s, want a 404 not_found_error", status, body)
				}
				if len(ups) != 0 {
					t.Fatalf("a refused path reached the upstream as %s", ups[0].Path)
				}
				return
			}
			if status != 200 || len(ups) != 1 {
				t.Fatalf("status %d %s; upstream saw %d requests", status, body, len(ups))
			}
			want := "/v1/messages"
			if strings.Contains(strings.ToLower(tc.target), "count_tokens") {
				want = "/v1/messages/count_tokens"
			}
			up := ups[0]
			if up.Path != want || !gjson.GetBytes(up.Body, "context_management").Exists() ||
				!strings.Contains(up.Header.Get("Anthropic-Beta"), "context-management-2025-06-27") {
				t.Fatalf("upstream saw %s without the policy applied: %s", up.Path, up.Body)
			}
		})
	}
}

func TestMessagesRefuseOtherMethods(t *testing.T) {
	h := newHarness(t)
	status, body := rawRequest(t, h.proxy.URL, http.MethodGet, "/v1/messages/", keyAcme, simpleBody)
	if status != http.StatusMethodNotAllowed || !isAPIError(body, "invalid_request_error") {
		t.Fatalf("status %d %s", status, body)
	}
	if n := len(h.fake.Requests()); n != 0 {
		t.Fatalf("upstream saw %d requests", n)
	}
}

func TestRequireKnownTenantCoversEveryUpstreamRoute(t *testing.T) {
	batch := `{"requests":[{"custom_id":"a","params":` + simpleBody + `}]}`
	tests := []struct{ method, target, body string }{
		{"POST", "/v1/messages", simpleBody},
		{"POST", "/v1/messages/", simpleBody},
		{"POST", "/v1/messages/count_tokens", simpleBody},
		{"POST", "/v1/messages/batches", batch},
		{"GET", "/v1/messages/batches", ""},
		{"GET", "/v1/messages/batches/msgbatch_01abc", ""},
		{"POST", "/v1/messages/batches/msgbatch_01abc/cancel", ""},
		{"GET", "/v1/models", ""},
		{"POST", "/v1/files", "x"},
	}
	h := newHarness(t, func(c *Config) { c.RequireKnownTenant = true })
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target+" with an unknown key is 401", func(t *testing.T) {
			status, body := rawRequest(t, h.proxy.URL, tc.method, tc.target, keyOther, tc.body)
			if status != http.StatusUnauthorized || !isAPIError(body, "authentication_error") {
				t.Fatalf("status %d %s", status, body)
			}
		})
	}
	if n := len(h.fake.Requests()); n != 0 {
		t.Fatalf("upstream saw %d requests from an unknown key", n)
	}
	t.Run("a known key still passes through", func(t *testing.T) {
		status, body := rawRequest(t, h.proxy.URL, "GET", "/v1/models", keyAcme, "")
		if status != 200 {
			t.Fatalf("status %d %s", status, body)
		}
	})
}

func TestPassthroughGetsALogLine(t *testing.T) {
	h := newHarness(t)
	status, _ := rawRequest(t, h.proxy.URL, "GET", "/v1/models", keyAcme, "")
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	// The line is written once the handler returns, which may be after the
	// client has read the whole reply: wait for it (a hang guard, not a
	// deadline the test depends on).
	var logs []observer.LoggedEntry
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if logs = h.logs.FilterMessage("request").FilterField(zap.Bool("passthrough", true)).All(); len(logs) > 0 {
			break
		}
	}
	if len(logs) != 1 {
		t.Fatalf("%d passthrough request lines", len(logs))
	}
	f := logs[0].ContextMap()
	if f["tenant"] != "acme" || f["path"] != "/v1/models" || f["status"] != int64(200) || f["method"] != "GET" {
		t.Fatalf("log line %v", f)
	}
}

func TestBatchesGetThePolicyInEachParams(t *testing.T) {
	batch := `{"requests":[{"custom_id":"first","params":` + simpleBody + `},{"custom_id":"second","params":` + thinkingBody + `}]}`
	t.Run("each params is rewritten, the memory tool is not added in proxy mode", func(t *testing.T) {
		h := newHarness(t)
		resp := h.post("/v1/messages/batches", keyAcme, batch)
		body := readAll(t, resp.Body)
		if resp.StatusCode != 200 || gjson.Get(body, "type").Str != "message_batch" {
			t.Fatalf("status %d %s", resp.StatusCode, body)
		}
		up := h.lastUpstream("/v1/messages/batches")
		if !strings.Contains(up.Header.Get("Anthropic-Beta"), "context-management-2025-06-27") {
			t.Fatal("batch went up without the beta")
		}
		reqs := gjson.GetBytes(up.Body, "requests").Array()
		if len(reqs) != 2 {
			t.Fatalf("upstream batch %s", up.Body)
		}
		if got := reqs[1].Get("params.context_management.edits.#.type").Raw; got != `["clear_thinking_20251015","clear_tool_uses_20250919"]` {
			t.Errorf("second params edits %s", got)
		}
		for i, r := range reqs {
			if !strings.Contains(r.Get("params.context_management.edits.#(type==\"clear_tool_uses_20250919\").exclude_tools").Raw, `"memory"`) {
				t.Errorf("requests[%d]: memory not excluded from clearing: %s", i, r.Raw)
			}
			if r.Get("params.tools").Exists() {
				t.Errorf("requests[%d]: a tool was added in proxy mode: %s", i, r.Get("params.tools").Raw)
			}
		}
	})
	t.Run("a batch the policy refuses is a 400 naming the custom_id", func(t *testing.T) {
		h := newHarness(t)
		bad := `{"model":"claude-sonnet-4-5","max_tokens":1,"messages":[{"role":"user","content":"x"}],"context_management":{"edits":{}}}`
		resp := h.post("/v1/messages/batches", keyAcme, `{"requests":[{"custom_id":"ok-1","params":`+simpleBody+`},{"custom_id":"bad-2","params":`+bad+`}]}`)
		body := readAll(t, resp.Body)
		if resp.StatusCode != 400 || !isAPIError(body, "invalid_request_error") ||
			!strings.Contains(gjson.Get(body, "error.message").Str, `custom_id "bad-2"`) {
			t.Fatalf("status %d %s", resp.StatusCode, body)
		}
		if n := len(h.fake.Requests()); n != 0 {
			t.Fatalf("a refused batch reached the upstream")
		}
	})
}

func TestCountTokensIsInTheLedger(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.jsonl")
	ledger, err := tokens.OpenLedger(t.Context(), "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close()
	rec := tokens.NewRecorder(nil, nil, ledger, nil)
	h := newHarness(t, func(c *Config) { c.Recorder = rec })
	resp := h.post("/v1/messages/count_tokens", keyAcme, `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"`+strings.Repeat("word ", 2000)+`"}]}`)
	body := readAll(t, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	if err := rec.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(string(raw))
	if strings.Count(line, "\n") != 0 {
		t.Fatalf("want one ledger line, got %s", raw)
	}
	l := gjson.Parse(line)
	if l.Get("endpoint").Str != "count_tokens" || l.Get("tenant").Str != "acme" ||
		l.Get("count_tokens.input_tokens").Int() != gjson.Get(body, "input_tokens").Int() ||
		l.Get("count_tokens.input_tokens").Int() == 0 ||
		l.Get("count_tokens.context_management.original_input_tokens").Int() != gjson.Get(body, "context_management.original_input_tokens").Int() ||
		!l.Get("count_tokens.context_management.original_input_tokens").Exists() {
		t.Fatalf("ledger line %s for reply %s", line, body)
	}
	if l.Get("cost_usd").Float() != 0 || l.Get("usage.input_tokens").Int() != 0 || l.Get("price_unknown").Bool() {
		t.Fatalf("a count was billed: %s", line)
	}
	calls, err := ledger.Query(t.Context(), tokens.Filter{})
	if err != nil || len(calls) != 1 || calls[0].CountTokens == nil {
		t.Fatalf("ledger read back %+v %v", calls, err)
	}
	if rep := tokens.BuildReport(calls, tokens.GroupByModel); len(rep.Rows) != 0 {
		t.Fatalf("a count is in the cost report: %+v", rep.Rows)
	}
}

// A client given the wrong base URL gets a 404 that says what to set, and
// nothing reaches the upstream unrewritten.
func TestAWrongBaseURLIsToldWhatToSet(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name, path, want string
	}{
		{"without /v1 where the client wants it (the Vercel AI SDK)", "/messages", "(http://HOST:PORT/v1)"},
		{"count_tokens without /v1", "/messages/count_tokens", "(http://HOST:PORT/v1)"},
		{"with /v1 where the client adds it (the official SDKs)", "/v1/v1/messages", "without /v1"},
		{"with /v1 for any other route", "/v1/v1/models", "without /v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := rawRequest(t, h.proxy.URL, http.MethodPost, tc.path, keyAcme, simpleBody)
			if status != http.StatusNotFound || !isAPIError(body, "not_found_error") ||
				!strings.Contains(body, "ANTHROPIC_BASE_URL") && !strings.Contains(body, "base URL") || !strings.Contains(body, tc.want) {
				t.Fatalf("%d %s", status, body)
			}
		})
	}
	if n := len(h.fake.Requests()); n != 0 {
		t.Fatalf("upstream saw %d requests", n)
	}
}
