package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/testwait"
	"github.com/ctxproxy/ctxproxy/stack"
)

// Through the binary against the fake's thinking block binding: a thinking block sent back after
// its conversation changed is dropped under drop_block, the reply's input_transformations (with
// the beta) reaches the client unchanged, and each entry is counted in
// ctxproxy_input_transformations_total{tenant,type,reason}, plain and streamed alike.
func TestBinaryCountsTheInputTransformationsTheAPIReports(t *testing.T) {
	fake := fakeapi.New()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	pols, _, err := stack.Layout(t.TempDir(), map[string]string{
		"acme.yaml": stack.TenantPolicy("acme", binKey, "memory:\n  mode: off\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, "--upstream", srv.URL, "--policies", pols, "--memory-dir", t.TempDir(),
		"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"), "--debug-addr", "127.0.0.1:0")
	post := func(t *testing.T, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.Addr+"/v1/messages", strings.NewReader(body))
		req.Header.Set("X-Api-Key", binKey)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Set("Anthropic-Beta", fakeapi.BetaThinkingBinding)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	thinking := func(mode string) string {
		return `{"type":"enabled","budget_tokens":1024,"block_binding":{"prefix_mismatch_behavior":"` + mode + `"}}`
	}
	msgs := func(first, content string) string {
		return `[{"role":"user","content":"` + first + `"},{"role":"assistant","content":` + content + `},{"role":"user","content":"go on"}]`
	}
	fake.SetResponder(func(*fakeapi.Request) fakeapi.Reply {
		return fakeapi.Reply{Content: []json.RawMessage{fakeapi.Thinking("Plan the answer.", "sig_plan"), fakeapi.Text("Hi.")}}
	})
	code, first := post(t, `{"model":"claude-opus-4-8","max_tokens":2000,"thinking":`+thinking("error")+`,"messages":[{"role":"user","content":"hi"}]}`)
	if code != 200 {
		t.Fatalf("%d %s", code, first)
	}
	content := gjson.Get(first, "content").Raw
	for _, stream := range []bool{false, true} {
		s := map[bool]string{false: "false", true: "true"}[stream]
		// The first message changed: the thinking block's prefix no longer matches.
		code, got := post(t, `{"model":"claude-opus-4-8","max_tokens":2000,"stream":`+s+`,"thinking":`+thinking("drop_block")+`,"messages":`+msgs("hello", content)+`}`)
		if code != 200 || !strings.Contains(got, `"input_transformations":[{"type":"thinking_dropped","path":"messages.1.content.0","reason":"prefix_binding_mismatch"}]`) {
			t.Fatalf("stream %v: %d %s", stream, code, got)
		}
	}
	// A reply with nothing to report counts nothing.
	if code, got := post(t, `{"model":"claude-opus-4-8","max_tokens":2000,"thinking":`+thinking("error")+`,"messages":`+msgs("hi", content)+`}`); code != 200 ||
		!strings.Contains(got, `"input_transformations":[]`) {
		t.Fatalf("%d %s", code, got)
	}
	const want = `ctxproxy_input_transformations_total{reason="prefix_binding_mismatch",tenant="acme",type="thinking_dropped"} 2`
	testwait.Eventually(t, "the metric", func() {
		for {
			resp, err := http.Get("http://" + p.Addrs["debug listening"] + "/metrics")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if strings.Contains(string(b), want) && strings.Count(string(b), "ctxproxy_input_transformations_total{") == 1 {
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
