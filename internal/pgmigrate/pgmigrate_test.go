package pgmigrate_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ctxproxy/ctxproxy/internal/pgmigrate"
	"github.com/ctxproxy/ctxproxy/internal/pgtest"
)

func openPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var (
	v1 = []string{`CREATE TABLE widgets (id int PRIMARY KEY)`}
	v2 = []string{`ALTER TABLE widgets ADD COLUMN name text NOT NULL DEFAULT ''`, `CREATE TABLE gadgets (id int)`}
)

func TestApply(t *testing.T) {
	ctx := context.Background()
	t.Run("replicas applying at once apply each version once", func(t *testing.T) {
		db := pgtest.New(t, "pgmigrate_test")
		s := pgmigrate.Schema{Name: "widgets", Versions: [][]string{v1, v2}}
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := pgmigrate.Apply(ctx, openPool(t, db.URL), s); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if n := db.QueryInt(t, `SELECT count(*) FROM ctxproxy_widgets_migrations`); n != 2 {
			t.Errorf("%d version rows, want 2", n)
		}
		db.Exec(t, `INSERT INTO widgets (id, name) VALUES (1, 'a')`)
	})
	t.Run("a second run has nothing to do and says so", func(t *testing.T) {
		db := pgtest.New(t, "pgmigrate_test")
		pool := openPool(t, db.URL)
		s := pgmigrate.Schema{Name: "widgets", Versions: [][]string{v1}}
		got, err := pgmigrate.Apply(ctx, pool, s)
		if err != nil || len(got) != 1 || got[0] != (pgmigrate.Applied{Schema: "widgets", From: 0, To: 1}) {
			t.Fatalf("first run: %+v, %v", got, err)
		}
		s.Versions = append(s.Versions, v2) // the next release
		got, err = pgmigrate.Apply(ctx, pool, s)
		if err != nil || got[0] != (pgmigrate.Applied{Schema: "widgets", From: 1, To: 2}) {
			t.Fatalf("upgrade: %+v, %v", got, err)
		}
		got, err = pgmigrate.Apply(ctx, pool, s)
		if err != nil || got[0] != (pgmigrate.Applied{Schema: "widgets", From: 2, To: 2}) {
			t.Fatalf("again: %+v, %v", got, err)
		}
	})
	t.Run("a failing version leaves the database at the version it had", func(t *testing.T) {
		db := pgtest.New(t, "pgmigrate_test")
		pool := openPool(t, db.URL)
		if _, err := pgmigrate.Apply(ctx, pool, pgmigrate.Schema{Name: "widgets", Versions: [][]string{v1}}); err != nil {
			t.Fatal(err)
		}
		bad := pgmigrate.Schema{Name: "widgets", Versions: [][]string{v1, {v2[1], `CREATE TABLE widgets (id int)`}}}
		_, err := pgmigrate.Apply(ctx, pool, bad)
		if err == nil || !strings.Contains(err.Error(), "migrate schema widgets: version 2:") {
			t.Fatalf("err = %v", err)
		}
		if n := db.QueryInt(t, `SELECT max(version) FROM ctxproxy_widgets_migrations`); n != 1 {
			t.Errorf("version %d after a failed upgrade, want 1", n)
		}
		if n := db.QueryInt(t, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'gadgets'`); n != 0 {
			t.Error("half of the failed version was kept")
		}
	})
	t.Run("a database newer than the build is refused", func(t *testing.T) {
		db := pgtest.New(t, "pgmigrate_test")
		pool := openPool(t, db.URL)
		if _, err := pgmigrate.Apply(ctx, pool, pgmigrate.Schema{Name: "widgets", Versions: [][]string{v1, v2}}); err != nil {
			t.Fatal(err)
		}
		_, err := pgmigrate.Apply(ctx, pool, pgmigrate.Schema{Name: "widgets", Versions: [][]string{v1}})
		if err == nil || !strings.Contains(err.Error(), "database schema version 2 is newer than this build's 1") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("schemas in one database keep their own versions", func(t *testing.T) {
		db := pgtest.New(t, "pgmigrate_test")
		a := pgmigrate.Schema{Name: "widgets", Versions: [][]string{v1, v2}}
		b := pgmigrate.Schema{Name: "sprockets", Versions: [][]string{{`CREATE TABLE sprockets (id int)`}}}
		got, err := pgmigrate.Apply(ctx, openPool(t, db.URL), a, b)
		if err != nil || len(got) != 2 || got[1] != (pgmigrate.Applied{Schema: "sprockets", From: 0, To: 1}) {
			t.Fatalf("%+v, %v", got, err)
		}
		if n := db.QueryInt(t, `SELECT max(version) FROM ctxproxy_sprockets_migrations`); n != 1 {
			t.Errorf("sprockets at %d", n)
		}
	})
	t.Run("a name that is not an identifier is refused before any SQL", func(t *testing.T) {
		db := pgtest.New(t, "pgmigrate_test")
		for _, name := range []string{"", "Widgets", "w; DROP TABLE x", "1w"} {
			_, err := pgmigrate.Apply(ctx, openPool(t, db.URL), pgmigrate.Schema{Name: name, Versions: [][]string{v1}})
			if err == nil || !strings.Contains(err.Error(), "invalid schema name") {
				t.Errorf("name %q: err = %v", name, err)
			}
		}
	})
}

func TestCheck(t *testing.T) {
	ctx := context.Background()
	s := pgmigrate.Schema{Name: "widgets", Versions: [][]string{v1, v2}}
	t.Run("a schema never applied is missing, and checking creates nothing", func(t *testing.T) {
		db := pgtest.New(t, "pgmigrate_test")
		err := pgmigrate.Check(ctx, openPool(t, db.URL), s)
		if !errors.Is(err, pgmigrate.ErrMissing) {
			t.Fatalf("err = %v, want ErrMissing", err)
		}
		if n := db.QueryInt(t, `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()`); n != 0 {
			t.Errorf("Check created %d tables", n)
		}
	})
	t.Run("a schema at this build's version passes", func(t *testing.T) {
		db := pgtest.New(t, "pgmigrate_test")
		pool := openPool(t, db.URL)
		if _, err := pgmigrate.Apply(ctx, pool, s); err != nil {
			t.Fatal(err)
		}
		if err := pgmigrate.Check(ctx, pool, s); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a schema at another version names both", func(t *testing.T) {
		db := pgtest.New(t, "pgmigrate_test")
		pool := openPool(t, db.URL)
		if _, err := pgmigrate.Apply(ctx, pool, pgmigrate.Schema{Name: "widgets", Versions: [][]string{v1}}); err != nil {
			t.Fatal(err)
		}
		err := pgmigrate.Check(ctx, pool, s)
		if err == nil || !strings.Contains(err.Error(), "schema widgets is at version 1, and this build reads version 2") {
			t.Fatalf("err = %v", err)
		}
	})
}
