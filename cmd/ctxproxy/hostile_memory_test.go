package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/stack"
)

// A model's memory calls that would run up size or confusion, through the
// built binary: the tool_results sent upstream are cut at the policy's
// max_view_chars with a note, a call with a key given twice is refused (and
// runs neither copy), and a path deeper than 20 components is refused.
func TestBinaryBoundsHostileMemoryCalls(t *testing.T) {
	fake, upURL := fakeUpstream(t)
	prices, err := os.ReadFile("../../tokens/builtin_prices.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pols, _, err := stack.Layout(t.TempDir(), map[string]string{
		"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
		"acme.yaml": stack.TenantPolicy("acme", binKey,
			"memory:\n  mode: proxy\n  limits: { max_view_chars: 300 }\n"),
		"prices.yaml": string(prices),
	})
	if err != nil {
		t.Fatal(err)
	}
	mem := t.TempDir()
	p := startProxy(t, "--upstream", upURL, "--policies", pols, "--memory-dir", mem,
		"--ledger", "file:"+filepath.Join(t.TempDir(), "ledger.jsonl"))
	deep := "/memories" + strings.Repeat("/d", 21)
	fake.SetResponder(fakeapi.Script(
		fakeapi.Reply{Content: []json.RawMessage{
			fakeapi.MemoryCreate("/memories/many.md", strings.Repeat("a\n", 2000)),
			fakeapi.MemoryStrReplace("/memories/many.md", "\n", "b"),
			fakeapi.Memory(json.RawMessage(`{"command":"view","path":"/memories/many.md","command":"delete"}`)),
			fakeapi.MemoryCreate(deep+"/f.md", "too deep"),
		}},
		fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("done")}},
	))
	resp, body := send(t, p.Addr, "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || gjson.Get(body, "content.0.text").Str != "done" {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	reqs := proxiedCalls(fake)
	if len(reqs) != 2 {
		t.Fatalf("%d upstream requests, want 2", len(reqs))
	}
	results := gjson.GetBytes(reqs[1].Messages[len(reqs[1].Messages)-1], "content").Array()
	want := []struct{ prefix, suffix string }{
		{"File created successfully at: /memories/many.md", ""},
		{"Error: No replacement was performed. Multiple occurrences of old_str `\n` in lines: 1, 2, 3,", "\n[Output cut at 300 of 11002 characters.]"},
		{`Error: The memory tool input has the key "command" more than once.`, ""},
		{"Error: Path " + deep + "/f.md has 22 components below /memories; the limit is 20.", ""},
	}
	if len(results) != len(want) {
		t.Fatalf("%d tool_results, want %d: %s", len(results), len(want), reqs[1].Messages[len(reqs[1].Messages)-1])
	}
	for i, w := range want {
		c := results[i].Get("content").Str
		if !strings.HasPrefix(c, w.prefix) || !strings.HasSuffix(c, w.suffix) || len([]rune(c)) > 300+len(w.suffix) {
			t.Errorf("tool_result %d: %q\nwant %q … %q", i, c, w.prefix, w.suffix)
		}
	}
	if _, err := os.Stat(filepath.Join(mem, "acme", "many.md")); err != nil {
		t.Errorf("the call with two commands ran its delete: %v", err)
	}
}
