package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/stack"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// The built binary with a compacting policy in front of the fake API: the
// compact edit and beta reach the API for a model that compacts, the
// compaction block reaches the client (streamed and not), count_tokens gets
// the same edit, a threaded request with edits is answered 400
// thread_unsupported_request (threads: unthread_edits, the default), and the
// ledger and `ctxproxy report` count the compactions and their cost.
func TestBinaryCompactsAndCountsIt(t *testing.T) {
	fake, upURL := fakeUpstream(t)
	dir := t.TempDir()
	prices, err := os.ReadFile("../../tokens/builtin_prices.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pols, _, err := stack.Layout(dir, map[string]string{
		"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
		"acme.yaml": stack.TenantPolicy("acme", binKey, "context_management:\n  mode: enforce\n"+
			"  clear_tool_uses:\n    trigger: { type: input_tokens, value: 30000 }\n"+
			"  compact:\n    trigger: { type: input_tokens, value: 50000 }\nmemory:\n  mode: proxy\n"),
		"prices.yaml": string(prices),
	})
	if err != nil {
		t.Fatal(err)
	}
	ledger := filepath.Join(dir, "ledger.jsonl")
	p := startProxy(t, "--upstream", upURL, "--policies", pols, "--memory-dir", filepath.Join(dir, "mem"), "--ledger", "file:"+ledger)

	long, _ := json.Marshal(strings.Repeat("log line ", 25000)) // about 56,000 tokens for the fake
	conv := `"messages":[{"role":"user","content":` + string(long) + `},{"role":"assistant","content":"noted"},{"role":"user","content":"why does it fail?"}]`
	var compactionCost tokens.Money
	pr, err := tokens.LoadPrices("../../tokens/builtin_prices.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, stream := range []string{"false", "true"} {
		resp, body := send(t, p.Addr, "/v1/messages", `{"model":"claude-opus-4-6","max_tokens":100,"stream":`+stream+`,`+conv+`}`)
		if resp.StatusCode != 200 {
			t.Fatalf("stream %s: status %d: %s", stream, resp.StatusCode, body)
		}
		if !strings.Contains(body, `"type":"compaction"`) || (stream == "true" && !strings.Contains(body, `"compaction_delta"`)) {
			t.Fatalf("stream %s: no compaction reached the client: %.500s", stream, body)
		}
		reqs := proxiedCalls(fake)
		up := reqs[len(reqs)-1]
		if gjson.GetBytes(up.Body, "context_management.edits.1.type").Str != "compact_20260112" ||
			!strings.Contains(strings.Join(up.Betas, ","), "compact-2026-01-12") {
			t.Fatalf("upstream request lacks the compact edit or beta: %v %s", up.Betas, gjson.GetBytes(up.Body, "context_management").Raw)
		}
		it := gjson.Get(body, "usage.iterations.0")
		if stream == "true" {
			for _, line := range strings.Split(body, "\n") {
				if d, ok := strings.CutPrefix(line, "data: "); ok && gjson.Get(d, "type").Str == "message_delta" {
					it = gjson.Get(d, "usage.iterations.0")
				}
			}
		}
		e, _ := pr.Lookup("claude-opus-4-6")
		compactionCost += tokens.Money(it.Get("input_tokens").Int())*e.Price.Input + tokens.Money(it.Get("output_tokens").Int())*e.Price.Output
	}

	// count_tokens: the same rewrite, compact edit included; it never compacts.
	resp, body := send(t, p.Addr, "/v1/messages/count_tokens", `{"model":"claude-opus-4-6",`+conv+`}`)
	reqs := proxiedCalls(fake)
	if resp.StatusCode != 200 || gjson.GetBytes(reqs[len(reqs)-1].Body, "context_management.edits.1.type").Str != "compact_20260112" {
		t.Fatalf("count_tokens %d %s", resp.StatusCode, body)
	}

	// A threaded request the policy adds edits to: answered before any upstream call.
	n := len(proxiedCalls(fake))
	resp, body = send(t, p.Addr, "/v1/messages", `{"model":"claude-opus-4-6","max_tokens":10,"thread":{"type":"create"},"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 400 || gjson.Get(body, "error.details.error_code").Str != "thread_unsupported_request" || len(proxiedCalls(fake)) != n {
		t.Fatalf("threaded request: %d %s (%d upstream calls)", resp.StatusCode, body, len(proxiedCalls(fake))-n)
	}

	p.Signal(syscall.SIGTERM)
	<-p.Done()
	out, err := exec.Command(binary(t), "report", "--ledger", "file:"+ledger, "--json").CombinedOutput()
	if err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if gjson.GetBytes(out, "total.compactions").Int() != 2 || gjson.GetBytes(out, "total.compaction_cost_usd").String() != compactionCost.String() {
		t.Fatalf("report: compactions %s cost %s, want 2 and %s", gjson.GetBytes(out, "total.compactions").Raw,
			gjson.GetBytes(out, "total.compaction_cost_usd").Raw, compactionCost)
	}
	table, err := exec.Command(binary(t), "report", "--ledger", "file:"+ledger).CombinedOutput()
	if err != nil || !strings.Contains(string(table), "COMPACTIONS  COMPACTION_USD") {
		t.Fatalf("report table: %v\n%s", err, table)
	}
}
