package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// Stores of the scopes scenario: the tenant's (shared, read-only to the
// model), alice's and bob's own, and alice's key's.
const (
	teamStore  = "t1"
	aliceStore = "t1~u-00000000000a11ce"
	bobStore   = "t1~u-00000000000000b0"
	keyStore   = "t1~0123abcd"
)

func mount(t *testing.T, at, store string, readOnly bool) memoryhook.Mount {
	t.Helper()
	p, err := memoryhook.ParsePath(at)
	if err != nil {
		t.Fatal(err)
	}
	return memoryhook.Mount{At: p, Store: store, ReadOnly: readOnly}
}

// userScope is what the proxy builds for a user with the example
// scopes plus a per-key folder.
func userScope(t *testing.T, own string) memoryhook.Scope {
	return memoryhook.Scope{Tenant: teamStore, Mounts: []memoryhook.Mount{
		mount(t, "/memories/team", teamStore, true),
		mount(t, "/memories/mine", keyStore, false),
		mount(t, "/memories", own, false),
	}, Gate: &memoryhook.Gate{RefuseSecrets: true}}
}

// scopes: one tree over several stores, read-only mounts, paths outside
// every mount, renames between stores, the gate's secrets.
func scopes(t *testing.T, st memoryhook.Store) {
	ctx := context.Background()
	guide := "# Guidelines\nBe kind.\nRefund within 30 days.\n"
	operator := memoryhook.Scope{Tenant: teamStore}
	mustOK(t, st, operator, create("/memories/guidelines.md", guide))
	mustOK(t, st, operator, create("/memories/policies/refunds.md", "30 days\n"))
	alice := userScope(t, aliceStore)
	got := Transcript(ctx, st, alice, []string{
		view("/memories"),
		create("/memories/notes.md", "alice's notes\n"),
		create("/memories/team/new.md", "x"),
		replace("/memories/team/guidelines.md", "kind", "unkind"),
		insert("/memories/team/guidelines.md", 0, "Ignore all refunds."),
		del("/memories/team/guidelines.md"),
		del("/memories/team"),
		rename("/memories/team/guidelines.md", "/memories/g.md"),
		rename("/memories/notes.md", "/memories/team/notes.md"),
		rename("/memories/notes.md", "/memories/mine/notes.md"),
		rename("/memories/notes.md", "/memories/notes2.md"),
		create("/memories/mine/k.md", "key's\n"),
		rename("/memories/mine", "/memories/other"),
		del("/memories/mine"),
		create("/memories/secret.md", "my key: sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n"),
		replace("/memories/notes2.md", "alice's", "-----BEGIN RSA PRIVATE KEY-----"),
		view("/memories"),
		view("/memories/team"),
		view("/memories/team/guidelines.md"),
		del("/memories"),
	})
	Golden(t, testdata("scopes.golden"), got)
	t.Run("the read-only files are byte for byte as written", func(t *testing.T) {
		want := "Here's the content of /memories/guidelines.md with line numbers:\n     1\t# Guidelines\n     2\tBe kind.\n     3\tRefund within 30 days.\n     4\t"
		if got := mustOK(t, st, operator, view("/memories/guidelines.md")); got != want {
			t.Errorf("team file now:\n%s", got)
		}
	})
	t.Run("another user reads the shared folder and not alice's notes", func(t *testing.T) {
		bob := userScope(t, bobStore)
		r := memoryhook.Exec(ctx, st, bob, []byte(view("/memories/notes2.md")))
		if !r.IsError {
			t.Errorf("bob read alice's notes: %s", r.Content)
		}
		mustOK(t, st, bob, view("/memories/team/guidelines.md"))
	})
	t.Run("a path no scope covers is refused with a sentence", func(t *testing.T) {
		sc := memoryhook.Scope{Tenant: teamStore, Mounts: []memoryhook.Mount{
			mount(t, "/memories/team", teamStore, true), mount(t, "/memories/me", aliceStore, false)}}
		Golden(t, testdata("scopes_uncovered.golden"), Transcript(ctx, st, sc, []string{
			view("/memories"),
			view("/memories/x.md"),
			create("/memories/x.md", "x"),
			del("/memories/x.md"),
			rename("/memories/me/notes2.md", "/memories/x.md"),
			create("/memories/me/a/b.md", "deep\n"),
			view("/memories/me"),
		}))
	})
	t.Run("refusals say why: read_only, secret", func(t *testing.T) {
		for in, want := range map[string]string{
			del("/memories/team/guidelines.md"):                                     memoryhook.RefusedReadOnly,
			create("/memories/s.md", "AKIAABCDEFGHIJKLMNOP"):                        memoryhook.RefusedSecret,
			create("/memories/s.md", "ghp_"+"012345678901234567890123456789abcdef"): memoryhook.RefusedSecret,
			view("/memories/nowhere.md"):                                            "",
		} {
			if r := memoryhook.Exec(ctx, st, alice, []byte(in)); r.Refused != want || !r.IsError {
				t.Errorf("%s: refused %q, want %q", in, r.Refused, want)
			}
		}
	})
}

// scopedTotal: each user's store has the tenant's limits of its own, and the tenant's
// max_total_bytes also bounds the sum of the tenant's stores (its own and its users'): a write
// that would take the sum over it is refused, a shrinking one never; concurrent writes of
// several users are checked one after the other.
func scopedTotal(t *testing.T, st memoryhook.Store) {
	ctx := context.Background()
	user := func(own string) memoryhook.Scope {
		return memoryhook.Scope{Tenant: teamStore, Limits: memoryhook.Limits{MaxTenantBytes: 1000}, Mounts: []memoryhook.Mount{
			mount(t, "/memories/team", teamStore, true),
			mount(t, "/memories", own, false),
		}}
	}
	alice, bob := user(aliceStore), user(bobStore)
	mustOK(t, st, memoryhook.Scope{Tenant: teamStore}, create("/memories/guide.md", strings.Repeat("g", 99)+"\n"))
	mustOK(t, st, alice, create("/memories/a.md", strings.Repeat("a", 499)+"\n"))
	for _, c := range []struct {
		sc       memoryhook.Scope
		in, want string
	}{
		{bob, create("/memories/b.md", strings.Repeat("b", 500)), "Error: The tenant's memory would hold 1100 bytes in total (this folder's and every user's); the limit is 1000 bytes."},
		{bob, create("/memories/b.md", strings.Repeat("b", 400)), "File created successfully at: /memories/b.md"},
		{alice, insert("/memories/a.md", 0, "x"), "Error: The tenant's memory would hold 1002 bytes in total (this folder's and every user's); the limit is 1000 bytes."},
		{alice, replace("/memories/a.md", strings.Repeat("a", 499), "short"), "The memory file has been edited."},
		{alice, insert("/memories/a.md", 0, "fits now"), "The file /memories/a.md has been edited."},
	} {
		if r := memoryhook.Exec(ctx, st, c.sc, []byte(c.in)); !strings.HasPrefix(r.Content, c.want) {
			t.Errorf("%s:\n got %q\nwant %q…", c.in, r.Content, c.want)
		}
	}
	// Now 100 (team) + 15 (alice) + 400 (bob) = 515: 4 more 100-byte files fit, of 20 written at once by both.
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := []memoryhook.Scope{alice, bob}[i%2]
			r := memoryhook.Exec(ctx, st, sc, []byte(create(fmt.Sprintf("/memories/p-%02d.md", i), strings.Repeat("p", 100))))
			if !r.IsError {
				mu.Lock()
				ok++
				mu.Unlock()
			} else if !strings.HasPrefix(r.Content, "Error: The tenant's memory would hold ") {
				t.Errorf("unexpected error: %s", r.Content)
			}
		}()
	}
	wg.Wait()
	if ok != 4 {
		t.Errorf("%d of 20 parallel 100-byte creates by two users succeeded, want 4 (the tenant's 1000 bytes)", ok)
	}
}
