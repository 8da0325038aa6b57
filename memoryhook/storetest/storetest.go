// Package storetest is the conformance suite of memoryhook stores: every
// command's observable behaviour, result strings to the character, limits,
// concurrency and tenant isolation. Every Store runs it:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) memoryhook.Store { return newStore(t) })
//	}
//
// Expected transcripts live in this package's testdata/*.golden (found via
// the source location, so any package can run the suite); regenerate them
// with `go test ./memoryhook/ -run Conformance -update` and review the diff.
// A store whose output differs from the file store's fails here.
//
// Directory lines print 4K: the file store prints st_size, which is 4096 for
// the small directories used here on ext4 (CI's file system); a store
// without real directories prints memoryhook.DirSize.
package storetest

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Update reports whether -update was given (for other golden tests in the
// same test binary; a flag can be defined only once).
func Update() bool { return *update }

// Golden compares got with the file at path, or rewrites it with -update.
func Golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("output differs from %s (run with -update and review the diff)\n%s", path, diff(string(want), got))
	}
}

// diff shows the first differing line with some context.
func diff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(wl), len(gl)); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g || i >= len(wl) || i >= len(gl) {
			return fmt.Sprintf("line %d:\nwant %q\ngot  %q", i+1, w, g)
		}
	}
	return ""
}

func testdata(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", name)
}

// Transcript runs inputs one after another and renders each input and its
// result the way the golden files show them.
func Transcript(ctx context.Context, st memoryhook.Store, sc memoryhook.Scope, inputs []string) string {
	var b strings.Builder
	for _, in := range inputs {
		r := memoryhook.Exec(ctx, st, sc, []byte(in))
		shown := in
		if len(shown) > 200 {
			shown = fmt.Sprintf("%s… (%d bytes)", shown[:120], len(in))
		}
		status := "ok"
		if r.IsError {
			status = "is_error"
		}
		if r.Wrote {
			status += " wrote"
		}
		fmt.Fprintf(&b, "> %s\n< %s\n%s\n\n", shown, status, r.Content)
	}
	return b.String()
}

// J builds one tool input from alternating keys and values.
func J(kv ...any) string {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func view(p string) string          { return J("command", "view", "path", p) }
func create(p, text string) string  { return J("command", "create", "path", p, "file_text", text) }
func del(p string) string           { return J("command", "delete", "path", p) }
func rename(from, to string) string { return J("command", "rename", "old_path", from, "new_path", to) }
func viewRange(p string, a, b int) string {
	return J("command", "view", "path", p, "view_range", []int{a, b})
}
func replace(p, o, n string) string {
	return J("command", "str_replace", "path", p, "old_str", o, "new_str", n)
}
func insert(p string, line int, text string) string {
	return J("command", "insert", "path", p, "insert_line", line, "insert_text", text)
}

// Scenario is one golden transcript: fresh store, tenant "t1".
type Scenario struct {
	Name   string
	Limits memoryhook.Limits
	Inputs []string
}

// Scenarios are the golden transcripts of the suite.
func Scenarios() []Scenario {
	notes := "# Notes\nalpha\nbeta\ngamma\ndelta\nepsilon\n"
	return []Scenario{
		{Name: "view", Inputs: []string{
			view("/memories"),
			view("/memories/"),
			view("/memories/missing.md"),
			view("/memories/missing/"),
			create("/memories/notes.md", notes),
			view("/memories/notes.md"),
			view("/memories/notes.md/"),
			viewRange("/memories/notes.md", 2, 4),
			viewRange("/memories/notes.md", 3, -1),
			viewRange("/memories/notes.md", 0, 1),
			viewRange("/memories/notes.md", 6, 100),
			viewRange("/memories/notes.md", 50, 60),
			viewRange("/memories/notes.md", 4, 2),
			viewRange("/memories/notes.md", 1, -3),
			create("/memories/empty.md", ""),
			view("/memories/empty.md"),
			create("/memories/no-newline.txt", "one line"),
			view("/memories/no-newline.txt"),
			create("/memories/tabs and spaces.md", "\tindented\n  two spaces\n"),
			view("/memories/tabs and spaces.md"),
			create("/memories/unicode-ü.md", "héllo wörld ✓\n"),
			view("/memories/unicode-ü.md"),
			J("command", "view", "path", "/memories/notes.md", "view_range", nil),
			J("command", "view", "path", "/memories/notes.md", "view_range", []int{1}),
			J("command", "view", "path", "/memories/notes.md", "view_range", []any{1, "2"}),
			J("command", "view", "path", "/memories/notes.md", "view_range", []any{1.5, 2}),
			J("command", "view", "path", "/memories/notes.md", "view_range", "1-2"),
		}},
		{Name: "listing", Inputs: []string{
			create("/memories/b.md", strings.Repeat("x", 512)),
			create("/memories/a.md", strings.Repeat("x", 1536)),
			create("/memories/c.md", strings.Repeat("x", 1024)),
			create("/memories/d.md", strings.Repeat("x", 1280)),
			create("/memories/e.md", strings.Repeat("x", 2047)),
			create("/memories/f.md", strings.Repeat("x", 1023)),
			create("/memories/zero.md", ""),
			create("/memories/projects/alpha/plan.md", "plan\n"),
			create("/memories/projects/alpha/deep/deeper.md", "too deep to list\n"),
			create("/memories/projects/beta.md", "beta\n"),
			create("/memories/projects-old/x.md", "x\n"),
			create("/memories/.hidden.md", "hidden\n"),
			create("/memories/.config/settings.md", "hidden dir\n"),
			create("/memories/node_modules/pkg/index.md", "skipped\n"),
			create("/memories/projects/node_modules/y.md", "skipped\n"),
			create("/memories/projects/.git/HEAD", "skipped\n"),
			create("/memories/A-upper.md", "sorts before lower case\n"),
			view("/memories"),
			view("/memories/"),
			view("/memories/projects"),
			view("/memories/projects/"),
			view("/memories/projects/alpha"),
			view("/memories//projects"),
			view("/memories/.config"),
			view("/memories/node_modules"),
		}},
		{Name: "create", Inputs: []string{
			create("/memories/a.md", "first\n"),
			create("/memories/a.md", "second\n"),
			view("/memories/a.md"),
			create("/memories/deep/er/still/file.md", "made parents\n"),
			view("/memories"),
			create("/memories/deep", "a directory is there"),
			create("/memories/deep/", "a directory is there"),
			create("/memories", "root"),
			create("/memories/", "root"),
			create("/memories/a.md/child.md", "parent is a file"),
			create("/memories/a.md/x/child.md", "ancestor is a file"),
			create("/memories/deep//er///new.md", "double slashes are dropped"),
			view("/memories/deep/er/new.md"),
			create("/memories/.hidden", "hidden files can be made"),
			view("/memories/.hidden"),
			create("/memories/with spaces & (symbols)!.md", "ok"),
			J("command", "create", "path", "/memories/missing-text.md"),
			J("command", "create", "path", "/memories/wrong-type.md", "file_text", 42),
			J("command", "create", "path", "/memories/null.md", "file_text", nil),
			view("/memories"),
		}},
		{Name: "str_replace", Inputs: []string{
			create("/memories/n.md", notes),
			replace("/memories/n.md", "gamma", "GAMMA"),
			replace("/memories/n.md", "# Notes", "# Renamed notes"),
			replace("/memories/n.md", "epsilon\n", "epsilon\nzeta\neta\n"),
			view("/memories/n.md"),
			replace("/memories/n.md", "beta\nGAMMA", "beta+gamma"),
			replace("/memories/n.md", "missing", "x"),
			replace("/memories/n.md", "a", "x"),
			replace("/memories/n.md", "", "x"),
			replace("/memories/n.md", "Renamed", "`Renamed`"),
			replace("/memories/n.md", "`Renamed`", "x"),
			J("command", "str_replace", "path", "/memories/n.md", "old_str", "zeta\n"),
			view("/memories/n.md"),
			create("/memories/rep.md", "foo foo\nbar\nfoo\n"),
			replace("/memories/rep.md", "foo", "baz"),
			replace("/memories/rep.md", "foo\nbar", "baz"),
			replace("/memories/rep.md", "o\nb", "O-B"),
			view("/memories/rep.md"),
			replace("/memories/missing.md", "a", "b"),
			replace("/memories", "a", "b"),
			create("/memories/dir/x.md", "x"),
			replace("/memories/dir", "a", "b"),
			replace("/memories/rep.md/x", "a", "b"),
			J("command", "str_replace", "path", "/memories/n.md", "new_str", "x"),
			J("command", "str_replace", "path", "/memories/n.md", "old_str", 1, "new_str", "x"),
			J("command", "str_replace", "path", "/memories/n.md", "old_str", "a", "new_str", false),
		}},
		{Name: "insert", Inputs: []string{
			create("/memories/i.md", "one\ntwo\nthree"),
			insert("/memories/i.md", 0, "zero\n"),
			insert("/memories/i.md", 4, "four"),
			insert("/memories/i.md", 2, "one and a half\nand more\n"),
			insert("/memories/i.md", 3, "keeps one of two newlines\n\n"),
			view("/memories/i.md"),
			insert("/memories/i.md", 9, "x"),
			insert("/memories/i.md", -1, "x"),
			insert("/memories/i.md", 99, "x"),
			insert("/memories/i.md", 8, "last\n"),
			view("/memories/i.md"),
			create("/memories/empty.md", ""),
			insert("/memories/empty.md", 1, "after the only (empty) line"),
			view("/memories/empty.md"),
			insert("/memories/missing.md", 0, "x"),
			insert("/memories", 0, "x"),
			create("/memories/dir/f.md", "f"),
			insert("/memories/dir", 0, "x"),
			J("command", "insert", "path", "/memories/i.md", "insert_text", "x"),
			J("command", "insert", "path", "/memories/i.md", "insert_line", "1", "insert_text", "x"),
			J("command", "insert", "path", "/memories/i.md", "insert_line", 1.5, "insert_text", "x"),
			J("command", "insert", "path", "/memories/i.md", "insert_line", 1),
		}},
		{Name: "delete", Inputs: []string{
			create("/memories/a.md", "a"),
			create("/memories/dir/b.md", "b"),
			create("/memories/dir/sub/c.md", "c"),
			create("/memories/dir/.hidden", "h"),
			del("/memories/a.md"),
			del("/memories/a.md"),
			view("/memories/a.md"),
			del("/memories/dir/sub/c.md"),
			view("/memories"),
			del("/memories/dir"),
			view("/memories"),
			del("/memories"),
			del("/memories/"),
			del("/memories/missing/deeper"),
			J("command", "delete"),
			J("command", "delete", "path", []string{"/memories/a.md"}),
		}},
		{Name: "rename", Inputs: []string{
			create("/memories/a.md", "a\n"),
			create("/memories/b.md", "b\n"),
			create("/memories/dir/c.md", "c\n"),
			rename("/memories/a.md", "/memories/a2.md"),
			view("/memories/a2.md"),
			rename("/memories/a2.md", "/memories/new/parents/a3.md"),
			rename("/memories/dir", "/memories/dir2"),
			view("/memories"),
			rename("/memories/b.md", "/memories/dir2/c.md"),
			rename("/memories/b.md", "/memories/b.md"),
			rename("/memories/b.md", "/memories/dir2"),
			rename("/memories/missing.md", "/memories/x.md"),
			rename("/memories/missing.md", "/memories/b.md"),
			rename("/memories", "/memories/x"),
			rename("/memories/", "/memories/x"),
			rename("/memories/b.md", "/memories"),
			rename("/memories/dir2", "/memories/dir2/inside"),
			rename("/memories/b.md", "/memories/b.md/x.md"),
			rename("/memories/b.md", "/memories/dir2/c.md/x.md"),
			rename("/memories/b.md", "/elsewhere/b.md"),
			rename("/memories/../b.md", "/memories/c.md"),
			J("command", "rename", "old_path", "/memories/b.md"),
			J("command", "rename", "new_path", "/memories/b.md"),
			view("/memories"),
		}},
		{Name: "input", Inputs: []string{
			`{"command":"view"}`,
			`{"path":"/memories"}`,
			`{"command":7,"path":"/memories"}`,
			`{"command":"list","path":"/memories"}`,
			`{"command":"View","path":"/memories"}`,
			`{"command":"","path":"/memories"}`,
			`[]`,
			`"view"`,
			`{"command":"view","path":"/memories"`,
			`not json`,
			`{"command":"view","path":null}`,
			`{"command":"view","path":["/memories"]}`,
			`{"command":"view","path":"/memories","extra":"ignored"}`,
			view(""),
			view("memories"),
			view("/memoriesX"),
			view("/memories-old/a.md"),
			view("/etc/passwd"),
			view("/memories/../etc/passwd"),
			view("/memories/%2e%2e/x"),
			view("/memories/a\\b"),
			view("/memories/a\x00b"),
			view("/memories/\u202ex"),
			view("/memories/" + strings.Repeat("n", 256)),
			view("/memories/" + strings.Repeat("a/", 520)),
		}},
		{Name: "hostile", Limits: memoryhook.Limits{MaxViewChars: 400}, Inputs: hostileInputs()},
		{Name: "limits", Limits: memoryhook.Limits{MaxFileBytes: 100, MaxTenantBytes: 300, MaxFiles: 6, MaxViewChars: 160}, Inputs: []string{
			create("/memories/big.md", strings.Repeat("x", 101)),
			create("/memories/max.md", strings.Repeat("x", 100)),
			replace("/memories/max.md", strings.Repeat("x", 100), strings.Repeat("y", 101)),
			insert("/memories/max.md", 0, "more"),
			create("/memories/b.md", strings.Repeat("b", 100)),
			create("/memories/c.md", strings.Repeat("c", 100)),
			create("/memories/d.md", "d"),
			replace("/memories/c.md", strings.Repeat("c", 100), "short"),
			create("/memories/x/y/z.md", "z"),
			create("/memories/e.md", "e"),
			rename("/memories/b.md", "/memories/sub/b.md"),
			rename("/memories/b.md", "/memories/b2.md"),
			del("/memories/x"),
			create("/memories/e.md", "e"),
			create("/memories/lines.md", strings.Repeat("l\n", 29)+"l"),
			view("/memories/lines.md"),
			viewRange("/memories/lines.md", 20, -1),
			viewRange("/memories/lines.md", 20, 22),
			view("/memories/max.md"),
			view("/memories"),
		}},
	}
}

// hostileInputs: what a hostile or confused model can send to run up
// time, size or confusion, and what each gets.
func hostileInputs() []string {
	deep := "/memories" + strings.Repeat("/d", 19) // 19 components: a file fits below
	top := "/memories/" + strings.Repeat("n", 250)
	long := top + "/" + strings.Repeat("m", 250) // 511 bytes
	return []string{
		// A key given twice: gjson would run the first, an audit reads the last.
		`{"command":"view","path":"/memories","command":"delete"}`,
		`{"command":"view","path":"/memories/a.md","path":"/memories/b.md"}`,
		`{"command":"view","path":"/memories","comm\u0061nd":"view"}`,
		// Every result is bounded by MaxViewChars, errors included.
		create("/memories/many.md", strings.Repeat("a\n", 300)),
		replace("/memories/many.md", "a", "b"),
		replace("/memories/many.md", "\n", "b"),
		replace("/memories/many.md", strings.Repeat("z", 500), "b"),
		create("/memories/long.md", strings.Repeat("x", 1000)+"\nend\n"),
		replace("/memories/long.md", "end", "END"),
		// Depth and length bound every path a tenant can reach.
		create(deep+"/f.md", "20 components"),
		create(deep+"/d/f.md", "21 components"),
		rename(deep+"/f.md", deep+"/d/f.md"),
		create("/memories/a/b/c/f.md", "3 below a"),
		rename("/memories/a", strings.Join(strings.Split(deep, "/")[:19], "/")+"/a"),
		rename("/memories/a", strings.Join(strings.Split(deep, "/")[:18], "/")+"/a"),
		create(long+"/f.md", "x"),
		rename(top, "/memories/"+strings.Repeat("o", 255)+"/"+strings.Repeat("p", 255)+"/"+strings.Repeat("q", 255)),
		rename(top, "/memories/short"),
		// An existing destination inside the source is named as existing (the SDK's order).
		create("/memories/a/inner/x.md", "x"),
		rename("/memories/a", "/memories/a/inner"),
		rename("/memories/a", "/memories/a/inner/x.md"),
		rename("/memories/a", "/memories/a/new"),
		// Listings sort names as the TS SDK does: by UTF-16 code units.
		create("/memories/sort/\uff21.md", "fullwidth A"),
		create("/memories/sort/\U0001F600.md", "emoji"),
		create("/memories/sort/z.md", "z"),
		create("/memories/sort/\u00e9.md", "e acute"),
		view("/memories/sort"),
	}
}

// Run runs the suite; newStore returns a fresh, empty store for each test.
func Run(t *testing.T, newStore func(t *testing.T) memoryhook.Store) {
	t.Run("Ready", func(t *testing.T) {
		if err := newStore(t).Ready(context.Background()); err != nil {
			t.Fatalf("Ready: %v", err)
		}
	})
	for _, s := range Scenarios() {
		t.Run("Golden/"+s.Name, func(t *testing.T) {
			got := Transcript(context.Background(), newStore(t), memoryhook.Scope{Tenant: "t1", Limits: s.Limits}, s.Inputs)
			Golden(t, testdata(s.Name+".golden"), got)
		})
	}
	t.Run("ParallelEditsAllLand", func(t *testing.T) { parallelEdits(t, newStore(t)) })
	t.Run("ParallelCreatesRespectLimits", func(t *testing.T) { parallelLimits(t, newStore(t)) })
	t.Run("TenantsAreIsolated", func(t *testing.T) { isolation(t, newStore(t)) })
	t.Run("ReadsDuringChangesNeverFail", func(t *testing.T) { readsDuringChanges(t, newStore(t)) })
	t.Run("OverALimitOnlyGrowthIsRefused", func(t *testing.T) { overLimit(t, newStore(t)) })
	t.Run("Scopes", func(t *testing.T) { scopes(t, newStore(t)) })
	t.Run("ScopedStoresShareTheTenantsTotal", func(t *testing.T) { scopedTotal(t, newStore(t)) })
}

// overLimit: a tenant over a limit (lowered since it filled up) can still
// rename, shrink and delete; only writes that add what is over are refused.
func overLimit(t *testing.T, st memoryhook.Store) {
	full := memoryhook.Scope{Tenant: "t1"}
	mustOK(t, st, full, create("/memories/a.md", strings.Repeat("a", 600)+"\n"))
	mustOK(t, st, full, create("/memories/dir/b.md", strings.Repeat("b", 600)+"\n"))
	over := memoryhook.Scope{Tenant: "t1", Limits: memoryhook.Limits{MaxTenantBytes: 1000, MaxFiles: 3}}
	for _, c := range []struct{ in, want string }{
		{rename("/memories/a.md", "/memories/a2.md"), "Successfully renamed /memories/a.md to /memories/a2.md"},
		{rename("/memories/dir", "/memories/dir2"), "Successfully renamed /memories/dir to /memories/dir2"},
		{replace("/memories/a2.md", strings.Repeat("a", 600), "short"), "The memory file has been edited."},
		{insert("/memories/a2.md", 0, strings.Repeat("x", 400)), "Error: Memory would hold 1008 bytes in total; the limit is 1000 bytes."},
		{create("/memories/c.md", ""), "Error: Memory would hold 4 files and directories; the limit is 3."},
		{rename("/memories/a2.md", "/memories/new/a.md"), "Error: Memory would hold 4 files and directories; the limit is 3."},
		{insert("/memories/a2.md", 0, "fits now"), "The file /memories/a2.md has been edited."},
		{del("/memories/dir2"), "Successfully deleted /memories/dir2"},
		{create("/memories/c.md", "fits"), "File created successfully at: /memories/c.md"},
	} {
		r := memoryhook.Exec(context.Background(), st, over, []byte(c.in))
		if !strings.HasPrefix(r.Content, c.want) {
			t.Errorf("%s:\n got %q\nwant %q…", c.in, r.Content, c.want)
		}
	}
}

func mustOK(t *testing.T, st memoryhook.Store, sc memoryhook.Scope, in string) string {
	t.Helper()
	r := memoryhook.Exec(context.Background(), st, sc, []byte(in))
	if r.IsError {
		t.Fatalf("%s: %s", in, r.Content)
	}
	return r.Content
}

// parallelEdits: 100 concurrent str_replace and insert calls on one file
// all land.
func parallelEdits(t *testing.T, st memoryhook.Store) {
	sc := memoryhook.Scope{Tenant: "t1"}
	var slots []string
	for i := range 50 {
		slots = append(slots, fmt.Sprintf("slot-%02d", i))
	}
	mustOK(t, st, sc, create("/memories/shared.md", strings.Join(slots, "\n")+"\n"))
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := insert("/memories/shared.md", 0, fmt.Sprintf("inserted-%02d", i/2))
			if i%2 == 0 {
				in = replace("/memories/shared.md", fmt.Sprintf("slot-%02d", i/2), fmt.Sprintf("done-%02d", i/2))
			}
			if r := memoryhook.Exec(context.Background(), st, sc, []byte(in)); r.IsError || !r.Wrote {
				errs <- in + ": " + r.Content
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	got := mustOK(t, st, sc, view("/memories/shared.md"))
	for i := range 50 {
		for _, want := range []string{fmt.Sprintf("\tdone-%02d\n", i), fmt.Sprintf("\tinserted-%02d\n", i)} {
			if !strings.Contains(got, want) {
				t.Errorf("lost update: %q missing from the file", strings.TrimSpace(want))
			}
		}
	}
	if strings.Contains(got, "slot-") {
		t.Errorf("unreplaced slots left:\n%s", got)
	}
	if n := strings.Count(got, "\n"); n != 101 { // header + 100 lines + the final empty line
		t.Errorf("file has %d lines after the header, want 101", n)
	}
}

// parallelLimits: quota checks hold under concurrency, for bytes and for
// the number of entries.
func parallelLimits(t *testing.T, st memoryhook.Store) {
	run := func(sc memoryhook.Scope, prefix string, size int) int {
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := 0
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := memoryhook.Exec(context.Background(), st, sc,
					[]byte(create(fmt.Sprintf("/memories/%s-%02d.md", prefix, i), strings.Repeat("x", size))))
				if !r.IsError {
					mu.Lock()
					ok++
					mu.Unlock()
				} else if !strings.HasPrefix(r.Content, "Error: Memory would hold ") {
					t.Errorf("unexpected error: %s", r.Content)
				}
			}()
		}
		wg.Wait()
		return ok
	}
	if n := run(memoryhook.Scope{Tenant: "t1", Limits: memoryhook.Limits{MaxFiles: 7}}, "f", 1); n != 7 {
		t.Errorf("MaxFiles 7: %d of 20 parallel creates succeeded", n)
	}
	if n := run(memoryhook.Scope{Tenant: "t2", Limits: memoryhook.Limits{MaxTenantBytes: 1000}}, "b", 100); n != 10 {
		t.Errorf("MaxTenantBytes 1000: %d of 20 parallel 100-byte creates succeeded", n)
	}
}

// isolation: nothing of tenant t1 is visible or changeable from t2.
func isolation(t *testing.T, st memoryhook.Store) {
	a, b := memoryhook.Scope{Tenant: "t1"}, memoryhook.Scope{Tenant: "t2"}
	mustOK(t, st, a, create("/memories/secret.md", "t1's secret\n"))
	mustOK(t, st, a, create("/memories/dir/inner.md", "inner\n"))
	empty := "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items and node_modules:\n4K\t/memories"
	if got := mustOK(t, st, b, view("/memories")); got != empty {
		t.Errorf("t2 sees:\n%s", got)
	}
	for _, in := range []string{
		view("/memories/secret.md"),
		view("/memories/dir"),
		replace("/memories/secret.md", "secret", "mine"),
		insert("/memories/secret.md", 0, "mine"),
		del("/memories/secret.md"),
		del("/memories/dir"),
		rename("/memories/secret.md", "/memories/stolen.md"),
		rename("/memories/dir", "/memories/stolen"),
	} {
		r := memoryhook.Exec(context.Background(), st, b, []byte(in))
		if !r.IsError || !strings.Contains(r.Content, "does not exist") {
			t.Errorf("t2 %s: %s", in, r.Content)
		}
	}
	mustOK(t, st, b, create("/memories/secret.md", "t2's own\n"))
	mustOK(t, st, b, create("/memories/dir/inner.md", "t2 inner\n"))
	mustOK(t, st, b, del("/memories/dir"))
	if got := mustOK(t, st, a, view("/memories/secret.md")); !strings.Contains(got, "t1's secret") {
		t.Errorf("t1's file changed:\n%s", got)
	}
	if got := mustOK(t, st, a, view("/memories/dir/inner.md")); !strings.Contains(got, "\tinner") {
		t.Errorf("t1's directory changed:\n%s", got)
	}
}

// readsDuringChanges: views racing with creates, renames and deletes get a
// listing, a file or "does not exist", never a store failure.
func readsDuringChanges(t *testing.T, st memoryhook.Store) {
	sc := memoryhook.Scope{Tenant: "t1"}
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 30 {
			for _, in := range []string{
				create("/memories/d/sub/f.md", "f\n"),
				rename("/memories/d", "/memories/e"),
				del("/memories/e"),
			} {
				if r := memoryhook.Exec(ctx, st, sc, []byte(in)); r.IsError {
					t.Errorf("%s: %s", in, r.Content)
				}
			}
		}
	}()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				for _, in := range []string{view("/memories"), view("/memories/d"), view("/memories/d/sub/f.md"), view("/memories/e/sub")} {
					if r := memoryhook.Exec(ctx, st, sc, []byte(in)); r.Unavailable ||
						r.IsError && !strings.Contains(r.Content, "does not exist") {
						t.Errorf("%s: %s", in, r.Content)
					}
				}
			}
		}()
	}
	wg.Wait()
}
