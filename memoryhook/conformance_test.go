package memoryhook_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/memoryhook/storetest"
)

func newFileStore(t *testing.T) *memoryhook.FileStore {
	t.Helper()
	st, err := memoryhook.NewFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestFileStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) memoryhook.Store { return newFileStore(t) })
}

func TestFileStoreContinuationsConformance(t *testing.T) {
	storetest.RunContinuations(t, func(t *testing.T) memoryhook.Continuations { return newFileStore(t) })
}

func TestFileStoreHistoryConformance(t *testing.T) {
	storetest.RunHistory(t, func(t *testing.T) memoryhook.Governed { return newFileStore(t) })
}

// Purge leaves nothing of the tenant on disk: its tree, its history log
// and its thread continuations, and all of the other tenants'.
func TestFileStorePurgeLeavesNothingOnDisk(t *testing.T) {
	dir := t.TempDir()
	st, err := memoryhook.NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for _, tenant := range []string{"acme", "other"} {
		if r := memoryhook.Exec(ctx, st, memoryhook.Scope{Tenant: tenant}, []byte(`{"command":"create","path":"/memories/d/a.md","file_text":"a"}`)); r.IsError {
			t.Fatal(r.Content)
		}
		if err := st.PutContinuation(ctx, tenant, "msg_1", []byte("state"), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := st.Purge(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	var left []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(p, "acme") {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("left of acme: %v", left)
	}
	if got, err := st.GetContinuation(ctx, "other", "msg_1"); err != nil || string(got) != "state" {
		t.Errorf("other's continuation: %q %v", got, err)
	}
}
