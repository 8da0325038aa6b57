package ts_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// With memory.scopes on, the model's one tree is served by two stores:
// the user's own at /memories and the tenant's read-only one at
// /memories/team. Its listings and file views must be what the official
// SDK's helper answers for one folder holding the same files,
// character for character (directory sizes masked: the mount's folder is
// no directory of the file system, and prints 4K).
func TestScopedMemoryMatchesTheSDKHelper(t *testing.T) {
	node := need(t, "node")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel) // after the SDK helper's cleanup, which waits for it to end
	installSDK(ctx, t)
	st, err := memoryhook.NewFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	mount := func(at, store string, readOnly bool) memoryhook.Mount {
		p, err := memoryhook.ParsePath(at)
		if err != nil {
			t.Fatal(err)
		}
		return memoryhook.Mount{At: p, Store: store, ReadOnly: readOnly, Limits: memoryhook.Limits{MaxViewChars: 1 << 20}}
	}
	user := memoryhook.Scope{Tenant: "acme", Limits: memoryhook.Limits{MaxViewChars: 1 << 20}, Mounts: []memoryhook.Mount{
		mount("/memories/team", "acme", true), mount("/memories", "acme~u-00000000000a11ce", false)}}
	team := memoryhook.Scope{Tenant: "acme"}
	sdk := startSDK(ctx, t, node)
	in := func(kv ...string) []byte {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		b, _ := json.Marshal(m)
		return b
	}
	create := func(sc memoryhook.Scope, scoped, sdkPath, text string) {
		t.Helper()
		if r := memoryhook.Exec(ctx, st, sc, in("command", "create", "path", scoped, "file_text", text)); r.IsError {
			t.Fatalf("%s: %s", scoped, r.Content)
		}
		if r := sdk.run(t, in("command", "create", "path", sdkPath, "file_text", text)); r.IsError {
			t.Fatalf("SDK %s: %s", sdkPath, r.Content)
		}
	}
	// The operator's shared files, written to the tenant's store.
	create(team, "/memories/guidelines.md", "/memories/team/guidelines.md", "# Guidelines\nBe kind.\n")
	create(team, "/memories/policies/refunds.md", "/memories/team/policies/refunds.md", "30 days\n")
	create(team, "/memories/policies/deep/x.md", "/memories/team/policies/deep/x.md", "deep\n")
	create(team, "/memories/Zeta.md", "/memories/team/Zeta.md", "z\n")
	// The user's own, written by the model through the scopes.
	for _, f := range []struct{ path, text string }{
		{"/memories/notes.md", "mine\n"}, {"/memories/a/b.md", "ab\n"}, {"/memories/tea.md", "green\n"},
		{"/memories/Team.md", "capital\n"}, {"/memories/teams/x.md", "not the mount\n"}, {"/memories/.hidden", "h\n"},
	} {
		create(user, f.path, f.path, f.text)
	}
	for _, v := range [][]byte{
		in("command", "view", "path", "/memories"),
		in("command", "view", "path", "/memories/team"),
		in("command", "view", "path", "/memories/team/policies"),
		in("command", "view", "path", "/memories/team/guidelines.md"),
		in("command", "view", "path", "/memories/notes.md"),
		in("command", "view", "path", "/memories/a"),
		in("command", "view", "path", "/memories/team/missing.md"),
	} {
		want := sdk.run(t, v)
		got := memoryhook.Exec(ctx, st, user, v)
		if dirSizesMasked(got.Content) != dirSizesMasked(want.Content) || got.IsError != want.IsError {
			t.Errorf("%s\nSDK:      %q\nctxproxy: %q", v, want.Content, got.Content)
		}
	}
	if r := memoryhook.Exec(ctx, st, user, in("command", "view", "path", "/memories")); !strings.Contains(r.Content, "/memories/team/guidelines.md") {
		t.Errorf("the merged listing lacks the shared folder: %s", r.Content)
	}
}
