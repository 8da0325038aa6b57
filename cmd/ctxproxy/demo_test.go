package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func runDemoForTest(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := runDemo(context.Background(), args, &out, &errOut, func(string) string { return "" }); code != 0 {
		t.Fatalf("ctxproxy demo exited %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	return out.String()
}

func TestDemoShowsMemoryFilesEditsAndCost(t *testing.T) {
	out := runDemoForTest(t)
	for _, want := range []string{
		// the session's steps, and ctxproxy running the model's memory calls
		"Conversation 1: the user states a preference",
		"ctxproxy ran memory view /memories -> \"Here're the files and directories up to 2 levels deep in /memories",
		"ctxproxy ran memory create /memories/preferences.md -> \"File created successfully at: /memories/preferences.md\"",
		"Conversation 2: a new conversation",
		"ctxproxy ran memory view /memories/preferences.md -> \"Here's the content of /memories/preferences.md with line numbers:\"",
		"assistant calls book_flight",
		"window seat 23A, vegetarian meal, as you asked me to remember.",
		// the memory file as stored on disk
		"  /memories/preferences.md\n    | # Travel preferences\n    | - seat: window\n    | - meals: vegetarian\n",
		// context editing
		"context editing: clear_tool_uses_20250919 cleared 2 old tool uses",
		"context editing: clear_tool_uses_20250919 cleared 3 old tool uses",
		"total: 5 tool uses,",
		// compaction: only on the model that compacts, past the trigger, its block sent back
		"Conversation 3: a long log investigation on claude-sonnet-4-6",
		"compaction: the API replaced the history with a summary: <summary>Summary of 5 earlier messages",
		"step 9  the API summarized 52,898 input tokens into",
		"Ticket OPS-4521 is open",
		"demo    claude-sonnet-4-6      4",
		"COMPACTIONS  COMPACTION_USD",
		// the prompt cache: a clearing first costs money (net savings negative), then pays off
		"Conversation 4: an agent loop with prompt caching (top-level cache_control)",
		"     4    4,299           0        2,446   4,522  edits      0.001290     0.015601  -0.014311    -0.014311",
		"     5    4,299       2,446           66       0  -          0.001290     0.000000   0.001290    -0.013022",
		"from call 16 the session's net savings are positive",
		// the cost report table
		"Cost report (13 upstream calls, from the ledger ctxproxy wrote):",
		"COST_USD",
		"demo    claude-sonnet-4-5      9",
		"removed; keep them with --dir DIR",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
	// The agent never saw a memory call: ctxproxy ran them all.
	if strings.Contains(out, "assistant calls memory") {
		t.Errorf("a memory tool_use reached the agent:\n%s", out)
	}
}

func TestDemoKeepsItsFilesWithDir(t *testing.T) {
	dir := t.TempDir()
	prices := filepath.Join("..", "..", "tokens", "builtin_prices.yaml")
	for run := 0; run < 2; run++ { // a second run starts from an empty memory and ledger
		out := runDemoForTest(t, "--dir", dir, "--prices", prices)
		if !strings.Contains(out, "prices         built-in price table with "+prices+" over it") || strings.Contains(out, "*") {
			t.Errorf("run %d: the shipped prices should price the demo model:\n%s", run, out)
		}
		b, err := os.ReadFile(filepath.Join(dir, "memories", "demo", "preferences.md"))
		if err != nil || string(b) != "# Travel preferences\n- seat: window\n- meals: vegetarian\n" {
			t.Fatalf("run %d: memory file %q, %v", run, b, err)
		}
		f, err := os.Open(filepath.Join(dir, "ledger.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		var lines, withEdits, compactions int
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines++
			if gjson.GetBytes(sc.Bytes(), "applied_edits.#").Int() > 0 {
				withEdits++
			}
			if gjson.GetBytes(sc.Bytes(), "compactions").Int() == 1 && gjson.GetBytes(sc.Bytes(), "compaction_cost_usd").Float() > 0 &&
				gjson.GetBytes(sc.Bytes(), "iterations.0.type").Str == "compaction" {
				compactions++
			}
		}
		f.Close()
		if lines != 13 || withEdits != 2 || compactions != 1 {
			t.Errorf("run %d: ledger has %d calls, %d with edits, %d compacted; want 13, 2 and 1", run, lines, withEdits, compactions)
		}
	}
}
