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
		// the cost report table
		"Cost report (9 upstream calls, from the ledger ctxproxy wrote):",
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
	prices := filepath.Join("..", "..", "policies", "prices.yaml")
	for run := 0; run < 2; run++ { // a second run starts from an empty memory and ledger
		out := runDemoForTest(t, "--dir", dir, "--prices", prices)
		if !strings.Contains(out, "prices         "+prices) || strings.Contains(out, "*") {
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
		var lines, withEdits int
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines++
			if gjson.GetBytes(sc.Bytes(), "applied_edits.#").Int() > 0 {
				withEdits++
			}
		}
		f.Close()
		if lines != 9 || withEdits != 2 {
			t.Errorf("run %d: ledger has %d calls, %d with edits; want 9 and 2", run, lines, withEdits)
		}
	}
}
