package main

import (
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/testwait"
	"github.com/ctxproxy/ctxproxy/stack"
)

// max_tokens bounds each model call, and the memory loop calls the model up to max_iterations
// times: through the binary, a memory-loop request holds max_iterations × its output hold
// against the cap (as far as the cap leaves room), so while it runs a second request that the
// first call's hold alone would have let through is refused; once it is settled, the cap is
// free again.
func TestBinaryAMemoryLoopHoldsItsRoundsAgainstTheCap(t *testing.T) {
	fake := fakeapi.New()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	// $10 per million output tokens: max_tokens 20,000 holds $0.20 a call, ten rounds $2.
	pols, _, err := stack.Layout(t.TempDir(), map[string]string{
		"capped.yaml": stack.TenantPolicy("capped", capKey, "memory:\n  mode: proxy\n  max_iterations: 10\n"+
			"limits:\n  spend: [{period: daily, usd: 1}]\n  reserve_output_tokens: 100000\n"),
		"prices.yaml": "models:\n  - model: m\n    input: 1\n    output: 10\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, "--upstream", srv.URL, "--policies", pols, "--memory-dir", t.TempDir(),
		"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
	release := make(chan struct{})
	var calls atomic.Int32
	fake.SetResponder(func(*fakeapi.Request) fakeapi.Reply {
		if calls.Add(1) == 1 { // the loop's first call waits for the test
			<-release
		}
		return fakeapi.TextReply("done")
	})
	const body = `{"model":"m","max_tokens":20000,"messages":[{"role":"user","content":"hi"}]}`
	first := make(chan int, 1)
	go func() {
		resp, _ := post(t, p.Addr, capKey, body)
		if resp == nil {
			first <- 0
			return
		}
		first <- resp.StatusCode
	}()
	testwait.Eventually(t, "the first request upstream", func() {
		for len(proxiedCalls(fake)) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	})
	resp, got := post(t, p.Addr, capKey, body)
	if resp == nil || resp.StatusCode != 429 {
		close(release)
		t.Fatalf("a second request while the loop holds the cap: %v %s, want 429", resp, got)
	}
	close(release)
	if code := <-first; code != 200 {
		t.Fatalf("the loop's request: %d", code)
	}
	if resp, got := post(t, p.Addr, capKey, body); resp == nil || resp.StatusCode != 200 {
		t.Errorf("after the loop settled: %v %s", resp, got)
	}
}
