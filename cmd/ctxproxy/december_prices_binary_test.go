package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/stack"
)

// Through the binary and its built-in price table, each December model is priced as itself: Opus
// 5.5 at its own input and 0.05x cache read (not Opus 5's, whose id it starts with), a dated
// snapshot as its model, Haiku 5.5 by prompt length, and a model that merely starts with a
// priced one (claude-opus-5-6) is price_unknown.
func TestBinaryPricesTheDecemberModelsAsThemselves(t *testing.T) {
	pols, _, err := stack.Layout(t.TempDir(), map[string]string{
		"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
		"acme.yaml":    stack.TenantPolicy("acme", binKey, "memory:\n  mode: off\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	fake, upURL := fakeUpstream(t)
	ledger := filepath.Join(t.TempDir(), "ledger.jsonl")
	p := startProxy(t, "--upstream", upURL, "--policies", pols, "--memory-dir", t.TempDir(), "--ledger", "file:"+ledger)

	tests := []struct {
		model   string
		in      int // input tokens; every call also reads 1,000,000 cached tokens and writes 10 tokens of output
		cost    string
		unknown bool
	}{
		// 1,000×4 + 1,000,000×0.20 + 10×20 per million = (4,000 + 200,000 + 200) / 1e6
		{"claude-opus-5-5", 1000, "0.2042", false},
		{"claude-opus-5-5-20260916", 1000, "0.2042", false},
		// 1,000×5 + 1,000,000×0.50 + 10×25 = Opus 5's own price
		{"claude-opus-5", 1000, "0.50525", false},
		// Haiku 5.5 over 100,000 prompt tokens: 1,000×0.50 + 1,000,000×0.05 + 10×2.50
		{"claude-haiku-5-5", 1000, "0.050525", false},
		// Fable 5.1 reads at 0.025x: 1,000×10 + 1,000,000×0.25 + 10×50
		{"claude-fable-5-1", 1000, "0.2605", false},
		{"claude-opus-5-6", 1000, "0", true},
	}
	for i, tt := range tests {
		fake.SetResponder(func(*fakeapi.Request) fakeapi.Reply {
			r := fakeapi.TextReply("ok")
			r.RawUsage = []byte(fmt.Sprintf(`{"input_tokens":%d,"output_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":1000000}`, tt.in))
			return r
		})
		resp, got := send(t, p.Addr, "/v1/messages", `{"model":"`+tt.model+`","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", tt.model, resp.StatusCode, got)
		}
		var line gjson.Result
		eventually(t, tt.model+"'s ledger line", func() {
			for {
				b, _ := os.ReadFile(ledger)
				ls := strings.Split(strings.TrimSpace(string(b)), "\n")
				if len(ls) > i && ls[i] != "" {
					line = gjson.Parse(ls[i])
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
		t.Run(tt.model, func(t *testing.T) {
			if line.Get("model").Str != tt.model || line.Get("cost_usd").String() != tt.cost || line.Get("price_unknown").Bool() != tt.unknown {
				t.Errorf("ledger line %s, want cost_usd %s price_unknown %v", line.Raw, tt.cost, tt.unknown)
			}
		})
	}
}
