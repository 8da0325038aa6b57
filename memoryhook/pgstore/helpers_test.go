package pgstore

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const baseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

var seq atomic.Int64

// testDB is one test's schema: url points at it (search_path), app is an
// application_name no other test uses, admin runs statements on the side.
type testDB struct {
	url, schema, app string
	admin            *pgx.Conn
}

func pgURL() string {
	if u := os.Getenv("CTXPROXY_TEST_PG"); u != "" {
		return u
	}
	return baseURL
}

// newTestDB creates a schema of its own for t, dropped after it. Without
// PostgreSQL the test is skipped, or fails under CI=true.
func newTestDB(t *testing.T) *testDB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	url := pgURL()
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL required under CI: %v", err)
		}
		t.Skipf("no PostgreSQL: %v", err)
	}
	n := seq.Add(1)
	db := &testDB{
		schema: fmt.Sprintf("pgstore_test_%d_%d", os.Getpid(), n),
		app:    fmt.Sprintf("pgstore-test-%d-%d", os.Getpid(), n),
		admin:  admin,
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+db.schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP SCHEMA "+db.schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", db.schema, err)
		}
		admin.Close(ctx)
	})
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	db.url = url + sep + "search_path=" + db.schema
	return db
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
	s, err := Open(ctx, url, append([]Option{WithApplicationName(db.app)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// exec runs sql on the side, in the test's schema.
func (db *testDB) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := db.admin.Exec(context.Background(), "SET search_path TO "+db.schema); err != nil {
		t.Fatal(err)
	}
	if _, err := db.admin.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// queryInt runs a query returning one integer, in the test's schema.
func (db *testDB) queryInt(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	if _, err := db.admin.Exec(context.Background(), "SET search_path TO "+db.schema); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := db.admin.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// terminate ends every backend of this test's stores; it returns how many.
func (db *testDB) terminate(t *testing.T) int64 {
	t.Helper()
	return db.queryInt(t, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = $1`, db.app)
}

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
