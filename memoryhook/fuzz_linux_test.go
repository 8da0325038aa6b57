package memoryhook_test

import (
	"errors"
	"path"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// fuzzInput is the tool input the fuzzer's arguments stand for: every
// field a command may read, so any command finds what it needs.
func fuzzInput(cmd, p1, p2, text string, n int) string {
	return rawJ("command", cmd, "path", p1, "old_path", p1, "new_path", p2, "file_text", text,
		"old_str", text, "new_str", p2, "insert_line", n, "insert_text", text, "view_range", []int{n, -1})
}

func addSeeds(f *testing.F) {
	cmds := []string{"view", "create", "str_replace", "insert", "delete", "rename"}
	good := []string{"/memories", "/memories/", "/memories/note.md", "/memories/sub", "/memories/sub/inner.md", "/memories/new/x.md"}
	links := []string{"/memories/link-out/secret.txt", "/memories/link-sib/canary.md", "/memories/link-in/inner.md",
		"/memories/dangling", "/memories/link-self/link-out/dir/x.txt", "/memories/sub/link-up", "/memories/link-out/new.md"}
	for i, c := range cmds {
		for j, p := range append(good, links...) {
			f.Add(c, p, good[(i+j)%len(good)], "inside note", i-1)
		}
		for _, h := range hostilePaths[:len(hostilePaths)-1] { // the 300 KB one only slows the fuzzer
			f.Add(c, h.path, "/memories/x.md", "x", 0)
			f.Add(c, "/memories/note.md", h.path, "note", 1)
		}
	}
}

// FuzzExec: whatever the model sends, nothing outside the tenant root is
// ever opened, read, created, changed or removed. The sandbox watches the
// sibling tenant, the store directory and a directory outside the store
// with inotify, and the tenant holds links planted to all of them.
func FuzzExec(f *testing.F) {
	addSeeds(f)
	s := newSandbox(f)
	before := s.snapshot(f, true)
	s.events(true)
	f.Fuzz(func(t *testing.T, cmd, p1, p2, text string, n int) {
		in := fuzzInput(cmd, p1, p2, text, n)
		r := s.exec(in)
		if r.IsError != strings.HasPrefix(r.Content, "Error: ") {
			t.Errorf("%s: IsError %v with content %q", in, r.IsError, r.Content)
		}
		if r.Unavailable {
			t.Errorf("%s: store unavailable: %v", in, r.Err)
		}
		if strings.Contains(r.Content, s.base) {
			t.Errorf("%s: result reveals the host path: %q", in, r.Content)
		}
		s.verify(t, in, before, true, true)
	})
}

// FuzzGuard: a path ParsePath accepts is canonical and contained.
func FuzzGuard(f *testing.F) {
	for _, h := range hostilePaths {
		f.Add(h.path)
	}
	for _, p := range []string{"/memories", "/memories/", "/memories/a/b.md", "/memories//a", "/memories/.x", "/memories/a%41"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := memoryhook.ParsePath(raw)
		if err != nil {
			var me *memoryhook.Error
			if !errors.As(err, &me) || me.Msg == "" {
				t.Fatalf("ParsePath(%q): error %T %v", raw, err, err)
			}
			return
		}
		c := p.String()
		if !p.Valid() || p.Raw() != raw || len(raw) > memoryhook.MaxPathBytes || len(p.Elems()) > memoryhook.MaxPathDepth || !utf8.ValidString(c) {
			t.Fatalf("ParsePath(%q) = %#v", raw, p)
		}
		if c != "/memories" && !strings.HasPrefix(c, "/memories/") || path.Clean(c) != c {
			t.Fatalf("ParsePath(%q): canonical %q is not clean or not under /memories", raw, c)
		}
		for _, e := range p.Elems() {
			if e == "" || e == "." || e == ".." || len(e) > memoryhook.MaxNameBytes || strings.ContainsAny(e, "/\\") {
				t.Fatalf("ParsePath(%q): component %q", raw, e)
			}
			for _, r := range e {
				if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
					t.Fatalf("ParsePath(%q): component %q has %U", raw, e, r)
				}
			}
		}
		q, err := memoryhook.ParsePath(c)
		if err != nil || q.String() != c || q.Rel() != p.Rel() {
			t.Fatalf("canonical %q does not parse to itself: %v", c, err)
		}
	})
}
