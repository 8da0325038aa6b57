package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// testDB is one test's schema (see pgtest.DB), with the store helpers.
type testDB struct {
	*pgtest.DB
	url, schema, app string
	admin            *pgx.Conn
}

// newTestDB creates a schema of its own for t, dropped after it. Without
// PostgreSQL the test is skipped, or fails under CI=true.
func newTestDB(t *testing.T) *testDB {
	t.Helper()
	db := pgtest.New(t, "pgstore_test")
	return &testDB{DB: db, url: db.URL, schema: db.Schema, app: db.App, admin: db.Admin}
}

// open opens a store (a replica) on db, closed after t.
func (db *testDB) open(t *testing.T, opts ...Option) *Store {
	t.Helper()
	return db.openURL(t, db.url, opts...)
}

func (db *testDB) openURL(t *testing.T, url string, opts ...Option) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A command deadline far above the default: tests that queue a hundred
	// writes on one tenant's lock (the conformance suite, two replicas)
	// assert what lands, not how fast, and a loaded machine under -race is
	// slow. Tests of the deadline pass their own WithTimeout.
	s, err := Open(ctx, url, append([]Option{WithApplicationName(db.app), WithTimeout(time.Minute)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func (db *testDB) exec(t *testing.T, sql string, args ...any) { t.Helper(); db.Exec(t, sql, args...) }

func (db *testDB) queryInt(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	return db.QueryInt(t, sql, args...)
}

// terminate ends every backend of this test's stores; it returns how many.
func (db *testDB) terminate(t *testing.T) int64 { t.Helper(); return db.Terminate(t, db.app) }

// checkUsage asserts the usage rows equal what the entries hold.
func (db *testDB) checkUsage(t *testing.T) {
	t.Helper()
	if n := db.queryInt(t, `SELECT count(*) FROM ctxproxy_memory_usage u FULL JOIN (
			SELECT tenant, coalesce(sum(size) FILTER (WHERE NOT is_dir), 0) AS bytes, count(*) AS entries
			FROM ctxproxy_memory_entries GROUP BY tenant) e USING (tenant)
		WHERE coalesce(u.bytes, 0) <> coalesce(e.bytes, 0) OR coalesce(u.entries, 0) <> coalesce(e.entries, 0)`); n != 0 {
		t.Errorf("usage rows differ from the entries for %d tenants", n)
	}
}
