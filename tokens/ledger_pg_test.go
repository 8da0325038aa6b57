package tokens

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// pgTestURL creates a schema of its own for t, dropped after it, and returns a URL whose
// search_path points at it. Without PostgreSQL the test is skipped, or fails under CI=true.
func pgTestURL(t *testing.T) string {
	t.Helper()
	return pgtest.New(t, "tokens_test").URL
}

func TestPGLedger(t *testing.T) {
	var url string
	open := func(t *testing.T) Ledger {
		l, err := OpenLedger(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ledgerSuite(t,
		func(t *testing.T) Ledger { url = pgTestURL(t); return open(t) },
		open, time.Microsecond) // PostgreSQL keeps microseconds
}

func TestPGLedgerMigrations(t *testing.T) {
	ctx := context.Background()
	url := pgTestURL(t)
	t.Run("opening twice keeps the version and the data", func(t *testing.T) {
		l, err := OpenPGLedger(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Append(ctx, sampleCalls()[0]); err != nil {
			t.Fatal(err)
		}
		l.Close()
		l, err = OpenPGLedger(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var versions []int
		rows, err := l.pool.Query(ctx, `SELECT version FROM ctxproxy_ledger_migrations ORDER BY version`)
		if err != nil {
			t.Fatal(err)
		}
		versions, err = pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil || len(versions) != PGSchema.Version() || versions[len(versions)-1] != PGSchema.Version() {
			t.Fatalf("versions %v %v", versions, err)
		}
		got, err := l.Query(ctx, Filter{})
		if err != nil || len(got) != 1 {
			t.Fatalf("got %v %v", got, err)
		}
	})
	t.Run("a newer schema is refused", func(t *testing.T) {
		l, err := OpenPGLedger(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.pool.Exec(ctx, `INSERT INTO ctxproxy_ledger_migrations (version) VALUES ($1)`, PGSchema.Version()+1); err != nil {
			t.Fatal(err)
		}
		l.Close()
		if _, err := OpenPGLedger(ctx, url); err == nil || !strings.Contains(err.Error(), "newer") {
			t.Fatalf("err = %v", err)
		}
	})
}
