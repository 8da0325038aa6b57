package memoryhook

import (
	"context"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The file store's write and its version happen both or neither, whatever
// step a crash hits: a child process runs one model command and is killed
// (SIGKILL) at a step; the store opened afterwards must show the write with
// its version, or neither.

var crashCommands = map[string]string{
	"create": `{"command":"create","path":"/memories/new/n.md","file_text":"new"}`,
	"update": `{"command":"str_replace","path":"/memories/a.md","old_str":"old","new_str":"new"}`,
	"delete": `{"command":"delete","path":"/memories/d"}`,
	"rename": `{"command":"rename","old_path":"/memories/d","new_path":"/memories/e/d2"}`,
}

// TestCrashChild is the child: it runs only when the parent says so.
func TestCrashChild(t *testing.T) {
	dir, cmd, step := os.Getenv("CRASH_DIR"), os.Getenv("CRASH_CMD"), os.Getenv("CRASH_STEP")
	if dir == "" {
		t.Skip("run by TestFileStoreCrashSafety")
	}
	st, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	crashHook = func(s string) {
		if s == step {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	sc := Scope{Tenant: "acme", Actor: Actor{Type: ActorModel, RequestID: "req_crash"}}
	if r := Exec(context.Background(), st, sc, []byte(crashCommands[cmd])); r.IsError {
		t.Fatal(r.Content)
	}
}

func TestFileStoreCrashSafety(t *testing.T) {
	for _, cmd := range []string{"create", "update", "delete", "rename"} {
		for _, step := range []string{"intent", "applied", "committed"} {
			t.Run(cmd+" killed after "+step, func(t *testing.T) {
				dir := crashSetup(t)
				crashRun(t, dir, cmd, step)
				applied := crashCheck(t, dir)
				if want := step != "intent"; applied != want {
					t.Errorf("write applied: %v, want %v", applied, want)
				}
			})
		}
	}
	// A directory delete cut half way (some files gone) is finished.
	t.Run("delete cut half way is finished", func(t *testing.T) {
		dir := crashSetup(t)
		crashRun(t, dir, "delete", "intent")
		if err := os.Remove(filepath.Join(dir, "acme", "d", "x.md")); err != nil {
			t.Fatal(err)
		}
		if !crashCheck(t, dir) {
			t.Error("the delete was not finished")
		}
		if _, err := os.Lstat(filepath.Join(dir, "acme", "d")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("d still there: %v", err)
		}
	})
}

func crashSetup(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	st, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sc := Scope{Tenant: "acme", Actor: Actor{Type: ActorModel, RequestID: "req_setup"}}
	for _, in := range []string{
		`{"command":"create","path":"/memories/a.md","file_text":"old"}`,
		`{"command":"create","path":"/memories/d/x.md","file_text":"x"}`,
		`{"command":"create","path":"/memories/d/y/z.md","file_text":"z"}`,
	} {
		if r := Exec(context.Background(), st, sc, []byte(in)); r.IsError {
			t.Fatal(r.Content)
		}
	}
	return dir
}

func crashRun(t *testing.T, dir, cmd, step string) {
	t.Helper()
	c := osexec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	c.Env = append(os.Environ(), "CRASH_DIR="+dir, "CRASH_CMD="+cmd, "CRASH_STEP="+step)
	out, err := c.CombinedOutput()
	var ee *osexec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child was not killed at %s: %v\n%s", step, err, out)
	}
}

// crashCheck opens the store and checks that files and versions agree:
// every file is a live memory with the file's sha, no version was made by
// the store adopting a stray file, and the crashed request's versions are
// there exactly when its write is. It reports whether the write happened.
func crashCheck(t *testing.T, dir string) bool {
	t.Helper()
	st, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	ms, err := st.Memories(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	onDisk := map[string]string{}
	root := filepath.Join(dir, "acme")
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && !strings.HasPrefix(d.Name(), ".tmp-") {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(root, p)
			onDisk[rel] = SHA256Hex(b)
		}
		return nil
	})
	for _, m := range ms {
		if onDisk[m.Path] != m.SHA256 {
			t.Errorf("memory %s: sha %s, file %q", m.Path, m.SHA256, onDisk[m.Path])
		}
		delete(onDisk, m.Path)
	}
	for p := range onDisk {
		t.Errorf("file %s is no memory", p)
	}
	vs, err := st.Versions(ctx, "acme", VersionQuery{})
	if err != nil {
		t.Fatal(err)
	}
	crashed := 0
	for _, v := range vs {
		if v.Actor.Type == ActorSystem {
			t.Errorf("version adopted a stray file: %+v", v)
		}
		if v.Actor.RequestID == "req_crash" {
			crashed++
		}
	}
	_, aErr := os.Stat(filepath.Join(root, "a.md"))
	b, _ := os.ReadFile(filepath.Join(root, "a.md"))
	_, nErr := os.Stat(filepath.Join(root, "new", "n.md"))
	_, dErr := os.Stat(filepath.Join(root, "d"))
	did := string(b) == "new" || nErr == nil || (errors.Is(dErr, os.ErrNotExist) && aErr == nil)
	if did != (crashed > 0) {
		t.Errorf("write applied %v but %d versions of the crashed request", did, crashed)
	}
	// The store goes on working: one more write, versioned.
	sc := Scope{Tenant: "acme", Actor: Actor{Type: ActorModel, RequestID: "req_after"}}
	if r := Exec(ctx, st, sc, []byte(`{"command":"create","path":"/memories/after.md","file_text":"x"}`)); r.IsError {
		t.Errorf("write after recovery: %s", r.Content)
	}
	return did
}
