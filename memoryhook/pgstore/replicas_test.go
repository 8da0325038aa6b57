package pgstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/memoryhook/storetest"
)

func exec(st memoryhook.Store, sc memoryhook.Scope, in string) memoryhook.Result {
	return memoryhook.Exec(context.Background(), st, sc, []byte(in))
}

func mustOK(t *testing.T, st memoryhook.Store, sc memoryhook.Scope, in string) string {
	t.Helper()
	r := exec(st, sc, in)
	if r.IsError {
		t.Fatalf("%s: %s", in, r.Content)
	}
	return r.Content
}

// Two replicas are two stores with pools of their own on one schema.
func TestTwoReplicasLoseNoEdit(t *testing.T) {
	db := newTestDB(t)
	replicas := []*Store{db.open(t), db.open(t)}
	sc := memoryhook.Scope{Tenant: "acme"}
	const edits = 200 // half str_replace of a slot, half insert
	var slots []string
	for i := range edits / 2 {
		slots = append(slots, fmt.Sprintf("slot-%03d", i))
	}
	mustOK(t, replicas[0], sc, storetest.J("command", "create", "path", "/memories/shared.md", "file_text", strings.Join(slots, "\n")+"\n"))

	var wg sync.WaitGroup
	var mu sync.Mutex
	served := make([]int, len(replicas))
	for i := range edits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := storetest.J("command", "insert", "path", "/memories/shared.md", "insert_line", 0, "insert_text", fmt.Sprintf("inserted-%03d", i/2))
			if i%2 == 0 {
				in = storetest.J("command", "str_replace", "path", "/memories/shared.md",
					"old_str", fmt.Sprintf("slot-%03d", i/2), "new_str", fmt.Sprintf("done-%03d", i/2))
			}
			r := i / 2 % len(replicas) // both kinds of edit on both replicas
			if res := exec(replicas[r], sc, in); res.IsError || !res.Wrote {
				t.Errorf("replica %d %s: %s", r, in, res.Content)
				return
			}
			mu.Lock()
			served[r]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if served[0] != edits/2 || served[1] != edits/2 {
		t.Errorf("edits served per replica: %v", served)
	}
	for r, st := range replicas {
		got := mustOK(t, st, sc, storetest.J("command", "view", "path", "/memories/shared.md"))
		for i := range edits / 2 {
			for _, want := range []string{fmt.Sprintf("\tdone-%03d\n", i), fmt.Sprintf("\tinserted-%03d\n", i)} {
				if !strings.Contains(got, want) {
					t.Errorf("replica %d: lost update %q", r, strings.TrimSpace(want))
				}
			}
		}
		if strings.Contains(got, "slot-") {
			t.Errorf("replica %d: unreplaced slots left", r)
		}
		if n := strings.Count(got, "\n"); n != edits+1 {
			t.Errorf("replica %d: %d lines after the header, want %d", r, n, edits+1)
		}
	}
	db.checkUsage(t)
}

// A replica sees what the other wrote, directories and limits included.
func TestReplicasShareMemoryAndLimits(t *testing.T) {
	db := newTestDB(t)
	a, b := db.open(t), db.open(t)
	sc := memoryhook.Scope{Tenant: "acme", Limits: memoryhook.Limits{MaxFiles: 3}}
	mustOK(t, a, sc, storetest.J("command", "create", "path", "/memories/dir/one.md", "file_text", "1\n"))
	if got := mustOK(t, b, sc, storetest.J("command", "view", "path", "/memories")); !strings.Contains(got, "/memories/dir/one.md") {
		t.Errorf("replica b does not see a's file:\n%s", got)
	}
	mustOK(t, b, sc, storetest.J("command", "create", "path", "/memories/two.md", "file_text", "2\n"))
	r := exec(a, sc, storetest.J("command", "create", "path", "/memories/three.md", "file_text", "3\n"))
	if r.Content != "Error: Memory would hold 4 files and directories; the limit is 3." {
		t.Errorf("replica a counted without b's file: %s", r.Content)
	}
	mustOK(t, a, sc, storetest.J("command", "rename", "old_path", "/memories/dir", "new_path", "/memories/moved"))
	if got := mustOK(t, b, sc, storetest.J("command", "view", "path", "/memories/moved/one.md")); !strings.Contains(got, "\t1") {
		t.Errorf("replica b after a's rename:\n%s", got)
	}
	db.checkUsage(t)
}

// The same random commands on the file store and on PostgreSQL give the
// same results, character for character (beyond the golden transcripts).
func TestSameResultsAsFileStore(t *testing.T) {
	db := newTestDB(t)
	pg := db.open(t)
	fs, err := memoryhook.NewFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	rng := rand.New(rand.NewPCG(4, 2))
	names := []string{"/memories", "/memories/a", "/memories/a/b", "/memories/a/b/c.md", "/memories/a/x.md",
		"/memories/d", "/memories/d/e.md", "/memories/f.md", "/memories/.h/i.md", "/memories/a/", "/memories/d//e.md"}
	texts := []string{"", "one\n", "two\nlines\n", "no newline", "x\nx\n", "ü✓\n"}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	limits := memoryhook.Limits{MaxFileBytes: 64, MaxTenantBytes: 200, MaxFiles: 8, MaxViewChars: 400}
	var wrote, failed int
	for i := range 400 {
		var in string
		switch rng.IntN(7) {
		case 0, 1:
			in = storetest.J("command", "view", "path", pick(names))
		case 2:
			in = storetest.J("command", "create", "path", pick(names), "file_text", pick(texts)+pick(texts))
		case 3:
			in = storetest.J("command", "str_replace", "path", pick(names), "old_str", pick(texts[1:]), "new_str", pick(texts))
		case 4:
			in = storetest.J("command", "insert", "path", pick(names), "insert_line", rng.IntN(4), "insert_text", pick(texts))
		case 5:
			in = storetest.J("command", "delete", "path", pick(names))
		case 6:
			in = storetest.J("command", "rename", "old_path", pick(names), "new_path", pick(names))
		}
		tenant := pick([]string{"t1", "t2"})
		sc := memoryhook.Scope{Tenant: tenant, Limits: limits}
		want, got := exec(fs, sc, in), exec(pg, sc, in)
		if want.Content != got.Content || want.IsError != got.IsError || want.Wrote != got.Wrote {
			t.Fatalf("step %d, %s %s:\nfile store: %+v\npostgres:   %+v", i, tenant, in, want, got)
		}
		if got.Wrote {
			wrote++
		} else if got.IsError {
			failed++
		}
	}
	if wrote < 50 || failed < 50 {
		t.Errorf("too little variety: %d writes, %d errors", wrote, failed)
	}
	t.Logf("%d writes, %d errors", wrote, failed)
	db.checkUsage(t)
}
