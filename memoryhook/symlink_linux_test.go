package memoryhook_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/memoryhook/storetest"
)

const viaSymlink = "Error: Path would escape /memories directory via symlink"

// Every command refuses a path that is, or passes through, a planted
// symlink, whether it points outside the store, into another tenant or
// inside the tenant; nothing outside t1 is opened and nothing changes.
func TestSymlinksAreRefusedByEveryCommand(t *testing.T) {
	s := newSandbox(t)
	before := s.snapshot(t, false)
	s.events(true)
	through := []string{
		"/memories/link-out", "/memories/link-out/", "/memories/link-out/secret.txt", "/memories/link-out/dir/x.txt",
		"/memories/link-out/new.md", "/memories/link-out/newdir/new.md",
		"/memories/link-out-rel", "/memories/link-out-rel/secret.txt",
		"/memories/link-file",
		"/memories/link-sib", "/memories/link-sib/canary.md", "/memories/link-sib/deep/canary2.md", "/memories/link-sib/new.md",
		"/memories/link-sib-abs/canary.md",
		"/memories/link-in", "/memories/link-in/inner.md", "/memories/link-in/new.md",
		"/memories/link-in-file",
		"/memories/link-self", "/memories/link-self/note.md", "/memories/link-self/link-out/secret.txt",
		"/memories/sub/link-up",
		"/memories/dangling", "/memories/dangling/x.md",
	}
	for _, p := range through {
		for _, in := range []string{
			storetest.J("command", "view", "path", p),
			storetest.J("command", "view", "path", p, "view_range", []int{1, 2}),
			storetest.J("command", "create", "path", p, "file_text", "pwned"),
			storetest.J("command", "str_replace", "path", p, "old_str", "secret", "new_str", "pwned"),
			storetest.J("command", "str_replace", "path", p, "old_str", "canary", "new_str", "pwned"),
			storetest.J("command", "insert", "path", p, "insert_line", 0, "insert_text", "pwned"),
			storetest.J("command", "delete", "path", p),
			storetest.J("command", "rename", "old_path", p, "new_path", "/memories/moved"),
			storetest.J("command", "rename", "old_path", "/memories/note.md", "new_path", p),
			storetest.J("command", "rename", "old_path", "/memories/sub", "new_path", p),
		} {
			if strings.HasPrefix(p, "/memories/sub/") && strings.Contains(in, `"old_path":"/memories/sub"`) {
				continue // refused earlier: the destination is inside the source
			}
			r := s.exec(in)
			if r.Content != viaSymlink || !r.IsError || r.Wrote {
				t.Errorf("%s\n got %q", in, r.Content)
			}
			s.verify(t, in, before, true, false)
		}
	}
}

// Listings leave links out (the SDKs follow in-root ones; we never do).
func TestListingSkipsSymlinks(t *testing.T) {
	s := newSandbox(t)
	before := s.snapshot(t, false)
	s.events(true)
	r := s.exec(`{"command":"view","path":"/memories"}`)
	want := "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items and node_modules:\n" +
		"4K\t/memories\n12B\t/memories/note.md\n4K\t/memories/sub/\n6B\t/memories/sub/inner.md"
	if r.Content != want {
		t.Errorf("got\n%s\nwant\n%s", r.Content, want)
	}
	s.verify(t, "view /memories", before, true, false)
}

// A tenant directory that is itself a link is refused.
func TestTenantDirectoryLinkIsRefused(t *testing.T) {
	s := newSandbox(t)
	before := s.snapshot(t, false)
	s.events(true)
	s.sc.Tenant = "t3" // base/store/t3 -> ../outside
	for _, in := range []string{
		`{"command":"view","path":"/memories"}`,
		`{"command":"view","path":"/memories/secret.txt"}`,
		`{"command":"create","path":"/memories/new.md","file_text":"pwned"}`,
		`{"command":"delete","path":"/memories/secret.txt"}`,
	} {
		if r := s.exec(in); r.Content != viaSymlink {
			t.Errorf("%s: %q", in, r.Content)
		}
	}
	// Lstat of store/t3 is no event; only the link's target may not be opened.
	if ev := s.events(true); len(ev) > 0 {
		t.Errorf("touched: %v", ev)
	}
	if after := s.snapshot(t, false); after != before {
		t.Errorf("disk changed:\n%s", after)
	}
}

// Deleting a directory that contains a link removes the link, never its target.
func TestDeleteRemovesLinksNotTargets(t *testing.T) {
	s := newSandbox(t)
	before := s.snapshot(t, true)
	s.events(true)
	if r := s.exec(`{"command":"delete","path":"/memories/sub"}`); r.IsError {
		t.Fatal(r.Content)
	}
	s.verify(t, "delete /memories/sub", before, true, true)
	if _, err := os.Lstat(filepath.Join(s.store, "t1", "sub")); !os.IsNotExist(err) {
		t.Errorf("sub still there: %v", err)
	}
}

// Tenant names that could leave the store directory are refused.
func TestInvalidTenantNames(t *testing.T) {
	s := newSandbox(t)
	before := s.snapshot(t, false)
	s.events(true)
	for _, tenant := range []string{"", ".", "..", "../outside", "t1/../t2", "T1", "-x", ".hidden", "a b", "t1\x00", strings.Repeat("a", 64)} {
		s.sc = memoryhook.Scope{Tenant: tenant}
		r := s.exec(`{"command":"create","path":"/memories/x.md","file_text":"x"}`)
		if r.Content != "Error: memory store unavailable: invalid tenant name" || !r.Unavailable {
			t.Errorf("tenant %q: %+v", tenant, r)
		}
	}
	s.verify(t, "invalid tenants", before, false, false)
}
