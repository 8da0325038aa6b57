package memoryhook_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/memoryhook/storetest"
)

func TestSecretFormats(t *testing.T) {
	for _, c := range []struct{ text, kind string }{
		{"key sk-ant-api03-" + strings.Repeat("x", 40), "an Anthropic API key"},
		{"admin sk-ant-admin01-" + strings.Repeat("Y", 30), "an Anthropic API key"},
		{"sk-ctx-" + strings.Repeat("a1", 16), "a ctxproxy key"},
		{"OPENAI=sk-proj-" + strings.Repeat("z", 40), "an OpenAI API key"},
		{"aws AKIAIOSFODNN7EXAMPLE here", "an AWS access key"},
		{"ghp_" + strings.Repeat("a", 36), "a GitHub token"},
		{"github_pat_" + strings.Repeat("B", 30), "a GitHub token"},
		{"xoxb-1234567890-abcdef", "a Slack token"},
		{"-----BEGIN OPENSSH PRIVATE KEY-----\nabc", "a private key"},
		{"-----BEGIN PRIVATE KEY-----", "a private key"},
		{"the task: ask for sk-ant keys never", ""},
		{"AKIA is a prefix; ghp_short; xoxb-; -----BEGIN PUBLIC KEY-----", ""},
	} {
		t.Run(c.text, func(t *testing.T) {
			s, ok := memoryhook.FindSecret([]byte(c.text))
			if ok != (c.kind != "") || s.Kind != c.kind {
				t.Errorf("found %v %q, want %q", ok, s.Kind, c.kind)
			}
		})
	}
}

func gateScope(t *testing.T, gate *memoryhook.Gate) memoryhook.Scope {
	p, _ := memoryhook.ParsePath("/memories")
	return memoryhook.Scope{Tenant: "t1", Mounts: []memoryhook.Mount{{At: p, Store: "t1~0123abcd"}}, Gate: gate}
}

func TestGate(t *testing.T) {
	ctx := context.Background()
	t.Run("writes past the user's rolling minute are refused, reads are not, and the minute rolls", func(t *testing.T) {
		st := newFileStore(t)
		now := time.Unix(1e9, 0)
		rate := memoryhook.NewWriteRate(func() time.Time { return now })
		alice := gateScope(t, &memoryhook.Gate{MaxPerMinute: 3, Rate: rate, Who: "t1/alice"})
		bob := gateScope(t, &memoryhook.Gate{MaxPerMinute: 3, Rate: rate, Who: "t1/bob"})
		for i := range 3 {
			if r := memoryhook.Exec(ctx, st, alice, []byte(storetest.J("command", "create", "path", "/memories/"+string(rune('a'+i)), "file_text", "x"))); r.IsError {
				t.Fatal(r.Content)
			}
		}
		r := memoryhook.Exec(ctx, st, alice, []byte(storetest.J("command", "delete", "path", "/memories/a")))
		if r.Refused != memoryhook.RefusedRate || r.Content != "Error: Memory write refused: this user's memory takes at most 3 writes a minute; wait a minute, then write again." {
			t.Errorf("4th write: %+v", r)
		}
		if r := memoryhook.Exec(ctx, st, alice, []byte(storetest.J("command", "view", "path", "/memories/a"))); r.IsError {
			t.Errorf("view refused: %s", r.Content)
		}
		if r := memoryhook.Exec(ctx, st, bob, []byte(storetest.J("command", "create", "path", "/memories/z", "file_text", "x"))); r.IsError {
			t.Errorf("bob counted with alice: %s", r.Content)
		}
		now = now.Add(61 * time.Second)
		if r := memoryhook.Exec(ctx, st, alice, []byte(storetest.J("command", "delete", "path", "/memories/a"))); r.IsError {
			t.Errorf("after a minute: %s", r.Content)
		}
	})
	t.Run("a secret assembled by edits is refused and nothing of it is stored", func(t *testing.T) {
		st := newFileStore(t)
		sc := gateScope(t, &memoryhook.Gate{RefuseSecrets: true})
		key := "sk-ant-api03-" + strings.Repeat("Q", 40)
		half := len("sk-ant-api03-QQ") // too short to be a key alone
		mustExec(t, st, sc, storetest.J("command", "create", "path", "/memories/n.md", "file_text", key[:half]+"\n"))
		r := memoryhook.Exec(ctx, st, sc, []byte(storetest.J("command", "str_replace", "path", "/memories/n.md", "old_str", "\n", "new_str", key[half:])))
		if r.Refused != memoryhook.RefusedSecret || strings.Contains(r.Content, key[half:]) {
			t.Errorf("splice: %+v", r)
		}
		vs, err := st.Versions(ctx, "t1~0123abcd", memoryhook.VersionQuery{Content: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if strings.Contains(string(v.Content), key) {
				t.Errorf("history holds the key: %+v", v)
			}
		}
	})
}

func mustExec(t *testing.T, st memoryhook.Store, sc memoryhook.Scope, in string) {
	t.Helper()
	if r := memoryhook.Exec(context.Background(), st, sc, []byte(in)); r.IsError {
		t.Fatalf("%s: %s", in, r.Content)
	}
}

func TestSeed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for name, body := range map[string]string{"progress.md": "# Progress\n", "checklist/features.md": "- [ ] one\n", ".hidden": "no"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st := newFileStore(t)
	const store = "t1~u-00000000000a11ce"
	n, err := memoryhook.Seed(ctx, st, store, memoryhook.Limits{}, dir)
	if err != nil || n != 2 {
		t.Fatalf("seed: %d %v", n, err)
	}
	vs, _ := st.Versions(ctx, store, memoryhook.VersionQuery{})
	for _, v := range vs {
		if v.Actor.Type != memoryhook.ActorSystem {
			t.Errorf("version by %+v", v.Actor)
		}
	}
	sc := memoryhook.Scope{Tenant: store}
	mustExec(t, st, sc, storetest.J("command", "delete", "path", "/memories/progress.md"))
	mustExec(t, st, sc, storetest.J("command", "delete", "path", "/memories/checklist"))
	if n, err := memoryhook.Seed(ctx, st, store, memoryhook.Limits{}, dir); n != 0 || err != nil {
		t.Errorf("seeded again after the user deleted the files: %d %v", n, err)
	}
}
