package keys

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ctxproxy/ctxproxy/internal/pgmigrate"
)

// PGSchema is the keys table, in the memory store's database. Never edit a
// version that shipped; append a new one.
var PGSchema = pgmigrate.Schema{Name: "keys", Versions: [][]string{
	{
		`CREATE TABLE ctxproxy_keys (
			id           text        PRIMARY KEY,
			tenant       text        NOT NULL,
			name         text        NOT NULL,
			user_name    text        NOT NULL DEFAULT '',
			key_sha256   bytea       NOT NULL UNIQUE CHECK (length(key_sha256) = 32),
			created_at   timestamptz NOT NULL,
			expires_at   timestamptz,
			revoked_at   timestamptz,
			last_used_at timestamptz
		)`,
		`CREATE INDEX ctxproxy_keys_tenant ON ctxproxy_keys (tenant, created_at)`,
	},
}}

// PGSchemas are what OpenPGStore applies (and `ctxproxy migrate`).
var PGSchemas = []pgmigrate.Schema{PGSchema}

// PGStore keeps keys in PostgreSQL, shared by every replica.
type PGStore struct {
	pool *pgxpool.Pool
}

// OpenPGStore connects to url and migrates the keys table.
func OpenPGStore(ctx context.Context, url string) (*PGStore, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("open PostgreSQL key store: %w", err)
	}
	if _, err := pgmigrate.Apply(ctx, pool, PGSchemas...); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open PostgreSQL key store: %w", err)
	}
	return &PGStore{pool: pool}, nil
}

const keyColumns = `id, tenant, name, user_name, key_sha256, created_at, expires_at, revoked_at, last_used_at`

func scanKey(row pgx.Row) (Key, error) {
	var k Key
	var hash []byte
	var exp, rev, used *time.Time
	if err := row.Scan(&k.ID, &k.Tenant, &k.Name, &k.User, &hash, &k.CreatedAt, &exp, &rev, &used); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return Key{}, ErrNotFound
		}
		return Key{}, err
	}
	copy(k.Hash[:], hash)
	for _, f := range []struct {
		from *time.Time
		to   *time.Time
	}{{exp, &k.ExpiresAt}, {rev, &k.RevokedAt}, {used, &k.LastUsedAt}} {
		if f.from != nil {
			*f.to = f.from.UTC()
		}
	}
	k.CreatedAt = k.CreatedAt.UTC()
	return k, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func (s *PGStore) Insert(ctx context.Context, k Key) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO ctxproxy_keys (`+keyColumns+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)`,
		k.ID, k.Tenant, k.Name, k.User, k.Hash[:], k.CreatedAt, nullTime(k.ExpiresAt), nullTime(k.RevokedAt), nullTime(k.LastUsedAt))
	if err != nil {
		return fmt.Errorf("insert key: %w", err)
	}
	return nil
}

func (s *PGStore) List(ctx context.Context, tenant string) ([]Key, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+keyColumns+` FROM ctxproxy_keys WHERE $1 = '' OR tenant = $1 ORDER BY created_at, id`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	defer rows.Close()
	out := []Key{}
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return out, nil
}

func (s *PGStore) Get(ctx context.Context, id string) (Key, error) {
	return scanKey(s.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM ctxproxy_keys WHERE id = $1`, id))
}

func (s *PGStore) ByHash(ctx context.Context, h [32]byte) (Key, error) {
	return scanKey(s.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM ctxproxy_keys WHERE key_sha256 = $1`, h[:]))
}

func (s *PGStore) Revoke(ctx context.Context, id string, at time.Time) (Key, error) {
	return scanKey(s.pool.QueryRow(ctx, `UPDATE ctxproxy_keys SET revoked_at = coalesce(revoked_at, $2)
		WHERE id = $1 RETURNING `+keyColumns, id, at))
}

func (s *PGStore) Expire(ctx context.Context, id string, at time.Time) (Key, error) {
	return scanKey(s.pool.QueryRow(ctx, `UPDATE ctxproxy_keys SET expires_at = least(coalesce(expires_at, $2), $2)
		WHERE id = $1 RETURNING `+keyColumns, id, at))
}

func (s *PGStore) Touch(ctx context.Context, used map[string]time.Time) error {
	ids := make([]string, 0, len(used))
	times := make([]time.Time, 0, len(used))
	for id, t := range used {
		ids = append(ids, id)
		times = append(times, t.UTC())
	}
	_, err := s.pool.Exec(ctx, `UPDATE ctxproxy_keys k SET last_used_at = greatest(k.last_used_at, u.t)
		FROM unnest($1::text[], $2::timestamptz[]) AS u(id, t) WHERE k.id = u.id`, ids, times)
	if err != nil {
		return fmt.Errorf("record key use: %w", err)
	}
	return nil
}

func (s *PGStore) Close() error {
	s.pool.Close()
	return nil
}
