package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/stack"
)

// memory.scopes through the built binary (the example): two users
// of one tenant each keep their own /memories/notes.md, both read the
// guidelines an operator wrote under /memories/team, the model's writes
// there are refused and leave the file byte for byte, a fake key is
// refused without being echoed, the refusals are counted, and the
// operator API lists each user's store under the user's name.
func TestBinaryMemoryScopesAndTheGate(t *testing.T) {
	fake, upURL := fakeUpstream(t)
	pols, mem, err := stack.Layout(t.TempDir(), map[string]string{
		"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
		"vault.yaml": `tenant: vault
upstream:
  api_key_env: CTXPROXY_E2E_VAULT_KEY
memory:
  mode: proxy
  scopes:
    - path: /memories/team          # shared by everyone in the tenant
      store: tenant
      model_access: read            # read | read_write
    - path: /memories               # everything else: each user's own
      store: user                   # user | key | tenant
      model_access: read_write
      template: templates/new-user  # a folder in the policies folder copied into a user's store on first use
  gate:
    refuse_secrets: true
    max_writes_per_minute: 60
`,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(pols, "templates", "new-user"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pols, "templates", "new-user", "progress.md"), []byte("# Progress\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startVaultProxy(t, "--upstream", upURL, "--policies", pols, "--memory-dir", mem,
		"--ledger", "file:"+filepath.Join(t.TempDir(), "ledger.jsonl"))
	ana := gjson.Get(keysCLI(t, p.Addr, "create", "--tenant", "vault", "--name", "laptop", "--user", "ana", "--json"), "key").Str
	bo := gjson.Get(keysCLI(t, p.Addr, "create", "--tenant", "vault", "--name", "laptop", "--user", "bo", "--json"), "key").Str

	guide := "# Guidelines\nRefund within 30 days.\n"
	if st, body := operatorCall(t, p.Addr, e2eAdminToken, "POST", "/v1/memory_stores/memstore_vault/memories",
		`{"path":"/guidelines.md","content":`+jsonString(guide)+`}`); st != 200 {
		t.Fatalf("operator write: %d %s", st, body)
	}
	const ask = `{"model":"claude-sonnet-4-5","max_tokens":10,"metadata":{"user_id":"ana"},"messages":[{"role":"user","content":"hi"}]}`
	results := func(key string, calls ...json.RawMessage) []gjson.Result {
		t.Helper()
		var replies []fakeapi.Reply
		for _, c := range calls {
			replies = append(replies, fakeapi.Reply{Content: []json.RawMessage{c}})
		}
		fake.SetResponder(fakeapi.Script(append(replies, fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("done")}})...))
		before := len(proxiedCalls(fake))
		if resp, body := call(t, p.Addr, "POST", "/v1/messages", ask, "X-Api-Key", key); resp.StatusCode != 200 {
			t.Fatalf("status %d: %.300s", resp.StatusCode, body)
		}
		var out []gjson.Result
		for _, r := range proxiedCalls(fake)[before+1:] {
			out = append(out, gjson.GetBytes(r.Messages[len(r.Messages)-1], "content.0"))
		}
		return out
	}
	t.Run("two users each write /memories/notes.md and read back their own", func(t *testing.T) {
		results(ana, fakeapi.MemoryCreate("/memories/notes.md", "ana's notes\n"))
		results(bo, fakeapi.MemoryCreate("/memories/notes.md", "bo's notes\n")) // metadata.user_id says ana: it selects nothing
		if r := results(ana, fakeapi.MemoryView("/memories/notes.md")); !strings.Contains(r[0].Get("content").Str, "ana's notes") {
			t.Errorf("ana: %s", r[0].Raw)
		}
		if r := results(bo, fakeapi.MemoryView("/memories/notes.md")); !strings.Contains(r[0].Get("content").Str, "bo's notes") {
			t.Errorf("bo: %s", r[0].Raw)
		}
	})
	t.Run("both read the operator's guidelines, and view /memories shows their own files and the shared folder", func(t *testing.T) {
		for _, key := range []string{ana, bo} {
			if r := results(key, fakeapi.MemoryView("/memories/team/guidelines.md")); !strings.Contains(r[0].Get("content").Str, "Refund within 30 days.") {
				t.Errorf("%s", r[0].Raw)
			}
		}
		want := "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items and node_modules:\n4K\t/memories\n" +
			"11B\t/memories/notes.md\n11B\t/memories/progress.md\n4K\t/memories/team/\n36B\t/memories/team/guidelines.md"
		if r := results(bo, fakeapi.MemoryView("/memories")); r[0].Get("content").Str != want {
			t.Errorf("listing:\n%s", r[0].Get("content").Str)
		}
	})
	t.Run("the model's writes under /memories/team are refused and leave the file as it was", func(t *testing.T) {
		rs := results(ana,
			fakeapi.MemoryCreate("/memories/team/x.md", "x"),
			fakeapi.MemoryStrReplace("/memories/team/guidelines.md", "30", "300"),
			fakeapi.MemoryInsert("/memories/team/guidelines.md", 0, "Ignore refunds."),
			fakeapi.MemoryDelete("/memories/team/guidelines.md"),
			fakeapi.MemoryRename("/memories/team/guidelines.md", "/memories/g.md"))
		for _, r := range rs[:5] {
			if !r.Get("is_error").Bool() || r.Get("content").Str != "Error: /memories/team is read-only; ask an operator to change it." {
				t.Errorf("%s", r.Raw)
			}
		}
		_, body := operatorCall(t, p.Addr, e2eAdminToken, "GET", "/v1/memory_stores/memstore_vault/memories?view=full", "")
		if got := gjson.Get(body, `data.#(path=="/guidelines.md").content`).Str; got != guide {
			t.Errorf("the guidelines are now %q", got)
		}
	})
	key := "sk-ant-api03-" + strings.Repeat("F", 93) + "AA"
	t.Run("a write holding a fake Anthropic key is refused without echoing it", func(t *testing.T) {
		r := results(bo, fakeapi.MemoryCreate("/memories/creds.md", "my key is "+key+"\n"))
		if !r[0].Get("is_error").Bool() || !strings.Contains(r[0].Get("content").Str, "an Anthropic API key") {
			t.Errorf("%s", r[0].Raw)
		}
		for _, rq := range proxiedCalls(fake) {
			if rq.Path == "/v1/messages" && len(rq.Messages) > 2 && strings.Contains(string(rq.Messages[len(rq.Messages)-1]), key) {
				t.Error("the key was echoed to the model")
			}
		}
		if strings.Contains(p.Log(), key) {
			t.Error("the key is in the log")
		}
	})
	t.Run("the refusals are counted by reason", func(t *testing.T) {
		resp, err := http.Get("http://" + p.Addrs["metrics listening"] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, series := range []string{
			`ctxproxy_memory_gate_refusals_total{reason="read_only",tenant="vault"} 5`,
			`ctxproxy_memory_gate_refusals_total{reason="secret",tenant="vault"} 1`,
		} {
			if !strings.Contains(string(b), series) {
				t.Errorf("no %s in\n%s", series, grepLines(string(b), "gate_refusals"))
			}
		}
	})
	t.Run("the operator API lists each user's store under the user's name", func(t *testing.T) {
		_, body := operatorCall(t, p.Addr, e2eAdminToken, "GET", "/v1/memory_stores", "")
		all := gjson.Get(body, "data.#.name").String()
		if !strings.Contains(all, `"ana"`) || !strings.Contains(all, `"bo"`) {
			t.Errorf("stores: %s", all)
		}
		st, body := operatorCall(t, p.Addr, e2eAdminToken, "GET", "/v1/memory_stores/memstore_vault~ana/memories?view=full", "")
		if st != 200 || !strings.Contains(body, "ana's notes") || strings.Contains(body, "bo's notes") {
			t.Errorf("ana's store: %d %.300s", st, body)
		}
	})
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
