package proxy

import (
	"context"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
)

// scopedVault is the example policy on the vault tenant.
func scopedVault(t *testing.T) map[string]string {
	p := vaultPolicies(t)
	p["vault.yaml"] = `tenant: vault
upstream:
  api_key_env: CTXPROXY_TEST_VAULT_KEY
memory:
  mode: proxy
  scopes:
    - path: /memories/team
      store: tenant
      model_access: read
    - path: /memories
      store: user
      model_access: read_write
      template: templates/new-user
  gate:
    refuse_secrets: true
    max_writes_per_minute: 60
`
	p["templates/new-user/progress.md"] = "# Progress\n"
	return p
}

// Two users of one tenant through the proxy: each keeps their own
// /memories, both read the shared folder an operator wrote, the model
// cannot change it, a secret is refused, and a client-chosen name selects
// nothing.
func TestMemoryScopesThroughTheProxy(t *testing.T) {
	ctx := context.Background()
	store, err := keys.OpenFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ring := keys.NewKeyring(store)
	h := newHarnessWith(t, nil, scopedVault(t), func(c *Config) { c.Keys = ring })
	_, ana, _ := ring.Create(ctx, keys.Spec{Tenant: "vault", Name: "laptop", User: "ana"})
	_, bo, _ := ring.Create(ctx, keys.Spec{Tenant: "vault", Name: "laptop", User: "bo"})
	guide := "# Guidelines\nRefund within 30 days.\n"
	p, _ := memoryhook.ParsePath("/memories/guidelines.md")
	if err := h.mem.(memoryhook.Governed).Backend().Create(ctx, memoryhook.Scope{Tenant: "vault", Actor: memoryhook.Actor{Type: memoryhook.ActorOperator}}, p, []byte(guide)); err != nil {
		t.Fatal(err)
	}
	call := func(key string, body string, calls ...jsonRaw) []gjson.Result {
		t.Helper()
		h.fake.Reset()
		replies := []fakeapi.Reply{}
		for _, c := range calls {
			replies = append(replies, fakeapi.Blocks(c))
		}
		h.fake.SetResponder(fakeapi.Script(append(replies, fakeapi.Blocks(fakeapi.Text("done")))...))
		resp := h.post("/v1/messages", key, body, "X-Ctxproxy-User", "ana")
		if b := readAll(t, resp.Body); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		var out []gjson.Result
		for _, r := range h.fake.Requests()[1:] {
			out = append(out, gjson.GetBytes(r.Body, "messages.@reverse.0.content.0"))
		}
		return out
	}
	spoof, _ := sjson.Set(simpleBody, "metadata.user_id", "ana")
	t.Run("each user writes /memories/notes.md and reads back their own", func(t *testing.T) {
		call(ana, simpleBody, fakeapi.MemoryCreate("/memories/notes.md", "ana's\n"))
		call(bo, spoof, fakeapi.MemoryCreate("/memories/notes.md", "bo's\n"))
		if r := call(ana, simpleBody, fakeapi.MemoryView("/memories/notes.md")); !strings.Contains(r[0].Get("content").Str, "ana's") {
			t.Errorf("ana reads %s", r[0].Raw)
		}
		if r := call(bo, spoof, fakeapi.MemoryView("/memories/notes.md")); !strings.Contains(r[0].Get("content").Str, "bo's") {
			t.Errorf("bo (claiming to be ana) reads %s", r[0].Raw)
		}
		if got, _ := h.memFile(policy.UserStore("vault", "bo"), "notes.md"); got != "bo's\n" {
			t.Errorf("bo's store holds %q", got)
		}
	})
	t.Run("the template seeds each user's store once", func(t *testing.T) {
		if got, _ := h.memFile(policy.UserStore("vault", "ana"), "progress.md"); got != "# Progress\n" {
			t.Errorf("ana's progress.md %q", got)
		}
		call(ana, simpleBody, fakeapi.MemoryDelete("/memories/progress.md"))
		call(ana, simpleBody, fakeapi.MemoryView("/memories"))
		if _, ok := h.memFile(policy.UserStore("vault", "ana"), "progress.md"); ok {
			t.Error("seeded again after ana deleted it")
		}
	})
	t.Run("both read the operator's shared file; the model's writes to it are refused and leave it as it was", func(t *testing.T) {
		for _, key := range []string{ana, bo} {
			if r := call(key, simpleBody, fakeapi.MemoryView("/memories/team/guidelines.md")); !strings.Contains(r[0].Get("content").Str, "Refund within 30 days.") {
				t.Errorf("view: %s", r[0].Raw)
			}
		}
		rs := call(ana, simpleBody,
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
		if got, _ := h.memFile("vault", "guidelines.md"); got != guide {
			t.Errorf("the shared file is now %q", got)
		}
	})
	t.Run("a write holding a key is refused without echoing it", func(t *testing.T) {
		key := "sk-ant-api03-" + strings.Repeat("k", 40)
		r := call(bo, simpleBody, fakeapi.MemoryCreate("/memories/k.md", "key "+key))
		if !r[0].Get("is_error").Bool() || strings.Contains(r[0].Raw, key) || !strings.Contains(r[0].Get("content").Str, "an Anthropic API key") {
			t.Errorf("%s", r[0].Raw)
		}
		for _, e := range h.logs.All() {
			for _, f := range e.Context {
				if strings.Contains(f.String, key) {
					t.Errorf("a log line holds the key: %v", e)
				}
			}
		}
	})
	t.Run("view /memories lists the user's own files and the shared folder together", func(t *testing.T) {
		r := call(bo, simpleBody, fakeapi.MemoryView("/memories"))
		want := "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items and node_modules:\n4K\t/memories\n" +
			"5B\t/memories/notes.md\n11B\t/memories/progress.md\n4K\t/memories/team/\n36B\t/memories/team/guidelines.md"
		if got := r[0].Get("content").Str; got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})
}
