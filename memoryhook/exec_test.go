package memoryhook_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

func TestFormatSize(t *testing.T) {
	// Expected values are what the TS SDK's formatFileSize prints.
	for n, want := range map[int64]string{
		0: "0B", 1: "1B", 512: "512B", 1023: "1023B", 1024: "1K", 1075: "1.0K", 1126: "1.1K",
		1280: "1.3K", 1536: "1.5K", 2047: "2.0K", 4096: "4K", 10239: "10.0K", 1024000: "1000K",
		1048575: "1024.0K", 1 << 20: "1M", 1310720: "1.3M", 1 << 30: "1G", 1 << 40: "1024G",
	} {
		if got := memoryhook.FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func exec(t *testing.T, st memoryhook.Store, sc memoryhook.Scope, in string) memoryhook.Result {
	t.Helper()
	return memoryhook.Exec(context.Background(), st, sc, []byte(in))
}

func TestViewRefusesFilesOverTheLineLimit(t *testing.T) {
	st := newFileStore(t)
	sc := memoryhook.Scope{Tenant: "t1"}
	exec(t, st, sc, `{"command":"view","path":"/memories"}`) // makes the tenant directory
	// 999,999 newlines: 1,000,000 lines, under the size limit. Only a file
	// put there by other means can have that many: writes refuse it.
	must(t, os.WriteFile(filepath.Join(st.Dir(), "t1", "many.md"), []byte(strings.Repeat("\n", 999999)), 0o600))
	r := exec(t, st, sc, `{"command":"view","path":"/memories/many.md"}`)
	if want := "Error: File /memories/many.md has too many lines (1000000). Maximum is 999,999 lines."; r.Content != want {
		t.Errorf("got %q", r.Content)
	}
	must(t, os.WriteFile(filepath.Join(st.Dir(), "t1", "ok.md"), []byte(strings.Repeat("\n", 999998)), 0o600))
	if r := exec(t, st, sc, `{"command":"view","path":"/memories/ok.md","view_range":[999999,-1]}`); r.Content != "Here's the content of /memories/ok.md with line numbers:\n999999\t" {
		t.Errorf("got %q", r.Content)
	}
	if r := exec(t, st, sc, `{"command":"insert","path":"/memories/ok.md","insert_line":0,"insert_text":"x"}`); r.Content != "Error: File /memories/ok.md would have 1000000 lines; the limit is 999,999 lines." {
		t.Errorf("got %q", r.Content)
	}
}

func TestFilesAreOwnerOnlyAndNoTempFilesRemain(t *testing.T) {
	st := newFileStore(t)
	sc := memoryhook.Scope{Tenant: "t1"}
	for _, in := range []string{
		`{"command":"create","path":"/memories/a/b/c.md","file_text":"one\n"}`,
		`{"command":"str_replace","path":"/memories/a/b/c.md","old_str":"one","new_str":"two"}`,
		`{"command":"insert","path":"/memories/a/b/c.md","insert_line":0,"insert_text":"zero"}`,
		`{"command":"rename","old_path":"/memories/a/b/c.md","new_path":"/memories/d/e.md"}`,
	} {
		if r := exec(t, st, sc, in); r.IsError || !r.Wrote {
			t.Fatalf("%s: %+v", in, r)
		}
	}
	err := filepath.WalkDir(st.Dir(), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		switch {
		case strings.Contains(d.Name(), ".tmp-"):
			t.Errorf("temporary file left: %s", p)
		case p == st.Dir():
		case d.IsDir() && fi.Mode().Perm() != 0o700:
			t.Errorf("%s: mode %v, want 0700", p, fi.Mode())
		case !d.IsDir() && fi.Mode().Perm() != 0o600:
			t.Errorf("%s: mode %v, want 0600", p, fi.Mode())
		}
		return nil
	})
	must(t, err)
	b, err := os.ReadFile(filepath.Join(st.Dir(), "t1", "d", "e.md"))
	if err != nil || string(b) != "zero\ntwo\n" {
		t.Errorf("content %q, %v", b, err)
	}
}

func TestNewFileStoreCreatesMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not", "yet")
	st, err := memoryhook.NewFileStore(dir)
	must(t, err)
	defer st.Close()
	if err := st.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store dir: %v %v", fi, err)
	}
}

func TestCanceledContextWritesNothing(t *testing.T) {
	st := newFileStore(t)
	sc := memoryhook.Scope{Tenant: "t1"}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := memoryhook.Exec(ctx, st, sc, []byte(`{"command":"create","path":"/memories/a.md","file_text":"x"}`))
	if r.Content != "Error: memory store unavailable: request canceled" || !r.Unavailable || !r.Wrote {
		t.Errorf("got %+v", r)
	}
	if r := exec(t, st, sc, `{"command":"view","path":"/memories/a.md"}`); !r.IsError {
		t.Errorf("file was written: %s", r.Content)
	}
}

// failing is a Backend whose storage is broken in a way that names a host path.
type failing struct{ err error }

func (f failing) Stat(context.Context, memoryhook.Scope, memoryhook.Path) (memoryhook.Entry, error) {
	return memoryhook.Entry{}, f.err
}
func (f failing) ReadFile(context.Context, memoryhook.Scope, memoryhook.Path) ([]byte, error) {
	return nil, f.err
}
func (f failing) List(context.Context, memoryhook.Scope, memoryhook.Path, int) ([]memoryhook.Entry, error) {
	return nil, f.err
}
func (f failing) Create(context.Context, memoryhook.Scope, memoryhook.Path, []byte) error {
	return f.err
}
func (f failing) Update(context.Context, memoryhook.Scope, memoryhook.Path, func([]byte) ([]byte, error)) error {
	return f.err
}
func (f failing) Delete(context.Context, memoryhook.Scope, memoryhook.Path) error { return f.err }
func (f failing) Rename(context.Context, memoryhook.Scope, memoryhook.Path, memoryhook.Path) error {
	return f.err
}
func (f failing) Ready(context.Context) error { return f.err }

func TestUnavailableStoreNeverRevealsHostPaths(t *testing.T) {
	sc := memoryhook.Scope{Tenant: "t1"}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&fs.PathError{Op: "openat", Path: "/srv/ctxproxy/memory/t1/a.md", Err: syscall.EROFS}, "read-only file system"},
		{&fs.PathError{Op: "write", Path: "/srv/ctxproxy/memory/t1/.tmp-1", Err: syscall.ENOSPC}, "no space left on device"},
		{&fs.PathError{Op: "open", Path: "/srv/x", Err: fs.ErrPermission}, "permission denied"},
		{context.DeadlineExceeded, "timed out"},
		{memoryhook.Unavailable("database not reachable", errors.New("dial tcp 10.0.0.5:5432: connection refused")), "database not reachable"},
		{errors.New("something at /srv/ctxproxy went wrong"), "internal error"},
	} {
		st := memoryhook.NewStore(failing{tc.err})
		for _, in := range []string{
			`{"command":"view","path":"/memories/a.md"}`,
			`{"command":"create","path":"/memories/a.md","file_text":"x"}`,
			`{"command":"str_replace","path":"/memories/a.md","old_str":"x","new_str":"y"}`,
			`{"command":"insert","path":"/memories/a.md","insert_line":0,"insert_text":"x"}`,
			`{"command":"delete","path":"/memories/a.md"}`,
			`{"command":"rename","old_path":"/memories/a.md","new_path":"/memories/b.md"}`,
		} {
			r := exec(t, st, sc, in)
			if r.Content != "Error: memory store unavailable: "+tc.want || !r.IsError || !r.Unavailable || !errors.Is(r.Err, tc.err) {
				t.Errorf("%v / %s: %+v", tc.err, in, r)
			}
			if r.Wrote != (r.Command != "view") {
				t.Errorf("%s: Wrote %v after an unavailable error", in, r.Wrote)
			}
		}
	}
}

func TestResultReportsCommandAndWrote(t *testing.T) {
	st := newFileStore(t)
	sc := memoryhook.Scope{Tenant: "t1"}
	for _, tc := range []struct {
		in           string
		cmd          string
		wrote, isErr bool
	}{
		{`{"command":"create","path":"/memories/a.md","file_text":"x"}`, "create", true, false},
		{`{"command":"create","path":"/memories/a.md","file_text":"x"}`, "create", false, true},
		{`{"command":"view","path":"/memories/a.md"}`, "view", false, false},
		{`{"command":"str_replace","path":"/memories/a.md","old_str":"x","new_str":"y"}`, "str_replace", true, false},
		{`{"command":"str_replace","path":"/memories/a.md","old_str":"x","new_str":"y"}`, "str_replace", false, true},
		{`{"command":"insert","path":"/memories/a.md","insert_line":1,"insert_text":"z"}`, "insert", true, false},
		{`{"command":"rename","old_path":"/memories/a.md","new_path":"/memories/b.md"}`, "rename", true, false},
		{`{"command":"delete","path":"/memories/b.md"}`, "delete", true, false},
		{`{"command":"delete","path":"/memories/b.md"}`, "delete", false, true},
		{`{"command":"delete","path":"/memories/../x"}`, "delete", false, true},
		{`{"command":"frobnicate"}`, "frobnicate", false, true},
		{`{}`, "", false, true},
	} {
		r := exec(t, st, sc, tc.in)
		if r.Command != tc.cmd || r.Wrote != tc.wrote || r.IsError != tc.isErr || r.Unavailable || (r.Err != nil) != tc.isErr {
			t.Errorf("%s: %+v", tc.in, r)
		}
	}
}

// InsertAt works on bytes; it must agree with the SDKs' split, splice, join.
func TestInsertAtMatchesSplitSpliceJoin(t *testing.T) {
	p, _ := memoryhook.ParsePath("/memories/x")
	for _, content := range []string{"", "\n", "a", "a\n", "a\nb", "a\nb\n", "\n\n\n", "one\ntwo\nthree\n"} {
		lines := strings.Split(content, "\n")
		for n := 0; n <= len(lines); n++ {
			for _, text := range []string{"", "x", "x\n", "x\ny", "x\n\n"} {
				ref := append(append(append([]string{}, lines[:n]...), strings.TrimSuffix(text, "\n")), lines[n:]...)
				got, err := memoryhook.InsertAt(p, []byte(content), n, text)
				if err != nil || string(got) != strings.Join(ref, "\n") {
					t.Errorf("InsertAt(%q, %d, %q) = %q, %v; want %q", content, n, text, got, err, strings.Join(ref, "\n"))
				}
			}
		}
	}
}
