// Package pgmigrate applies ctxproxy's versioned PostgreSQL schemas: the one
// migration runner of the memory store, the ledger and whatever later parts
// keep in PostgreSQL. Servers run it at start and `ctxproxy migrate` runs it
// before a rollout (the Helm chart's pre-upgrade Job), so both must apply the
// same schemas the same way: that is why there is one runner.
//
// A Schema is a name and its versions, each a list of SQL statements. Apply
// brings a database up to a schema's last version, each schema in one
// transaction that holds the schema's advisory lock, so replicas starting
// together (and a migrate Job beside them) wait for each other and the
// versions apply exactly once. The applied versions are rows of the table
// ctxproxy_<name>_migrations; a database whose version is newer than the
// build's is refused, never downgraded.
//
// # Adding a schema or a version
//
// A new version of an existing schema: append one []string to its Versions
// (never edit a version that shipped). A new schema: declare
//
//	var historySchema = pgmigrate.Schema{Name: "memory_history", Versions: [][]string{{`CREATE TABLE …`}}}
//
// and append it to the Schemas list of the package that opens the database it
// lives in (pgstore.Schemas for the memory store's database, tokens.PGSchemas
// for the ledger's). That package's Open applies its Schemas, and
// `ctxproxy migrate` applies the same lists to the same --memory-store and
// --ledger URLs (migrateTargets in cmd/ctxproxy/migrate.go), so nothing else
// needs to know about it. A store package with a list of its own (keys.PGSchemas,
// limits.PGSchemas) is added to the migrateTargets row of the flag whose URL
// it is opened on, or a row of its own for a URL of its own.
package pgmigrate

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
)

// Schema is a named, versioned set of tables.
type Schema struct {
	// Name is [a-z][a-z0-9_]*; the versions table is ctxproxy_<Name>_migrations.
	Name string
	// Versions[i] holds the statements of version i+1, applied in order.
	Versions [][]string
}

// Version is the schema version this build writes.
func (s Schema) Version() int { return len(s.Versions) }

// table is the versions table of s.
func (s Schema) table() string { return "ctxproxy_" + s.Name + "_migrations" }

// Applied reports what Apply did to one schema: From is the version the
// database had, To the one it has now (equal when there was nothing to do).
type Applied struct {
	Schema   string
	From, To int
}

// Beginner opens a transaction: a *pgxpool.Pool or a *pgx.Conn.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

var validName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Apply brings each schema in db up to its Version, in the order given.
// It stops at the first schema that fails; what it already committed stays.
func Apply(ctx context.Context, db Beginner, schemas ...Schema) ([]Applied, error) {
	out := make([]Applied, 0, len(schemas))
	for _, s := range schemas {
		from, err := apply(ctx, db, s)
		if err != nil {
			return out, fmt.Errorf("migrate schema %s: %w", s.Name, err)
		}
		out = append(out, Applied{Schema: s.Name, From: from, To: s.Version()})
	}
	return out, nil
}

// apply runs in one transaction: a failed version leaves the database at the
// version it had. The advisory lock is keyed by the versions table and the
// current PostgreSQL schema (search_path), so replicas of one deployment wait
// for each other while deployments (and tests) in other schemas do not.
func apply(ctx context.Context, db Beginner, s Schema) (from int, err error) {
	if !validName.MatchString(s.Name) {
		return 0, errors.New("invalid schema name: want [a-z][a-z0-9_]*")
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1 || ':' || current_schema()))`, s.table()); err != nil {
		return 0, fmt.Errorf("lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.table()+` (
		version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, fmt.Errorf("create %s: %w", s.table(), err)
	}
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+s.table()).Scan(&from); err != nil {
		return 0, fmt.Errorf("read version: %w", err)
	}
	if from > s.Version() {
		return from, fmt.Errorf("database schema version %d is newer than this build's %d", from, s.Version())
	}
	for v := from + 1; v <= s.Version(); v++ {
		for _, stmt := range s.Versions[v-1] {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return from, fmt.Errorf("version %d: %w", v, err)
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+s.table()+` (version) VALUES ($1)`, v); err != nil {
			return from, fmt.Errorf("version %d: %w", v, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return from, fmt.Errorf("commit: %w", err)
	}
	return from, nil
}

// Querier runs a query: a *pgxpool.Pool or a *pgx.Conn.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrMissing is what Check returns when a schema was never applied to the
// database: its tables are not there.
var ErrMissing = errors.New("not in this database")

// Check says whether each schema is in db at this build's version, and
// writes nothing: for a reader (a report) that must neither create a schema
// nor read one its queries do not match. A schema never applied is
// ErrMissing; one at another version names both.
func Check(ctx context.Context, db Querier, schemas ...Schema) error {
	for _, s := range schemas {
		if !validName.MatchString(s.Name) {
			return fmt.Errorf("schema %s: invalid name: want [a-z][a-z0-9_]*", s.Name)
		}
		var exists bool
		if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.table()).Scan(&exists); err != nil {
			return fmt.Errorf("schema %s: %w", s.Name, err)
		}
		if !exists {
			return fmt.Errorf("schema %s: %w", s.Name, ErrMissing)
		}
		var v int
		if err := db.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+s.table()).Scan(&v); err != nil {
			return fmt.Errorf("schema %s: read version: %w", s.Name, err)
		}
		switch {
		case v == 0:
			return fmt.Errorf("schema %s: %w", s.Name, ErrMissing)
		case v != s.Version():
			return fmt.Errorf("schema %s is at version %d, and this build reads version %d", s.Name, v, s.Version())
		}
	}
	return nil
}
