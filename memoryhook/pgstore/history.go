package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// History: every write transaction also writes its versions (the rec*
// functions below, called by the backend's writes with the same tx), so a
// write and its versions commit together or not at all.
//
// ctxproxy_memory_memories holds the live memories (a file's id, kept
// across renames, and its head version); a deleted memory's row goes, its
// versions stay in ctxproxy_memory_versions until retention or purge.
var historyMigration = []string{
	`CREATE TABLE ctxproxy_memory_memories (
		tenant     text COLLATE "C" NOT NULL,
		id         text COLLATE "C" NOT NULL,
		path       text COLLATE "C" NOT NULL,
		head       text COLLATE "C" NOT NULL,
		sha        text             NOT NULL,
		size       bigint           NOT NULL,
		created_at timestamptz      NOT NULL,
		updated_at timestamptz      NOT NULL,
		PRIMARY KEY (tenant, id),
		UNIQUE (tenant, path)
	)`,
	`CREATE TABLE ctxproxy_memory_versions (
		tenant      text COLLATE "C" NOT NULL,
		id          text COLLATE "C" NOT NULL,
		seq         bigserial        NOT NULL,
		memory_id   text COLLATE "C" NOT NULL,
		operation   text             NOT NULL,
		path        text COLLATE "C",
		content     bytea,
		sha         text,
		size        bigint,
		actor       jsonb            NOT NULL,
		created_at  timestamptz      NOT NULL,
		redacted_at timestamptz,
		redacted_by jsonb,
		PRIMARY KEY (tenant, id)
	)`,
	`CREATE INDEX ctxproxy_memory_versions_seq ON ctxproxy_memory_versions (tenant, seq)`,
	// Files written before history existed are adopted by the system actor.
	`INSERT INTO ctxproxy_memory_memories (tenant, id, path, head, sha, size, created_at, updated_at)
		SELECT tenant, 'mem_' || substr(md5(random()::text || clock_timestamp()::text || path), 1, 24),
			path, 'memver_' || substr(md5(random()::text || clock_timestamp()::text || path), 1, 24),
			encode(sha256(data), 'hex'), size, updated_at, updated_at
		FROM ctxproxy_memory_entries WHERE NOT is_dir`,
	`INSERT INTO ctxproxy_memory_versions (tenant, id, memory_id, operation, path, content, sha, size, actor, created_at)
		SELECT m.tenant, m.head, m.id, 'created', m.path, e.data, m.sha, m.size, '{"type":"system_actor"}', m.created_at
		FROM ctxproxy_memory_memories m JOIN ctxproxy_memory_entries e USING (tenant, path)`,
}

// newIDs is SQL for fresh ids inside a statement.
const newVersionIDSQL = `'memver_' || substr(md5(random()::text || clock_timestamp()::text), 1, 24)`

func actorJSON(a memoryhook.Actor) []byte {
	b, _ := json.Marshal(a)
	return b
}

// memoryAt locks and returns the id and sha of the memory at rel ("" when none).
func memoryAt(ctx context.Context, tx pgx.Tx, tenant, rel string) (id, sha string, err error) {
	err = tx.QueryRow(ctx, `SELECT id, sha FROM ctxproxy_memory_memories WHERE tenant = $1 AND path = $2 FOR UPDATE`,
		tenant, rel).Scan(&id, &sha)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", nil
	}
	return id, sha, err
}

// recCreate records the creation of file rel holding data.
func recCreate(ctx context.Context, tx pgx.Tx, sc memoryhook.Scope, rel string, data []byte) error {
	if err := memoryhook.CheckExpect(sc, "", ""); err != nil {
		return err
	}
	return newMemory(ctx, tx, sc, memoryhook.NewMemoryID(), rel, data)
}

func newMemory(ctx context.Context, tx pgx.Tx, sc memoryhook.Scope, id, rel string, data []byte) error {
	ver, sha := memoryhook.NewVersionID(), memoryhook.SHA256Hex(data)
	if _, err := tx.Exec(ctx, `INSERT INTO ctxproxy_memory_memories (tenant, id, path, head, sha, size, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp(), clock_timestamp())`,
		sc.Tenant, id, rel, ver, sha, len(data)); err != nil {
		return err
	}
	return insertVersion(ctx, tx, sc, ver, id, memoryhook.OpCreated, rel, data)
}

func insertVersion(ctx context.Context, tx pgx.Tx, sc memoryhook.Scope, ver, id, op, rel string, data []byte) error {
	_, err := tx.Exec(ctx, `INSERT INTO ctxproxy_memory_versions (tenant, id, memory_id, operation, path, content, sha, size, actor, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, clock_timestamp())`,
		sc.Tenant, ver, id, op, rel, data, memoryhook.SHA256Hex(data), len(data), actorJSON(sc.Actor))
	return err
}

// recUpdate records file rel changing from old to data.
func recUpdate(ctx context.Context, tx pgx.Tx, sc memoryhook.Scope, rel string, old, data []byte) error {
	if bytes.Equal(old, data) {
		return nil // a write that changes nothing adds no version (and meets any precondition)
	}
	id, sha, err := memoryAt(ctx, tx, sc.Tenant, rel)
	if err != nil {
		return err
	}
	if err := memoryhook.CheckExpect(sc, id, sha); err != nil {
		return err
	}
	if id == "" { // a file from a replica without history
		return newMemory(ctx, tx, sc, memoryhook.NewMemoryID(), rel, data)
	}
	ver := memoryhook.NewVersionID()
	if _, err := tx.Exec(ctx, `UPDATE ctxproxy_memory_memories SET head = $3, sha = $4, size = $5, updated_at = clock_timestamp()
		WHERE tenant = $1 AND id = $2`, sc.Tenant, id, ver, memoryhook.SHA256Hex(data), len(data)); err != nil {
		return err
	}
	return insertVersion(ctx, tx, sc, ver, id, memoryhook.OpModified, rel, data)
}

// expectAt checks sc.Expect against the memory at rel.
func expectAt(ctx context.Context, tx pgx.Tx, sc memoryhook.Scope, rel string) error {
	if sc.Expect == nil {
		return nil
	}
	id, sha, err := memoryAt(ctx, tx, sc.Tenant, rel)
	if err != nil {
		return err
	}
	return memoryhook.CheckExpect(sc, id, sha)
}

// recDelete records the deletion of rel and everything below it.
func recDelete(ctx context.Context, tx pgx.Tx, sc memoryhook.Scope, rel string) error {
	if err := expectAt(ctx, tx, sc, rel); err != nil {
		return err
	}
	lo, hi := subtree(rel)
	_, err := tx.Exec(ctx, `WITH gone AS (
			DELETE FROM ctxproxy_memory_memories
			WHERE tenant = $1 AND (path = $2 OR (path >= $3 AND path < $4))
			RETURNING id, path)
		INSERT INTO ctxproxy_memory_versions (tenant, id, memory_id, operation, path, actor, created_at)
		SELECT $1, `+newVersionIDSQL+`, id, 'deleted', path, $5, clock_timestamp() FROM gone`,
		sc.Tenant, rel, lo, hi, actorJSON(sc.Actor))
	return err
}

// recRename records the move of from (and everything below it) to to. It
// runs before the entries move, so their content is still at the old paths.
func recRename(ctx context.Context, tx pgx.Tx, sc memoryhook.Scope, from, to string) error {
	if err := expectAt(ctx, tx, sc, from); err != nil {
		return err
	}
	lo, hi := subtree(from)
	_, err := tx.Exec(ctx, `WITH moved AS (
			UPDATE ctxproxy_memory_memories
			SET path = $5 || substr(path, char_length($2) + 1), head = `+newVersionIDSQL+`,
				updated_at = clock_timestamp()
			WHERE tenant = $1 AND (path = $2 OR (path >= $3 AND path < $4))
			RETURNING id, path, head, sha, size)
		INSERT INTO ctxproxy_memory_versions (tenant, id, memory_id, operation, path, content, sha, size, actor, created_at)
		SELECT $1, m.head, m.id, 'modified', m.path, e.data, m.sha, m.size, $6, clock_timestamp()
		FROM moved m JOIN ctxproxy_memory_entries e ON e.tenant = $1 AND e.path = $2 || substr(m.path, char_length($5) + 1)`,
		sc.Tenant, from, lo, hi, to, actorJSON(sc.Actor))
	return err
}

var _ memoryhook.Governed = (*Store)(nil)

// Backend is the storage under the store's commands (for operator writes).
func (s *Store) Backend() memoryhook.Backend { return s.b }

// Memories implements memoryhook.History.
func (s *Store) Memories(ctx context.Context, tenant string) ([]memoryhook.Memory, error) {
	var out []memoryhook.Memory
	err := s.read(ctx, tenant, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `SELECT id, path, sha, size, head, created_at, updated_at
			FROM ctxproxy_memory_memories WHERE tenant = $1 ORDER BY path`, tenant)
		if err != nil {
			return err
		}
		var m memoryhook.Memory
		_, err = pgx.ForEachRow(rows, []any{&m.ID, &m.Path, &m.SHA256, &m.Size, &m.VersionID, &m.CreatedAt, &m.UpdatedAt}, func() error {
			out = append(out, m)
			return nil
		})
		return err
	})
	return out, err
}

// read runs a read of the history under the store's deadline.
func (s *Store) read(ctx context.Context, tenant string, fn func(ctx context.Context) error) error {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	return s.b.run(ctx, memoryhook.Scope{Tenant: tenant}, fn)
}

// MemoryByID implements memoryhook.History.
func (s *Store) MemoryByID(ctx context.Context, tenant, id string) (memoryhook.Memory, error) {
	var m memoryhook.Memory
	err := s.read(ctx, tenant, func(ctx context.Context) error {
		err := s.pool.QueryRow(ctx, `SELECT id, path, sha, size, head, created_at, updated_at
			FROM ctxproxy_memory_memories WHERE tenant = $1 AND id = $2`, tenant, id).
			Scan(&m.ID, &m.Path, &m.SHA256, &m.Size, &m.VersionID, &m.CreatedAt, &m.UpdatedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return memoryhook.ErrNotExist
		}
		return err
	})
	return m, err
}

const versionCols = `id, memory_id, operation, coalesce(path, ''), coalesce(sha, ''), coalesce(size, 0), actor,
	created_at, redacted_at, redacted_by, seq, content IS NOT NULL`

// scanVersion scans versionCols, then content when withContent.
func scanVersion(row pgx.Row, withContent bool) (memoryhook.Version, error) {
	var v memoryhook.Version
	var actor, by []byte
	var red *time.Time
	dest := []any{&v.ID, &v.MemoryID, &v.Op, &v.Path, &v.SHA256, &v.Size, &actor, &v.At, &red, &by, &v.Seq, &v.HasContent}
	if withContent {
		dest = append(dest, &v.Content)
	}
	if err := row.Scan(dest...); err != nil {
		return v, err
	}
	if err := json.Unmarshal(actor, &v.Actor); err != nil {
		return v, fmt.Errorf("version %s: actor: %w", v.ID, err)
	}
	if red != nil {
		v.RedactedAt = *red
	}
	if by != nil {
		v.RedactedBy = &memoryhook.Actor{}
		if err := json.Unmarshal(by, v.RedactedBy); err != nil {
			return v, fmt.Errorf("version %s: redacted_by: %w", v.ID, err)
		}
	}
	if !withContent {
		v.HasContent = false
	}
	return v, nil
}

// Versions implements memoryhook.History.
func (s *Store) Versions(ctx context.Context, tenant string, q memoryhook.VersionQuery) ([]memoryhook.Version, error) {
	var out []memoryhook.Version
	err := s.read(ctx, tenant, func(ctx context.Context) error {
		out = out[:0]
		cols := versionCols
		if q.Content {
			cols += ", content"
		}
		var since, until *time.Time
		if !q.Since.IsZero() {
			since = &q.Since
		}
		if !q.Until.IsZero() {
			until = &q.Until
		}
		var limit *int
		if q.Limit > 0 {
			limit = &q.Limit
		}
		rows, err := s.pool.Query(ctx, `SELECT `+cols+` FROM ctxproxy_memory_versions
			WHERE tenant = $1 AND ($2 = '' OR memory_id = $2) AND ($3 = '' OR operation = $3)
			AND ($4 = '' OR actor->>'request_id' = $4) AND ($5 = '' OR actor->>'api_key_id' = $5)
			AND ($6 = '' OR actor->>'service_account_id' = $6)
			AND ($7::timestamptz IS NULL OR created_at >= $7) AND ($8::timestamptz IS NULL OR created_at <= $8)
			AND ($9 = 0 OR seq < $9)
			ORDER BY seq DESC LIMIT $10`,
			tenant, q.MemoryID, q.Op, q.RequestID, q.KeyID, q.Operator, since, until, q.BeforeSeq, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			v, err := scanVersion(rows, q.Content)
			if err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	return out, err
}

// Version implements memoryhook.History.
func (s *Store) Version(ctx context.Context, tenant, id string, content bool) (memoryhook.Version, error) {
	var v memoryhook.Version
	err := s.read(ctx, tenant, func(ctx context.Context) error {
		cols := versionCols
		if content {
			cols += ", content"
		}
		var err error
		v, err = scanVersion(s.pool.QueryRow(ctx, `SELECT `+cols+` FROM ctxproxy_memory_versions WHERE tenant = $1 AND id = $2`, tenant, id), content)
		if errors.Is(err, pgx.ErrNoRows) {
			return memoryhook.ErrNotExist
		}
		return err
	})
	return v, err
}

// history runs fn in a write transaction of the tenant (usage row locked).
func (s *Store) history(ctx context.Context, tenant string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	return s.b.write(ctx, memoryhook.Scope{Tenant: tenant}, func(ctx context.Context, tx pgx.Tx, _ *memoryhook.Usage) error {
		return fn(ctx, tx)
	})
}

// Redact implements memoryhook.History.
func (s *Store) Redact(ctx context.Context, tenant, id string, by memoryhook.Actor) (memoryhook.Version, error) {
	err := s.history(ctx, tenant, func(ctx context.Context, tx pgx.Tx) error {
		var head bool
		err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ctxproxy_memory_memories WHERE tenant = $1 AND head = $2)
			FROM ctxproxy_memory_versions WHERE tenant = $1 AND id = $2`, tenant, id).Scan(&head)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return memoryhook.ErrNotExist
		case err != nil:
			return err
		case head:
			return memoryhook.ErrHeadVersion
		}
		_, err = tx.Exec(ctx, `UPDATE ctxproxy_memory_versions SET content = NULL, path = NULL, sha = NULL, size = NULL,
			redacted_at = clock_timestamp(), redacted_by = $3 WHERE tenant = $1 AND id = $2 AND redacted_at IS NULL`,
			tenant, id, actorJSON(by))
		return err
	})
	if err != nil {
		return memoryhook.Version{}, unwrapContract(err)
	}
	return s.Version(ctx, tenant, id, false)
}

// unwrapContract returns the history sentinels as they are.
func unwrapContract(err error) error {
	for _, e := range []error{memoryhook.ErrHeadVersion, memoryhook.ErrPrecondition, memoryhook.ErrNotExist} {
		if errors.Is(err, e) {
			return e
		}
	}
	return err
}

// Prune implements memoryhook.History.
func (s *Store) Prune(ctx context.Context, tenant string, r memoryhook.Retention, now time.Time) (int, error) {
	var n int
	err := s.history(ctx, tenant, func(ctx context.Context, tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, memory_id, seq, created_at FROM ctxproxy_memory_versions WHERE tenant = $1`, tenant)
		if err != nil {
			return err
		}
		var vs []memoryhook.Version
		var v memoryhook.Version
		if _, err := pgx.ForEachRow(rows, []any{&v.ID, &v.MemoryID, &v.Seq, &v.At}, func() error {
			vs = append(vs, v)
			return nil
		}); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT id, head FROM ctxproxy_memory_memories WHERE tenant = $1`, tenant)
		if err != nil {
			return err
		}
		heads := map[string]string{}
		var id, head string
		if _, err := pgx.ForEachRow(rows, []any{&id, &head}, func() error {
			heads[id] = head
			return nil
		}); err != nil {
			return err
		}
		drop := memoryhook.PruneSet(vs, heads, r, now)
		n = len(drop)
		if n == 0 {
			return nil
		}
		_, err = tx.Exec(ctx, `DELETE FROM ctxproxy_memory_versions WHERE tenant = $1 AND id = ANY($2)`, tenant, drop)
		return err
	})
	return n, err
}

// SubStores implements memoryhook.History: the tenants named tenant~… that
// have entries or versions ('~' is 0x7e, so they sort before tenant + 0x7f).
func (s *Store) SubStores(ctx context.Context, tenant string) ([]string, error) {
	var out []string
	lo := memoryhook.SubStorePrefix(tenant)
	hi := tenant + "\x7f"
	err := s.read(ctx, tenant, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `SELECT DISTINCT tenant FROM ctxproxy_memory_entries WHERE tenant >= $1 AND tenant < $2
			UNION SELECT DISTINCT tenant FROM ctxproxy_memory_versions WHERE tenant >= $1 AND tenant < $2
			ORDER BY 1`, lo, hi)
		if err != nil {
			return err
		}
		var name string
		_, err = pgx.ForEachRow(rows, []any{&name}, func() error {
			if memoryhook.ValidTenant(name) {
				out = append(out, name)
			}
			return nil
		})
		return err
	})
	return out, err
}

// Purge implements memoryhook.History: entries, memories, versions,
// continuations and the usage row of the tenant go, in one transaction.
func (s *Store) Purge(ctx context.Context, tenant string) (files, versions int, err error) {
	err = s.history(ctx, tenant, func(ctx context.Context, tx pgx.Tx) error {
		var f, v int64
		if err := tx.QueryRow(ctx, `WITH e AS (DELETE FROM ctxproxy_memory_entries WHERE tenant = $1 RETURNING is_dir)
			SELECT count(*) FILTER (WHERE NOT is_dir) FROM e`, tenant).Scan(&f); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `WITH v AS (DELETE FROM ctxproxy_memory_versions WHERE tenant = $1 RETURNING 1)
			SELECT count(*) FROM v`, tenant).Scan(&v); err != nil {
			return err
		}
		for _, q := range []string{
			`DELETE FROM ctxproxy_memory_memories WHERE tenant = $1`,
			`DELETE FROM ctxproxy_memory_continuations WHERE tenant = $1`,
			`DELETE FROM ctxproxy_memory_usage WHERE tenant = $1`,
		} {
			if _, err := tx.Exec(ctx, q, tenant); err != nil {
				return err
			}
		}
		files, versions = int(f), int(v)
		return nil
	})
	return files, versions, err
}
