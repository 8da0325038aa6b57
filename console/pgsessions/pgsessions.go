// Package pgsessions keeps the operator console's sessions in PostgreSQL
// (the memory store's database), so that every replica knows every
// sign-in: a page served by one replica and the next by another.
package pgsessions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ctxproxy/ctxproxy/console"
	"github.com/ctxproxy/ctxproxy/internal/pgmigrate"
)

// PGSchema is the sessions table. Never edit a version that shipped; append
// a new one.
var PGSchema = pgmigrate.Schema{Name: "console_sessions", Versions: [][]string{
	{
		`CREATE TABLE ctxproxy_console_sessions (
			id_sha256    bytea       PRIMARY KEY CHECK (length(id_sha256) = 32),
			token_sha256 bytea       NOT NULL CHECK (length(token_sha256) = 32),
			csrf         text        NOT NULL,
			expires_at   timestamptz NOT NULL
		)`,
		`CREATE INDEX ctxproxy_console_sessions_expiry ON ctxproxy_console_sessions (expires_at)`,
	},
}}

// PGSchemas are what Open applies (and `ctxproxy migrate`).
var PGSchemas = []pgmigrate.Schema{PGSchema}

// Store is a console.Sessions in PostgreSQL.
type Store struct {
	pool *pgxpool.Pool
}

var _ console.Sessions = (*Store)(nil)

// Open connects to url and migrates the sessions table.
func Open(ctx context.Context, url string) (*Store, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("open PostgreSQL console sessions: %w", err)
	}
	if _, err := pgmigrate.Apply(ctx, pool, PGSchemas...); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open PostgreSQL console sessions: %w", err)
	}
	return &Store{pool: pool}, nil
}

// Create keeps s, and deletes the sessions that expired (sign-ins are rare:
// the sweep keeps the table to the live sessions).
func (s *Store) Create(ctx context.Context, id [32]byte, sess console.Session) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM ctxproxy_console_sessions WHERE expires_at <= now()`); err != nil {
		return fmt.Errorf("create console session: %w", err)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO ctxproxy_console_sessions (id_sha256, token_sha256, csrf, expires_at) VALUES ($1, $2, $3, $4)`,
		id[:], sess.TokenSHA256[:], sess.CSRF, sess.Expires)
	if err != nil {
		return fmt.Errorf("create console session: %w", err)
	}
	return nil
}

func (s *Store) Get(ctx context.Context, id [32]byte, now time.Time) (console.Session, error) {
	var sess console.Session
	var tok []byte
	err := s.pool.QueryRow(ctx, `SELECT token_sha256, csrf, expires_at FROM ctxproxy_console_sessions WHERE id_sha256 = $1 AND expires_at > $2`,
		id[:], now).Scan(&tok, &sess.CSRF, &sess.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return console.Session{}, console.ErrNoSession
	}
	if err != nil {
		return console.Session{}, fmt.Errorf("read console session: %w", err)
	}
	copy(sess.TokenSHA256[:], tok)
	return sess, nil
}

func (s *Store) Delete(ctx context.Context, id [32]byte) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM ctxproxy_console_sessions WHERE id_sha256 = $1`, id[:]); err != nil {
		return fmt.Errorf("delete console session: %w", err)
	}
	return nil
}

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }
