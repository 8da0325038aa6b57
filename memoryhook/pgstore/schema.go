package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ctxproxy/ctxproxy/internal/pgmigrate"
)

// Schemas are the PostgreSQL schemas of the memory store's database, applied
// by Open and by `ctxproxy migrate --memory-store` (see internal/pgmigrate for
// how to add one).
var Schemas = []pgmigrate.Schema{Schema}

// Schema is the memory store's tables. Never edit a version that shipped;
// append a new one.
//
// Paths are Path.Rel() ("a/b.md"); the root has no row (it always exists).
// Text columns use the "C" collation so that byte order decides, which makes
// a directory's subtree the key range [dir + "/", dir + "0") ('0' follows
// '/') and lets the primary key index serve it.
var Schema = pgmigrate.Schema{Name: "memory", Versions: [][]string{
	{
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
	historyMigration, // version 2: history.go
}}

// migrate brings the database up to Schemas.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pgmigrate.Apply(ctx, pool, Schemas...); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
