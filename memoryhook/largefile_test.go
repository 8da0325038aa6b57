package memoryhook_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/memoryhook/storetest"
)

// A file far over max_file_bytes in a tenant's folder (planted, or written
// before the limit was lowered; sparse here, so it costs no disk) is
// listed, refused for reading and editing in the limit's sentence, and
// adopted into history without its content: it is never read, so the log
// stays small. It can still be renamed (keeping its size) and deleted.
func TestFileOverTheLimitIsAdoptedWithoutBeingRead(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tdir := filepath.Join(dir, "t1")
	must(t, os.MkdirAll(tdir, 0o700))
	const huge = 3 << 30
	f, err := os.Create(filepath.Join(tdir, "big.bin"))
	must(t, err)
	must(t, f.Truncate(huge))
	must(t, f.Close())
	must(t, os.WriteFile(filepath.Join(tdir, "notes.md"), []byte("kept\n"), 0o600))

	st, err := memoryhook.NewFileStore(dir)
	must(t, err)
	defer st.Close()
	sc := memoryhook.Scope{Tenant: "t1", Limits: memoryhook.Limits{MaxFileBytes: 1 << 20, MaxTenantBytes: 64 << 20}}
	exec := func(in string) memoryhook.Result { return memoryhook.Exec(ctx, st, sc, []byte(in)) }

	if r := exec(storetest.J("command", "view", "path", "/memories")); !strings.Contains(r.Content, "3G\t/memories/big.bin") {
		t.Errorf("listing: %q", r.Content)
	}
	refused := "Error: File /memories/big.bin is 3221225472 bytes; the limit is 1048576 bytes."
	for _, in := range []string{
		storetest.J("command", "view", "path", "/memories/big.bin"),
		storetest.J("command", "str_replace", "path", "/memories/big.bin", "old_str", "x", "new_str", "y"),
		storetest.J("command", "insert", "path", "/memories/big.bin", "insert_line", 0, "insert_text", "y"),
	} {
		if r := exec(in); r.Content != refused || r.Wrote {
			t.Errorf("%s: %q", in, r.Content)
		}
	}

	// The history adopts both files: the small one with its content, the
	// large one with its size only.
	ms, err := st.Memories(ctx, "t1")
	must(t, err)
	if len(ms) != 2 || ms[0].Path != "big.bin" || ms[0].Size != huge || ms[0].SHA256 != "" ||
		ms[1].Path != "notes.md" || ms[1].SHA256 != memoryhook.SHA256Hex([]byte("kept\n")) {
		t.Fatalf("memories: %+v", ms)
	}
	v, err := st.Version(ctx, "t1", ms[0].VersionID, true)
	must(t, err)
	if v.HasContent || v.Content != nil || v.Size != huge || v.Actor.Type != memoryhook.ActorSystem {
		t.Errorf("big.bin's version: %+v", v)
	}
	if v, err := st.Version(ctx, "t1", ms[1].VersionID, true); err != nil || string(v.Content) != "kept\n" {
		t.Errorf("notes.md's version: %+v %v", v, err)
	}

	if r := exec(storetest.J("command", "rename", "old_path", "/memories/big.bin", "new_path", "/memories/old/big.bin")); r.IsError {
		t.Errorf("rename: %q", r.Content)
	}
	m, err := st.MemoryByID(ctx, "t1", ms[0].ID)
	must(t, err)
	if m.Path != "old/big.bin" || m.Size != huge {
		t.Errorf("renamed: %+v", m)
	}
	// A new store on the same folder finds the file as history left it: no new version.
	must(t, st.Close())
	st, err = memoryhook.NewFileStore(dir)
	must(t, err)
	vs, err := st.Versions(ctx, "t1", memoryhook.VersionQuery{MemoryID: m.ID})
	must(t, err)
	if len(vs) != 2 {
		t.Errorf("after a reload, %d versions of big.bin, want 2 (adopted, renamed): %+v", len(vs), vs)
	}
	if r := exec(storetest.J("command", "delete", "path", "/memories/old/big.bin")); r.IsError {
		t.Errorf("delete: %q", r.Content)
	}
	logInfo, err := os.Stat(filepath.Join(dir, ".history", "t1.jsonl"))
	must(t, err)
	if logInfo.Size() > 64<<10 {
		t.Errorf("the history log holds %d bytes", logInfo.Size())
	}
}

// Files adopted together are written in records of bounded size, each
// version's content readable on its own.
func TestAdoptionWritesBoundedRecords(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tdir := filepath.Join(dir, "t1")
	must(t, os.MkdirAll(tdir, 0o700))
	chunk := strings.Repeat("a", 900<<10) + "\n"
	for i := range 6 {
		must(t, os.WriteFile(filepath.Join(tdir, "f"+string(rune('a'+i))+".md"), []byte(chunk), 0o600))
	}
	st, err := memoryhook.NewFileStore(dir)
	must(t, err)
	defer st.Close()
	ms, err := st.Memories(ctx, "t1")
	must(t, err)
	if len(ms) != 6 {
		t.Fatalf("%d memories", len(ms))
	}
	for _, m := range ms {
		v, err := st.Version(ctx, "t1", m.VersionID, true)
		if err != nil || string(v.Content) != chunk {
			t.Fatalf("%s: %d bytes, %v", m.Path, len(v.Content), err)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, ".history", "t1.jsonl"))
	must(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	longest := 0
	for _, l := range lines {
		longest = max(longest, len(l))
	}
	if longest > 8<<20 {
		t.Errorf("an adopt record of %d bytes", longest)
	}
	if len(lines) < 4 { // at least two records, each an intent and a commit
		t.Errorf("%d log lines: adoption wrote one record", len(lines))
	}
}
