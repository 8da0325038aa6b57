package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/policy"
)

const (
	keyLead  = "sk-ant-test-lead"
	keyPlain = "sk-ant-test-plain"
)

// leadPolicies: lead injects the memory tool and enforces edits (its bodies are forwarded while
// they arrive); default adds edits only when the client sends none, without the memory tool;
// plain changes nothing.
func leadPolicies() map[string]string {
	return map[string]string{
		"default.yaml": "tenant: default\ncontext_management:\n  mode: default\n  clear_tool_uses: {}\nmemory:\n  mode: off\n",
		"plain.yaml":   "tenant: plain\napi_keys_sha256: [\"" + sha(keyPlain) + "\"]\ncontext_management:\n  mode: off\nmemory:\n  mode: off\n",
		"lead.yaml": "tenant: lead\napi_keys_sha256: [\"" + sha(keyLead) + "\"]\ncontext_management:\n  mode: enforce\n" +
			"  clear_tool_uses: {trigger: {type: input_tokens, value: 30000}}\nmemory:\n  mode: inject\n",
	}
}

// arrivals counts the upstream requests that reached the fake, whole or not.
type arrivals struct {
	api *fakeapi.API
	all atomic.Int64
}

func (a *arrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.all.Add(1)
	a.api.ServeHTTP(w, r)
}

// led reports whether the last request's log line says its body went upstream while it arrived.
func (h *harness) led() bool {
	h.t.Helper()
	lines := h.logs.FilterMessage("request").All()
	if len(lines) == 0 {
		h.t.Fatal("no request log line")
	}
	led, ok := lines[len(lines)-1].ContextMap()["forwarded_while_reading"].(bool)
	if !ok {
		h.t.Fatal("the request log line has no forwarded_while_reading")
	}
	return led
}

// waitFor polls cond until it holds.
func waitFor(cond func() bool) {
	for !cond() {
		time.Sleep(time.Millisecond)
	}
}

func newLeadHarness(t *testing.T, opts ...harnessOpt) (*harness, *arrivals) {
	return newLeadHarnessWith(t, leadPolicies(), opts...)
}

func newLeadHarnessWith(t *testing.T, pols map[string]string, opts ...harnessOpt) (*harness, *arrivals) {
	a := &arrivals{api: fakeapi.New()}
	h := newHarnessWith(t, a, pols, append([]harnessOpt{func(c *Config) { c.ForwardWhileReading = true }}, opts...)...)
	h.fake = a.api
	return h, a
}

// transcriptBody is a ~400 KiB transcript with tools before or after messages.
func transcriptBody(toolsFirst bool, tail string) string {
	var msgs strings.Builder
	msgs.WriteString(`"messages":[{"role":"user","content":"start"}`)
	out := strings.Repeat(`line \"quoted\" [x] {y}\n`, 200)
	for i := range 80 {
		fmt.Fprintf(&msgs, `,{"role":"assistant","content":[{"type":"tool_use","id":"toolu_%03d","name":"read","input":{}}]}`, i)
		fmt.Fprintf(&msgs, `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%03d","content":"%s"}]}`, i, out)
	}
	msgs.WriteString(`]`)
	tools := `"tools":[{"name":"read","input_schema":{"type":"object"}}]`
	if toolsFirst {
		return `{"model":"claude-sonnet-4-5","max_tokens":64,` + tools + `,` + msgs.String() + tail + `}`
	}
	return `{"max_tokens":64,` + msgs.String() + `,"model":"claude-sonnet-4-5",` + tools + tail + `}`
}

func TestForwardWhileReading(t *testing.T) {
	for _, tc := range []struct {
		name, key, path, body string
	}{
		{"tools after messages: the memory tool and edits are added at the end", keyLead, "/v1/messages", transcriptBody(false, "")},
		{"tools before messages: the memory tool goes ahead with them", keyLead, "/v1/messages", transcriptBody(true, "")},
		{"count_tokens is forwarded the same way", keyLead, "/v1/messages/count_tokens", transcriptBody(true, "")},
		{"a tenant adding edits but not the memory tool", "sk-ant-unknown", "/v1/messages", transcriptBody(false, `,"stream":false`)},
		{"a tenant changing nothing", keyPlain, "/v1/messages", transcriptBody(true, "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.body) < minLeadBody {
				t.Fatalf("body of %d bytes is too small to be led", len(tc.body))
			}
			// The same request through a proxy that reads bodies whole (the default): what the
			// upstream must get.
			hb := newHarnessWith(t, nil, leadPolicies())
			resp := hb.post(tc.path, tc.key, tc.body)
			if b := readAll(t, resp.Body); resp.StatusCode != 200 {
				t.Fatalf("buffered: %d %s", resp.StatusCode, b)
			}
			want := hb.lastUpstream(tc.path)
			if hb.led() {
				t.Fatal("with ForwardWhileReading off (the default) a body went while it arrived")
			}

			h, a := newLeadHarness(t)
			for i := range 3 { // the first sets the tenant's shape, the others go with it
				resp := h.post(tc.path, tc.key, tc.body)
				if b := readAll(t, resp.Body); resp.StatusCode != 200 {
					t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
				}
				got := h.lastUpstream(tc.path)
				if string(got.Body) != string(want.Body) {
					t.Fatalf("request %d: the upstream got a body of %d bytes, the buffered proxy sends %d", i, len(got.Body), len(want.Body))
				}
				if g, w := got.Header.Get("Anthropic-Beta"), want.Header.Get("Anthropic-Beta"); g != w {
					t.Fatalf("request %d: anthropic-beta %q, buffered %q", i, g, w)
				}
				if led := h.led(); led != (i > 0) {
					t.Fatalf("request %d: forwarded while reading %v, want %v", i, led, i > 0)
				}
			}
			if n, all := len(h.fake.Requests()), a.all.Load(); n != 3 || all != 3 {
				t.Fatalf("%d requests recorded, %d arrived: want 3 and 3", n, all)
			}
		})
	}
}

func TestForwardWhileReadingSendsAgainOnAnotherShape(t *testing.T) {
	h, _ := newLeadHarness(t)
	// The plain tenant's body needs the context-management beta only when it carries
	// context_management: the first needs none, so the second's upload starts without it, and
	// is cut and sent again once its end shows it needs it.
	cm := `,"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]}`
	for i, body := range []string{transcriptBody(false, ""), transcriptBody(false, cm), transcriptBody(false, cm)} {
		resp := h.post("/v1/messages", keyPlain, body)
		if b := readAll(t, resp.Body); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
		got := h.lastUpstream("/v1/messages")
		if hasBeta := strings.Contains(got.Header.Get("Anthropic-Beta"), policy.BetaContextManagement); hasBeta != (i > 0) {
			t.Fatalf("request %d reached the upstream with anthropic-beta %q", i, got.Header.Get("Anthropic-Beta"))
		}
		if string(got.Body) != body {
			t.Fatalf("request %d: the upstream got a body of %d bytes, the client sent %d", i, len(got.Body), len(body))
		}
		if led := h.led(); led != (i == 2) {
			t.Fatalf("request %d: forwarded while reading %v; want only the third", i, led)
		}
	}
	if n := len(h.fake.Requests()); n != 3 {
		t.Fatalf("%d requests recorded, want 3", n)
	}
}

// postInTwo sends body through the proxy, its last quarter only once the upstream has had
// arrived requests: the proxy has begun forwarding before it sees the end of the body.
func postInTwo(t *testing.T, h *harness, a *arrivals, arrived int64, key, body string) (*http.Response, string) {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, h.proxy.URL+"/v1/messages", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("X-Api-Key", key)
	go func() {
		cut := len(body) * 3 / 4
		if _, err := io.WriteString(pw, body[:cut]); err != nil {
			return
		}
		waitFor(func() bool { return a.all.Load() >= arrived })
		io.WriteString(pw, body[cut:])
		pw.Close()
	}()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp, readAll(t, resp.Body)
}

// shapeTenant sends the lead tenant's first large body, which sets the shape the next go with.
func shapeTenant(t *testing.T, h *harness) {
	t.Helper()
	resp := h.post("/v1/messages", keyLead, transcriptBody(false, ""))
	if b := readAll(t, resp.Body); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

func TestForwardWhileReadingCutsRefusedBodies(t *testing.T) {
	for _, tc := range []struct {
		name, tail, want string
	}{
		{"invalid JSON at the end", `,"model":tru`, "invalid"},
		{"a key given twice after messages", `,"max_tokens":5`, "more than once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, a := newLeadHarness(t)
			shapeTenant(t, h)
			resp, b := postInTwo(t, h, a, 2, keyLead, transcriptBody(false, tc.tail))
			if resp.StatusCode != 400 || !strings.Contains(b, tc.want) || gjson.Get(b, "type").Str != "error" {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			if n := len(h.fake.Requests()); n != 1 {
				t.Fatalf("the upstream recorded %d requests, want only the first: a refused body's upload was not cut", n)
			}
		})
	}
}

// The tenant's limits see a body only once it has all arrived; one they refuse is cut like one
// the rewrite refuses, so the upstream never has a request it would answer and bill.
func TestForwardWhileReadingCutsABodyItsLimitsRefuse(t *testing.T) {
	pols := leadPolicies()
	pols["lead.yaml"] += "limits:\n  requests_per_minute: 1\n"
	e := limits.New(limits.Config{Spend: limits.NewMemoryStore(), Rate: limits.NewMemoryRate()})
	h, a := newLeadHarnessWith(t, pols, func(c *Config) { c.Limits = e })
	shapeTenant(t, h) // the minute's one request
	resp, b := postInTwo(t, h, a, 2, keyLead, transcriptBody(false, ""))
	if resp.StatusCode != http.StatusTooManyRequests || gjson.Get(b, "error.type").Str != "rate_limit_error" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if n := len(h.fake.Requests()); n != 1 {
		t.Fatalf("the upstream recorded %d requests, want only the first: the refused body's upload was not cut", n)
	}
}

func TestForwardWhileReadingClientGoesAway(t *testing.T) {
	h, a := newLeadHarness(t)
	shapeTenant(t, h)
	body := transcriptBody(false, "")
	c, err := net.Dial("tcp", strings.TrimPrefix(h.proxy.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Api-Key: %s\r\n"+
		"Anthropic-Version: 2023-06-01\r\nContent-Length: %d\r\n\r\n%s", keyLead, len(body), body[:len(body)*3/4])
	eventually(t, "the upload's arrival upstream", func() { waitFor(func() bool { return a.all.Load() == 2 }) })
	c.(*net.TCPConn).CloseWrite()
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Fatalf("a body cut short answered %s", resp.Status)
		}
	}
	if n := len(h.fake.Requests()); n != 1 {
		t.Fatalf("the upstream recorded %d requests, want only the first: an unfinished body's upload was not cut", n)
	}
}
