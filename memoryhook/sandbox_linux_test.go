package memoryhook_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// sandbox is a store directory laid out as an attacker would like it:
// tenant t1 (the one under test) holds symlinks planted by someone else,
// pointing outside the store, into the sibling tenant t2 and inside t1;
// t2 and a directory outside the store hold canaries. An inotify watch on
// everything outside t1 sees any open, read, write, create or delete there.
//
//	base/store/t1/{note.md, sub/inner.md, sub/link-up, link-*, dangling}
//	base/store/t2/{canary.md, deep/canary2.md}
//	base/store/t3 -> ../outside          (a tenant directory that is a link)
//	base/outside/{secret.txt, dir/x.txt}
type sandbox struct {
	base, store, outside string
	st                   *memoryhook.FileStore
	sc                   memoryhook.Scope
	fd                   int
	wds                  map[int32]string // watch descriptor → directory
}

func newSandbox(t testing.TB) *sandbox {
	t.Helper()
	base := t.TempDir()
	s := &sandbox{base: base, store: filepath.Join(base, "store"), outside: filepath.Join(base, "outside"),
		sc: memoryhook.Scope{Tenant: "t1"}, wds: map[int32]string{}}
	files := map[string]string{
		"store/t1/note.md":         "inside note\n",
		"store/t1/sub/inner.md":    "inner\n",
		"store/t2/canary.md":       "t2 canary\n",
		"store/t2/deep/canary2.md": "t2 deep canary\n",
		"outside/secret.txt":       "outside secret\n",
		"outside/dir/x.txt":        "outside x\n",
	}
	for name, content := range files {
		p := filepath.Join(base, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o700))
		must(t, os.WriteFile(p, []byte(content), 0o600))
	}
	links := map[string]string{
		"store/t1/link-out":     s.outside,
		"store/t1/link-out-rel": "../../outside",
		"store/t1/link-file":    filepath.Join(s.outside, "secret.txt"),
		"store/t1/link-sib":     "../t2",
		"store/t1/link-sib-abs": filepath.Join(s.store, "t2"),
		"store/t1/link-in":      "sub",
		"store/t1/link-in-file": "note.md",
		"store/t1/link-self":    ".",
		"store/t1/sub/link-up":  "../../t2/canary.md",
		"store/t1/dangling":     filepath.Join(s.outside, "new-file.md"),
		"store/t3":              "../outside",
	}
	for name, target := range links {
		must(t, os.Symlink(target, filepath.Join(base, name)))
	}
	st, err := memoryhook.NewFileStore(s.store)
	must(t, err)
	s.st = st
	t.Cleanup(func() { st.Close() })

	s.fd, err = syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	must(t, err)
	t.Cleanup(func() { syscall.Close(s.fd) })
	const mask = syscall.IN_ACCESS | syscall.IN_MODIFY | syscall.IN_ATTRIB | syscall.IN_CLOSE_WRITE |
		syscall.IN_OPEN | syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO | syscall.IN_CREATE |
		syscall.IN_DELETE | syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF
	for _, dir := range []string{base, s.store, s.outside, filepath.Join(s.outside, "dir"),
		filepath.Join(s.store, "t2"), filepath.Join(s.store, "t2", "deep")} {
		wd, err := syscall.InotifyAddWatch(s.fd, dir, mask)
		must(t, err)
		s.wds[int32(wd)] = dir
	}
	return s
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// events drains the inotify queue. Events are queued by the system call
// that causes them, so after Exec returns they are all there. allowT1
// accepts opening t1 itself (the tenant root), which happens on every
// store command.
func (s *sandbox) events(allowT1 bool) []string {
	var out []string
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.Read(s.fd, buf)
		if n <= 0 || err != nil {
			return out
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := string(bytes.TrimRight(buf[off+syscall.SizeofInotifyEvent:off+syscall.SizeofInotifyEvent+nameLen], "\x00"))
			off += syscall.SizeofInotifyEvent + nameLen
			dir := s.wds[wd]
			if allowT1 && dir == s.store && name == "t1" {
				continue
			}
			out = append(out, fmt.Sprintf("%s/%s mask=%#x", strings.TrimPrefix(dir, s.base), name, mask))
		}
	}
}

// snapshot describes everything under base without following links.
func (s *sandbox) snapshot(t testing.TB, skipT1 bool) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(s.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.base, p)
		// t1's history log is t1's as much as its tree is.
		if skipT1 && (rel == "store/t1" || strings.HasPrefix(rel, "store/t1/") || strings.HasPrefix(rel, "store/.history/t1.jsonl")) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %v", rel, fi.Mode())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			line += fmt.Sprintf(" %q", b)
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func (s *sandbox) exec(in string) memoryhook.Result {
	return memoryhook.Exec(context.Background(), s.st, s.sc, []byte(in))
}

// verify fails if anything outside the allowed area was touched since the
// last call, or if the snapshot differs from before. It reads the sandbox
// itself, so it drains its own events afterwards.
func (s *sandbox) verify(t testing.TB, what, before string, allowT1, skipT1 bool) {
	t.Helper()
	if ev := s.events(allowT1); len(ev) > 0 {
		t.Errorf("%s touched the file system outside its tenant root:\n%s", what, strings.Join(ev, "\n"))
	}
	if after := s.snapshot(t, skipT1); after != before {
		t.Errorf("%s changed the disk:\nbefore:\n%s\nafter:\n%s", what, before, after)
	}
	s.events(true)
}

// The detector itself must see an access outside t1, or the tests that
// rely on it prove nothing.
func TestSandboxSeesAccessOutsideTheTenant(t *testing.T) {
	s := newSandbox(t)
	s.events(true)
	if _, err := os.ReadFile(filepath.Join(s.outside, "secret.txt")); err != nil {
		t.Fatal(err)
	}
	if len(s.events(true)) == 0 {
		t.Error("reading outside/secret.txt raised no event")
	}
	if _, err := os.ReadFile(filepath.Join(s.store, "t1", "link-sib", "canary.md")); err != nil {
		t.Fatal(err)
	}
	if len(s.events(true)) == 0 {
		t.Error("reading t2's canary through a link raised no event")
	}
	if r := s.exec(`{"command":"view","path":"/memories/note.md"}`); r.IsError {
		t.Fatal(r.Content)
	}
	if ev := s.events(false); len(ev) == 0 {
		t.Error("a command raised no event for opening the tenant root")
	}
}
