package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/stack"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// The demo's prompt-cache session: an agent loop with automatic caching (top-level
// cache_control) whose tool results ctxproxy's policy clears once it has made two tool uses.
// The call where clearing starts invalidates the cached prompt from the cleared point and
// costs more than it saves; the calls after it read the cleared prompt from the cache and pay
// it back. It runs on a stack of its own (the fake's prompt cache on), so the sessions before
// it keep their numbers.

const demoCacheTenant = "cached"

const demoCachePolicy = `context_management:
  mode: enforce
  clear_tool_uses:
    trigger: { type: tool_uses, value: 2 }
    keep: { type: tool_uses, value: 1 }
    exclude_tools: [note]
memory:
  mode: off
`

// demoCacheAgent reads three log files, then takes fifteen notes (a tool the policy never clears).
func demoCacheAgent(r *fakeapi.Request) fakeapi.Reply {
	n := 0
	gjson.GetBytes(r.Body, "messages").ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").Str == "assistant" {
			n++
		}
		return true
	})
	if n >= 18 {
		return fakeapi.TextReply("The disk filled up at 03:12; the batch needs 40 GB more.")
	}
	if n >= 3 {
		return fakeapi.Blocks(fakeapi.Text(fmt.Sprintf("Noting finding %d.", n-2)),
			fakeapi.ToolUse(fmt.Sprintf("toolu_demo_note_%d", n), "note", map[string]string{"text": fmt.Sprintf("finding %d", n-2)}))
	}
	return fakeapi.Blocks(fakeapi.Text(fmt.Sprintf("Reading log %d.", n+1)),
		fakeapi.ToolUse(fmt.Sprintf("toolu_demo_read_%d", n), "read_log", map[string]int{"part": n + 1}))
}

func demoCacheToolResult(name string, part int) string {
	if name == "note" {
		return "noted"
	}
	var b strings.Builder
	for i := range 120 {
		fmt.Fprintf(&b, "2026-11-2%d 03:%02d:%02d worker-%d part %d: chunk %05d written (%d records)\n", part, i%60, (i*7)%60, i%8, part, i, 500+i%97)
	}
	return b.String()
}

// demoCacheSession runs the session and prints each call's savings from its ledger.
func demoCacheSession(ctx context.Context, root, pricesPath string, p *demoPrinter, log *zap.Logger) error {
	dir := filepath.Join(root, "cache")
	ledgerPath := filepath.Join(dir, stack.LedgerFile)
	_ = removeFile(ledgerPath)
	fake := fakeapi.New(fakeapi.WithLogger(log.Named("fake")), fakeapi.WithOptions(fakeapi.Options{CacheOptions: fakeapi.CacheOptions{
		Cache: fakeapi.On, MinTokens: map[string]int64{demoModel: 256}}}))
	st, err := stack.Start(stack.Config{
		Dir:      dir,
		Policies: map[string]string{"cached.yaml": stack.TenantPolicy(demoCacheTenant, demoKey+"-cache", demoCachePolicy)},
		Fake:     fake,
		Prices:   pricesPath,
		Log:      log,
	})
	if err != nil {
		return err
	}
	defer st.Close()
	fake.SetResponder(demoCacheAgent)

	p.f("\nConversation 4: an agent loop with prompt caching (top-level cache_control), tenant %s:\n", demoCacheTenant)
	p.f("  clear_tool_uses past 2 tool uses, keeping the last 1 (notes never cleared)\n")
	tools := json.RawMessage(`[{"name":"read_log","description":"Read a part of the batch log","input_schema":{"type":"object"}},` +
		`{"name":"note","description":"Keep a finding","input_schema":{"type":"object"}}]`)
	msgs := []json.RawMessage{demoJSON(map[string]any{"role": "user", "content": "Why did last night's batch fail? Read the log, note what you find."})}
	c := &demoClient{base: st.ProxyURL, fake: fake, p: p}
	for range 24 {
		body := demoJSON(map[string]any{"model": demoModel, "max_tokens": 1024, "cache_control": map[string]string{"type": "ephemeral"},
			"system": "You are an operations agent.", "tools": tools, "messages": msgs})
		reply, err := c.postAs(ctx, demoKey+"-cache", body)
		if err != nil {
			return err
		}
		use := gjson.GetBytes(reply, `content.#(type=="tool_use")`)
		if !use.Exists() {
			break
		}
		msgs = append(msgs, demoJSON(map[string]any{"role": "assistant", "content": json.RawMessage(gjson.GetBytes(reply, "content").Raw)}))
		out := demoCacheToolResult(use.Get("name").Str, int(use.Get("input.part").Int()))
		msgs = append(msgs, demoJSON(map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": use.Get("id").Str, "content": out}}}))
	}
	st.Close() // flushes the ledger
	calls, err := demoLedger(ctx, ledgerPath)
	if err != nil {
		return err
	}
	p.f("  call  cleared  cache read  cache write  missed  cause      gross USD  penalty USD    net USD  running net\n")
	var running tokens.Money
	paidOff, lost := 0, false
	for i, cl := range calls {
		running = running.Plus(cl.Savings)
		if running < 0 {
			lost = true
		} else if lost && paidOff == 0 && running > 0 {
			paidOff = i + 1
		}
		cause := cl.CacheMissCause
		if cause == "" {
			cause = "-"
		}
		p.f("  %4d  %7s  %10s  %11s  %6s  %-7s  %10s  %11s  %9s  %11s\n", i+1, demoCommas(cl.ClearedInputTokens()),
			demoCommas(cl.Usage.CacheReadInputTokens), demoCommas(cl.Usage.CacheCreationInputTokens), demoCommas(cl.CacheMissedInputTokens),
			cause, cl.SavingsGross.Fixed(6), cl.CachePenalty.Fixed(6), cl.Savings.Fixed(6), running.Fixed(6))
	}
	p.f("  Savings are net of the prompt cache: the cleared tokens at the read price (they would have been\n")
	p.f("  cache reads), less the tokens the clearing made the cache miss, written again at write − read.\n")
	p.f("  The clearing call costs more than it saves; the calls after it, reading the cleared prompt, pay it back")
	if paidOff > 0 {
		p.f(": from call %d the session's net savings are positive (%s USD after %d calls).\n", paidOff, running.Fixed(6), len(calls))
	} else {
		p.f(".\n")
	}
	return nil
}

// removeFile removes path, which may not exist.
func removeFile(path string) error { return os.Remove(path) }
