package memoryhook_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/memoryhook/storetest"
)

// A directory swapped for a symlink (and back) while commands run on paths
// through it: each refusal is the symlink sentence (or an answer about the
// path as it was at that moment), never "memory store unavailable".
func TestSymlinkSwapRaceGivesTheSymlinkSentence(t *testing.T) {
	s := newSandbox(t)
	dir := filepath.Join(s.store, "t1")
	d, link := filepath.Join(dir, "d"), filepath.Join(dir, "d-link")
	must(t, os.Mkdir(d, 0o700))
	must(t, os.WriteFile(filepath.Join(d, "x.md"), []byte("x\n"), 0o600))
	must(t, os.Symlink(s.outside, link))
	before := s.snapshot(t, true)
	s.events(true)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // swap /memories/d, atomically, with a link to a directory outside
		defer wg.Done()
		for !stop.Load() {
			if err := unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	inputs := []string{
		storetest.J("command", "view", "path", "/memories/d/x.md"),
		storetest.J("command", "view", "path", "/memories/d"),
		storetest.J("command", "str_replace", "path", "/memories/d/x.md", "old_str", "x", "new_str", "x"),
		storetest.J("command", "insert", "path", "/memories/d/x.md", "insert_line", 0, "insert_text", "y"),
		storetest.J("command", "create", "path", "/memories/d/new.md", "file_text", "n"),
		storetest.J("command", "delete", "path", "/memories/d/new.md"),
		storetest.J("command", "rename", "old_path", "/memories/d/x.md", "new_path", "/memories/d/y.md"),
		storetest.J("command", "rename", "old_path", "/memories/d/y.md", "new_path", "/memories/d/x.md"),
	}
	bad := map[string]int{}
	links := 0
	for i := range 4000 {
		in := inputs[i%len(inputs)]
		r := s.exec(in)
		if r.Content == viaSymlink {
			links++
		}
		if r.Unavailable {
			bad[in+" → "+r.Content+" ("+r.Err.Error()+")"]++
		}
	}
	stop.Store(true)
	wg.Wait()
	for c, n := range bad {
		t.Errorf("%d× %s", n, c)
	}
	if links == 0 {
		t.Error("no command met the link: the race did not happen")
	}
	s.verify(t, "symlink swap race", before, true, true)
}

// A regular file with a second hard link (planted from outside: the tool
// makes none) is neither read nor edited; it can still be deleted, which
// removes only the tenant's name for it.
func TestHardLinkedFilesAreRefused(t *testing.T) {
	s := newSandbox(t)
	dir := filepath.Join(s.store, "t1")
	must(t, os.Link(filepath.Join(s.outside, "secret.txt"), filepath.Join(dir, "linked.md")))
	must(t, os.WriteFile(filepath.Join(dir, "own.md"), []byte("own\n"), 0o600))
	must(t, os.Link(filepath.Join(dir, "own.md"), filepath.Join(dir, "own-too.md")))
	const viaHardLink = "Error: Path would escape /memories directory via hard link"
	for _, p := range []string{"/memories/linked.md", "/memories/own.md", "/memories/own-too.md"} {
		for _, in := range []string{
			storetest.J("command", "view", "path", p),
			storetest.J("command", "view", "path", p, "view_range", []int{1, 1}),
			storetest.J("command", "str_replace", "path", p, "old_str", "secret", "new_str", "pwned"),
			storetest.J("command", "str_replace", "path", p, "old_str", "own", "new_str", "pwned"),
			storetest.J("command", "insert", "path", p, "insert_line", 0, "insert_text", "pwned"),
		} {
			if r := s.exec(in); r.Content != viaHardLink || r.Wrote {
				t.Errorf("%s: %q", in, r.Content)
			}
		}
	}
	if got, _ := os.ReadFile(filepath.Join(s.outside, "secret.txt")); string(got) != "outside secret\n" {
		t.Errorf("the outside file changed: %q", got)
	}
	// Nor does the history adopt it, where an operator could read it.
	mems, err := s.st.Memories(context.Background(), "t1")
	must(t, err)
	for _, m := range mems {
		if strings.Contains(m.Path, "linked") || strings.Contains(m.Path, "own") {
			t.Errorf("history adopted the hard-linked %s", m.Path)
		}
	}
	if r := s.exec(storetest.J("command", "delete", "path", "/memories/linked.md")); r.IsError {
		t.Errorf("delete: %s", r.Content)
	}
	if _, err := os.Stat(filepath.Join(s.outside, "secret.txt")); err != nil {
		t.Errorf("deleting the tenant's link removed the outside file: %v", err)
	}
	if r := s.exec(storetest.J("command", "delete", "path", "/memories/own-too.md")); r.IsError {
		t.Errorf("delete: %s", r.Content)
	}
	if r := s.exec(storetest.J("command", "view", "path", "/memories/own.md")); !strings.Contains(r.Content, "\town\n") {
		t.Errorf("with one link left the file reads again: %q", r.Content)
	}
}

// A tree far deeper than a path may reach (planted, or left by an older
// version) is counted, renamed and deleted by walks that open each
// directory once from its parent: linear in the entries. The old walks
// resolved every path from the root (quadratic: 43 s for 3,000 levels;
// now what is left is the file system's own cost per directory).
// The deadline is only a hang guard.
func TestDeepTreesAreWalkedOnce(t *testing.T) {
	st := newFileStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sc := memoryhook.Scope{Tenant: "t1"}
	exec(t, st, sc, `{"command":"view","path":"/memories"}`) // makes the tenant directory
	const depth = 1000
	built := time.Now()
	root, err := os.OpenRoot(filepath.Join(st.Dir(), "t1"))
	must(t, err)
	defer root.Close()
	d := root
	for i := range depth { // built one level at a time, like the model did (a path of 3,000 names is too long to pass in one call)
		must(t, d.Mkdir("d", 0o700))
		if i == depth-1 {
			must(t, d.WriteFile("d/leaf.md", []byte("leaf\n"), 0o600))
		}
		next, err := d.OpenRoot("d")
		must(t, err)
		if d != root {
			d.Close()
		}
		d = next
	}
	d.Close()
	t.Logf("built in %v", time.Since(built))
	// A new store recounts the tenant's usage on its first write.
	st2, err := memoryhook.NewFileStore(st.Dir())
	must(t, err)
	defer st2.Close()
	for _, c := range []struct{ in, want string }{
		{`{"command":"create","path":"/memories/x.md","file_text":"x"}`, "File created successfully at: /memories/x.md"},
		{`{"command":"rename","old_path":"/memories/d","new_path":"/memories/e/f"}`,
			"Error: Cannot rename /memories/d to /memories/e/f: a path inside it would have 1002 components below /memories; the limit is 20."},
		{`{"command":"rename","old_path":"/memories/d","new_path":"/memories/e"}`, "Successfully renamed /memories/d to /memories/e"},
		{`{"command":"delete","path":"/memories/e"}`, "Successfully deleted /memories/e"},
		{`{"command":"create","path":"/memories/y.md","file_text":"y"}`, "File created successfully at: /memories/y.md"},
	} {
		start := time.Now()
		if r := memoryhook.Exec(ctx, st2, sc, []byte(c.in)); r.Content != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.in, r.Content, c.want)
		}
		t.Logf("%s: %v", c.in, time.Since(start))
	}
}
