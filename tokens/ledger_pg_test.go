package tokens

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/pgmigrate"
	"github.com/ctxproxy/ctxproxy/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgTestURL creates a schema of its own for t, dropped after it, and returns a URL whose
// search_path points at it. Without PostgreSQL the test is skipped, or fails under CI=true.
func pgTestURL(t testing.TB) string {
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

// A row written before the savings parts existed (schema 7) reads back as recorded: savings
// as they were, gross equal to them, no penalty, cache_effect none.
func TestPGLedgerReadsRowsFromBeforeNetSavings(t *testing.T) {
	ctx := context.Background()
	url := pgTestURL(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pgmigrate.Apply(ctx, pool, pgmigrate.Schema{Name: PGSchema.Name, Versions: PGSchema.Versions[:7]}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO ctxproxy_ledger (time, tenant, model, cleared_input_tokens, savings_nano_usd, applied_edits,
		cache_read_input_tokens) VALUES (now(), 'acme', 'claude-sonnet-4-5', 1000, 3000000, '[{"type":"clear_tool_uses_20250919","cleared_tool_uses":1,"cleared_input_tokens":1000}]', 5000)`); err != nil {
		t.Fatal(err)
	}
	l, err := OpenPGLedger(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Append(ctx, sampleCalls()[0]); err != nil {
		t.Fatal(err)
	}
	got, err := l.Query(ctx, Filter{})
	if err != nil || len(got) != 2 {
		t.Fatalf("got %v %v", got, err)
	}
	old := got[0]
	if old.Savings != 3_000_000 || old.SavingsGross != 3_000_000 || old.CachePenalty != 0 || old.CacheEffect != CacheNone || old.CacheMissCause != "" {
		t.Errorf("old row = savings %s gross %s penalty %s effect %q cause %q", old.Savings, old.SavingsGross, old.CachePenalty, old.CacheEffect, old.CacheMissCause)
	}
	if n := got[1]; n.SavingsGross != 15_540_000 || n.CachePenalty != 6_900_000 || n.Savings != 8_640_000 ||
		n.CacheEffect != CacheMeasured || n.CacheMissCause != CauseEdits || n.CacheMissedInputTokens != 2000 {
		t.Errorf("new row = %+v", n)
	}
}
