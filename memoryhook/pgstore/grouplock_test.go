package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ctxproxy/ctxproxy/internal/testwait"
	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// A scoped tenant's max_total_bytes bounds the sum of its stores on every
// replica: a write to a store of the group checks that sum under the group's
// transaction lock, so two replicas writing two stores of the group cannot
// both pass a check of the same sum. The test holds that lock as another
// replica would and sees the grouped write wait for it (and only it: a store
// outside any group writes meanwhile), then land once the lock is released.
func TestGroupedWriteWaitsForTheGroupLock(t *testing.T) {
	db := newTestDB(t)
	s := db.open(t)
	ctx := context.Background()
	path, err := memoryhook.ParsePath("/memories/notes.md")
	if err != nil {
		t.Fatal(err)
	}
	limits := memoryhook.Limits{MaxFileBytes: 1000, MaxTenantBytes: 1000, MaxFiles: 10, MaxViewChars: 1000}
	grouped := memoryhook.Scope{Tenant: "acme~team", Group: "acme", GroupBytes: 1000, Limits: limits}
	alone := memoryhook.Scope{Tenant: "other", Limits: limits}

	// The lock's holder has a connection of its own: the polls below run on
	// the admin connection, outside its transaction (pg_stat_activity is read
	// once per transaction).
	holder, err := pgx.Connect(ctx, db.url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // released below; this is for a failed test
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('ctxproxy_memory_group:' || $1, 0))`, "acme"); err != nil {
		t.Fatal(err)
	}

	wrote := make(chan error, 1)
	go func() { _, err := s.Create(ctx, grouped, path, "hello\n"); wrote <- err }()
	if _, err := s.Create(ctx, alone, path, "hello\n"); err != nil {
		t.Fatalf("a store outside the group waited or failed: %v", err)
	}
	testwait.Eventually(t, "the grouped write waiting for the group's lock", func() {
		for {
			select {
			case err := <-wrote:
				t.Errorf("the grouped write ended (%v) while another replica held the group's lock", err)
				return
			default:
			}
			if db.queryInt(t, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
				WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name = $1`, db.app) == 1 {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	if t.Failed() {
		return
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the grouped write after the lock was released: %v", err)
	}
	if got, err := s.View(ctx, grouped, path, nil); err != nil || got == "" {
		t.Fatalf("view after the write: %q %v", got, err)
	}
	db.checkUsage(t)
}
