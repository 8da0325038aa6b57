package claudecode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/stack"
)

// Memory scopes with Claude Code run for real: a tenant with the README's
// example memory.scopes (a read-only /memories/team of the tenant's store, and each
// user's own /memories). An operator writes /memories/team/guidelines.md
// through the operator API; in one `claude -p` session, Claude Code holding
// a ctxproxy key of user dev, the scripted model writes its own note, views
// /memories and tries to write under /memories/team. ctxproxy runs all three
// calls: the listing the model got holds the shared folder and the user's
// own file, the write under /memories/team is refused with the read-only
// sentence, and Claude Code never sees a memory call.
func TestClaudeCodeSeesTheSharedFolderAndItsOwn(t *testing.T) {
	npm := need(t, "npm")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	claude := installClaudeCode(ctx, t, npm)
	ctxproxyBin, fakeBin := buildBinaries(ctx, t)
	root := t.TempDir()
	const tenant, upstreamKey, admin = "cc-scoped", "sk-ant-compat-claude-code-scoped", "compat-scopes-admin"
	polDir, memDir, err := stack.Layout(root, map[string]string{
		"default.yaml": stack.DefaultPolicy,
		"cc-scoped.yaml": `tenant: cc-scoped
upstream:
  api_key_file: cc-scoped.key
memory:
  mode: proxy
  scopes:
    - path: /memories/team
      store: tenant
      model_access: read
    - path: /memories
      store: user
      model_access: read_write
`,
		"cc-scoped.key": upstreamKey + "\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	fakeAddr := startLogged(ctx, t, "fakeapi listening", fakeBin, "--listen", "127.0.0.1:0", "--log-level", "info")
	proxyAddr := startLogged(ctx, t, "ctxproxy listening", ctxproxyBin, "serve", "--listen", "127.0.0.1:0",
		"--upstream", "http://"+fakeAddr, "--policies", polDir, "--memory-dir", memDir,
		"--ledger", "file:"+filepath.Join(root, "ledger.jsonl"), "--admin-token", admin, "--log-level", "info")
	client := startTap(t, "http://"+proxyAddr, false)
	fake := fakeControl{base: "http://" + fakeAddr}

	operator := func(method, path, body string) (int, string) {
		t.Helper()
		req, err := newRequest(ctx, method, "http://"+proxyAddr+path, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	st, body := operator(http.MethodPost, "/admin/keys", `{"tenant":"cc-scoped","name":"claude-code","user":"dev"}`)
	key := gjson.Get(body, "key").Str
	if st != http.StatusCreated || !strings.HasPrefix(key, "sk-ctx-") {
		t.Fatalf("mint key: %d %s", st, body)
	}
	guide := "# Guidelines\nRefund within 30 days.\n"
	gb, _ := json.Marshal(guide)
	if st, body := operator(http.MethodPost, "/v1/memory_stores/memstore_"+tenant+"/memories",
		`{"path":"/guidelines.md","content":`+string(gb)+`}`); st != http.StatusOK {
		t.Fatalf("operator write of the guidelines: %d %s", st, body)
	}

	note := "dev prefers short answers.\n"
	const createID, viewID, teamID = "toolu_cc_own", "toolu_cc_view", "toolu_cc_team"
	answer := "FINAL ANSWER: saw the team folder and my notes."
	mem := func(id string, in map[string]any) fakeapi.Reply {
		return fakeapi.Reply{Content: []json.RawMessage{fakeapi.ToolUse(id, "memory", in)}, StopReason: "tool_use"}
	}
	replies := []fakeapi.Reply{
		mem(createID, map[string]any{"command": "create", "path": "/memories/notes.md", "file_text": note}),
		mem(viewID, map[string]any{"command": "view", "path": "/memories"}),
		mem(teamID, map[string]any{"command": "create", "path": "/memories/team/guidelines.md", "file_text": "Refund never.\n"}),
		{Content: []json.RawMessage{fakeapi.Text(answer)}, StopReason: "end_turn"},
	}
	if err := fake.post(ctx, "/_fake/script", map[string]any{"reset": true, "replies": replies}, nil); err != nil {
		t.Fatal(err)
	}
	client.take()
	res, stderr := runClaude(ctx, t, claude, client.URL, []string{"ANTHROPIC_AUTH_TOKEN=" + key})
	exs := client.take()
	var ups []fakeapi.RequestJSON
	if err := fake.get(ctx, "/_fake/requests?path=/v1/messages", &ups); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("claude stderr:\n%s", stderr)
		}
	}()

	if res.Result != answer || res.IsError {
		t.Errorf("claude result = %+v, want %q", res, answer)
	}
	if len(exs) != 1 {
		t.Errorf("Claude Code made %d requests, want 1 (ctxproxy runs every memory call)", len(exs))
	}
	for i, ex := range exs {
		memoryBlocks(t, fmt.Sprintf("client request %d", i), ex.ReqBody)
		if ex.Status != http.StatusOK {
			t.Errorf("client request %d: status %d", i, ex.Status)
		}
	}
	if len(ups) != len(replies) {
		t.Fatalf("the fake saw %d requests, want %d (Claude Code's and the memory loop's)", len(ups), len(replies))
	}
	last := ups[len(ups)-1].Body
	if r := findToolResult(last, createID); !r.Exists() || r.Get("is_error").Bool() {
		t.Errorf("the model's own note: tool_result %s, want a success", r.Raw)
	}
	t.Run("view /memories lists the shared folder and the user's own file", func(t *testing.T) {
		want := "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items and node_modules:\n4K\t/memories\n" +
			fmt.Sprintf("%dB\t/memories/notes.md\n4K\t/memories/team/\n%dB\t/memories/team/guidelines.md", len(note), len(guide))
		r := findToolResult(last, viewID)
		if r.Get("is_error").Bool() || toolText(r) != want {
			t.Errorf("the model saw %s\nwant content %q", r.Raw, want)
		}
	})
	t.Run("a write under /memories/team is refused with the read-only sentence", func(t *testing.T) {
		r := findToolResult(last, teamID)
		if !r.Get("is_error").Bool() || toolText(r) != "Error: /memories/team is read-only; ask an operator to change it." {
			t.Errorf("the model saw %s, want the read-only refusal", r.Raw)
		}
		_, body := operator(http.MethodGet, "/v1/memory_stores/memstore_"+tenant+"/memories?view=full", "")
		if got := gjson.Get(body, `data.#(path=="/guidelines.md").content`).Str; got != guide {
			t.Errorf("the guidelines are now %q, want %q", got, guide)
		}
	})
	t.Run("the note is in the user's store, not the tenant's", func(t *testing.T) {
		st, body := operator(http.MethodGet, "/v1/memory_stores/memstore_"+tenant+"~dev/memories?view=full", "")
		if got := gjson.Get(body, `data.#(path=="/notes.md").content`).Str; st != http.StatusOK || got != note {
			t.Errorf("user dev's store: %d %.500s", st, body)
		}
		_, body = operator(http.MethodGet, "/v1/memory_stores/memstore_"+tenant+"/memories?view=full", "")
		if gjson.Get(body, `data.#(path=="/notes.md")`).Exists() {
			t.Errorf("the tenant's store holds the user's note: %.500s", body)
		}
	})
}

// toolText is a tool_result's text, whether its content is a string or
// text blocks.
func toolText(r gjson.Result) string {
	c := r.Get("content")
	if c.IsArray() {
		var b strings.Builder
		for _, x := range c.Array() {
			b.WriteString(x.Get("text").Str)
		}
		return b.String()
	}
	return c.Str
}
