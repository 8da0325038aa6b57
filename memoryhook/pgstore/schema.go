package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// migrations are applied in order, each in the one transaction that holds the
// migration lock; never edit one that shipped, append a new one.
//
// Paths are Path.Rel() ("a/b.md"); the root has no row (it always exists).
// Text columns use the "C" collation so that byte order decides, which makes
// a directory's subtree the key range [dir + "/", dir + "0") ('0' follows
// '/') and lets the primary key index serve it.
var migrations = [][]string{
	1: {
		`CREATE TABLE ctxproxy_memory_entries (
			tenant     text COLLATE "C" NOT NULL,
			path       text COLLATE "C" NOT NULL CHECK (path <> ''),
			is_dir     boolean          NOT NULL,
			size       bigint           NOT NULL DEFAULT 0, -- a file's bytes; 0 for directories
			data       bytea            NOT NULL DEFAULT '',
			updated_at timestamptz      NOT NULL DEFAULT now(),
			PRIMARY KEY (tenant, path)
		)`,
		// The tenant's usage for the limits, kept in the transaction of every
		// write. Its row is also the tenant's write lock (SELECT … FOR UPDATE).
		`CREATE TABLE ctxproxy_memory_usage (
			tenant  text COLLATE "C" PRIMARY KEY,
			bytes   bigint NOT NULL DEFAULT 0,
			entries bigint NOT NULL DEFAULT 0
		)`,
		`CREATE TABLE ctxproxy_memory_continuations (
			tenant     text COLLATE "C" NOT NULL,
			reply_hash bytea            NOT NULL, -- sha256 of the reply id: a client's string, never a key as is
			data       bytea            NOT NULL,
			expires_at timestamptz      NOT NULL,
			PRIMARY KEY (tenant, reply_hash)
		)`,
		`CREATE INDEX ctxproxy_memory_continuations_expiry ON ctxproxy_memory_continuations (tenant, expires_at)`,
	},
}

// SchemaVersion is the schema version this build writes.
const SchemaVersion = 1

// migrate brings the schema up to SchemaVersion. The advisory lock is keyed
// by the schema too, so replicas starting at once wait for each other while
// stores in other schemas (tests) do not.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('ctxproxy_memory_migrations:' || current_schema()))`); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS ctxproxy_memory_migrations (
		version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var have int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM ctxproxy_memory_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("migrate: read version: %w", err)
	}
	if have > SchemaVersion {
		return fmt.Errorf("migrate: database schema version %d is newer than this build's %d", have, SchemaVersion)
	}
	for v := have + 1; v <= SchemaVersion; v++ {
		for _, stmt := range migrations[v] {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("migrate to version %d: %w", v, err)
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ctxproxy_memory_migrations (version) VALUES ($1)`, v); err != nil {
			return fmt.Errorf("migrate to version %d: %w", v, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}
