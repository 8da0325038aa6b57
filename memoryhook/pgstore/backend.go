package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// backend implements memoryhook.Backend on the tables of schema.go.
type backend struct {
	pool *pgxpool.Pool
	// brokeAt is when a command last failed on a broken connection (unix
	// nanoseconds); for a while after it the pool pings every connection it
	// hands out, since its other idle ones are likely dead too (a restart,
	// a failover).
	brokeAt atomic.Int64
}

// suspect reports whether a pooled connection must be pinged before use.
func (b *backend) suspect(p pgxpool.ShouldPingParams) bool {
	return p.IdleDuration > time.Second || time.Since(time.Unix(0, b.brokeAt.Load())) < suspectFor
}

// suspectFor is how long after a broken connection every acquire pings.
const suspectFor = 2 * time.Second

var _ memoryhook.Backend = (*backend)(nil)

// subtree returns the bounds of the rows strictly below directory rel
// (non-root): [rel + "/", rel + "0") in byte order.
func subtree(rel string) (lo, hi string) { return rel + "/", rel + "0" }

// checkTenant refuses the names the file store refuses, so both stores
// answer alike for a tenant no policy can have.
func checkTenant(sc memoryhook.Scope) error {
	if !memoryhook.ValidTenant(sc.Tenant) {
		return memoryhook.Unavailable("invalid tenant name", fmt.Errorf("tenant %q", sc.Tenant))
	}
	return nil
}

// contractErr reports the errors a Backend passes through as they are.
func contractErr(err error) bool {
	var me *memoryhook.Error
	var nd *memoryhook.NotDirError
	var ue *memoryhook.UnavailableError
	return errors.As(err, &me) || errors.As(err, &nd) || errors.As(err, &ue) ||
		errors.Is(err, memoryhook.ErrNotExist) || errors.Is(err, memoryhook.ErrExist) ||
		errors.Is(err, memoryhook.ErrNotFile) || errors.Is(err, memoryhook.ErrSymlink) ||
		errors.Is(err, memoryhook.ErrPrecondition) || errors.Is(err, memoryhook.ErrHeadVersion)
}

// ambiguousErr marks a failure of COMMIT: the write may or may not have
// happened, so it is never tried again.
type ambiguousErr struct{ error }

func (e ambiguousErr) Unwrap() error { return e.error }

// retryable reports a failure that cannot have changed anything and that a
// fresh connection may not see: the connection broke (network errors, the
// server terminating the backend) or a deadlock or serialization failure.
// Errors the server reports for the statement itself are not retried.
func retryable(err error) bool {
	var amb ambiguousErr
	if err == nil || contractErr(err) || errors.As(err, &amb) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "57P"), // admin/crash shutdown, cannot connect now
			pe.Code == "40001", pe.Code == "40P01":
			return true
		}
		return false
	}
	return true
}

// run runs fn, once more if it failed in a retryable way and time is left,
// and turns database failures into UnavailableErrors.
func (b *backend) run(ctx context.Context, sc memoryhook.Scope, fn func(ctx context.Context) error) error {
	if err := checkTenant(sc); err != nil {
		return err
	}
	err := fn(ctx)
	if retryable(err) && ctx.Err() == nil {
		b.brokeAt.Store(time.Now().UnixNano())
		err = fn(ctx)
	}
	return unavailable(ctx, err)
}

// unavailable wraps a database failure with a model-safe reason; results
// of the command layer's contract pass unchanged.
func unavailable(ctx context.Context, err error) error {
	if err == nil || contractErr(err) {
		return err
	}
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return memoryhook.Unavailable("request canceled", err)
	case ctx.Err() != nil, pgconn.Timeout(err), errors.Is(err, context.DeadlineExceeded):
		// The command's deadline, or the pool's connect timeout.
		return memoryhook.Unavailable("database timed out", err)
	}
	return memoryhook.Unavailable("database unavailable", err)
}

// write runs fn in one transaction holding the tenant's usage row locked,
// with the usage as it is; fn leaves in *u the usage after its change.
// An error from fn rolls everything back.
func (b *backend) write(ctx context.Context, sc memoryhook.Scope, fn func(ctx context.Context, tx pgx.Tx, u *memoryhook.Usage) error) error {
	return b.run(ctx, sc, func(ctx context.Context) error {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit; a broken connection is dropped by the pool
		others, grouped := int64(0), sc.GroupBytes > 0 && memoryhook.InGroup(sc.Tenant, sc.Group)
		if grouped {
			if others, err = lockGroup(ctx, tx, sc.Group, sc.Tenant); err != nil {
				return err
			}
		}
		u, err := lockUsage(ctx, tx, sc.Tenant)
		if err != nil {
			return err
		}
		before := u
		if grouped {
			u = u.WithGroup(others, sc.GroupBytes)
		}
		if err := fn(ctx, tx, &u); err != nil {
			return err
		}
		if u = u.Own(); u != before {
			if _, err := tx.Exec(ctx, `UPDATE ctxproxy_memory_usage SET bytes = $2, entries = $3 WHERE tenant = $1`,
				sc.Tenant, u.Bytes, u.Entries); err != nil {
				return err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return ambiguousErr{err}
		}
		return nil
	})
}

// lockGroup takes group's lock for the transaction (the group's grouped writes go one at a time,
// on every replica, so the sum each checks is the sum it leaves; taken before any usage row) and
// returns what its stores but except hold.
func lockGroup(ctx context.Context, tx pgx.Tx, group, except string) (int64, error) {
	// Two statements: a statement's snapshot is taken when it starts, before a lock it waits for
	// inside; the sum must see what the lock's previous holder committed.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('ctxproxy_memory_group:' || $1, 0))`, group); err != nil {
		return 0, err
	}
	var sum int64
	err := tx.QueryRow(ctx, `SELECT coalesce(sum(bytes), 0) FROM ctxproxy_memory_usage
		WHERE tenant <> $2 AND (tenant = $1 OR starts_with(tenant, $1 || '~'))`, group, except).Scan(&sum)
	return sum, err
}

// lockUsage locks the tenant's usage row, making it on the tenant's first
// write, and returns it.
func lockUsage(ctx context.Context, tx pgx.Tx, tenant string) (memoryhook.Usage, error) {
	const sel = `SELECT bytes, entries FROM ctxproxy_memory_usage WHERE tenant = $1 FOR UPDATE`
	var u memoryhook.Usage
	err := tx.QueryRow(ctx, sel, tenant).Scan(&u.Bytes, &u.Entries)
	if errors.Is(err, pgx.ErrNoRows) {
		// A racing first write inserts too; ON CONFLICT waits for it and the
		// SELECT then locks its row.
		if _, err := tx.Exec(ctx, `INSERT INTO ctxproxy_memory_usage (tenant) VALUES ($1) ON CONFLICT (tenant) DO NOTHING`, tenant); err != nil {
			return u, err
		}
		err = tx.QueryRow(ctx, sel, tenant).Scan(&u.Bytes, &u.Entries)
	}
	return u, err
}

// kinds returns is_dir of those of rels that exist.
func kinds(ctx context.Context, tx pgx.Tx, tenant string, rels []string) (map[string]bool, error) {
	rows, err := tx.Query(ctx, `SELECT path, is_dir FROM ctxproxy_memory_entries WHERE tenant = $1 AND path = ANY($2)`, tenant, rels)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	var path string
	var dir bool
	_, err = pgx.ForEachRow(rows, []any{&path, &dir}, func() error {
		out[path] = dir
		return nil
	})
	return out, err
}

// parents walks the ancestors of p (outermost first) in found: the number
// that exist as directories, or the NotDirError of the first that is a file.
func parents(p memoryhook.Path, found map[string]bool) (have int, err error) {
	for _, a := range p.Ancestors() {
		dir, ok := found[a.Rel()]
		switch {
		case !ok:
			return have, nil
		case !dir:
			return have, &memoryhook.NotDirError{Path: a}
		}
		have++
	}
	return have, nil
}

func rels(ps ...memoryhook.Path) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Rel())
	}
	return out
}

// mkdirs inserts the missing ancestors of p, from index have on.
func mkdirs(ctx context.Context, tx pgx.Tx, tenant string, p memoryhook.Path, have int) error {
	missing := rels(p.Ancestors()[have:]...)
	if len(missing) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO ctxproxy_memory_entries (tenant, path, is_dir) SELECT $1, unnest($2::text[]), true`, tenant, missing)
	return err
}

func (b *backend) Stat(ctx context.Context, sc memoryhook.Scope, p memoryhook.Path) (memoryhook.Entry, error) {
	var e memoryhook.Entry
	if p.IsRoot() {
		return memoryhook.Entry{Dir: true, Size: memoryhook.DirSize}, checkTenant(sc)
	}
	err := b.run(ctx, sc, func(ctx context.Context) error {
		err := b.pool.QueryRow(ctx, `SELECT is_dir, size FROM ctxproxy_memory_entries WHERE tenant = $1 AND path = $2`,
			sc.Tenant, p.Rel()).Scan(&e.Dir, &e.Size)
		if errors.Is(err, pgx.ErrNoRows) {
			return memoryhook.ErrNotExist
		}
		return err
	})
	if e.Dir {
		e.Size = memoryhook.DirSize
	}
	return e, err
}

func (b *backend) ReadFile(ctx context.Context, sc memoryhook.Scope, p memoryhook.Path) ([]byte, error) {
	if p.IsRoot() {
		return nil, memoryhook.ErrNotFile
	}
	var data []byte
	err := b.run(ctx, sc, func(ctx context.Context) error {
		var dir bool
		var size int64
		// A file over the read limit is not fetched at all.
		err := b.pool.QueryRow(ctx, `SELECT is_dir, size, CASE WHEN size <= $3 THEN data END
			FROM ctxproxy_memory_entries WHERE tenant = $1 AND path = $2`,
			sc.Tenant, p.Rel(), sc.Limits.MaxFileBytes).Scan(&dir, &size, &data)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return memoryhook.ErrNotExist
		case err != nil:
			return err
		case dir:
			return memoryhook.ErrNotFile
		}
		return sc.Limits.CheckRead(p, size)
	})
	if err != nil {
		return nil, err
	}
	return data, nil
}

func (b *backend) List(ctx context.Context, sc memoryhook.Scope, p memoryhook.Path, depth int) ([]memoryhook.Entry, error) {
	var out []memoryhook.Entry
	err := b.run(ctx, sc, func(ctx context.Context) error {
		out = out[:0]
		var rows pgx.Rows
		var err error
		// Components of a row = its slashes + 1; the listed directory's own
		// row comes in the same snapshot, to tell missing, file and directory.
		const cols = `SELECT path, is_dir, size FROM ctxproxy_memory_entries WHERE tenant = $1 AND `
		const levels = `length(path) - length(replace(path, '/', '')) + 1 <= `
		rel, n := p.Rel(), len(p.Elems())
		if p.IsRoot() {
			rows, err = b.pool.Query(ctx, cols+levels+`$2`, sc.Tenant, depth)
		} else {
			lo, hi := subtree(rel)
			rows, err = b.pool.Query(ctx, cols+`(path = $2 OR (path >= $3 AND path < $4 AND `+levels+`$5))`,
				sc.Tenant, rel, lo, hi, n+depth)
		}
		if err != nil {
			return err
		}
		self := p.IsRoot()
		var isFile bool
		var path string
		var e memoryhook.Entry
		_, err = pgx.ForEachRow(rows, []any{&path, &e.Dir, &e.Size}, func() error {
			if path == rel {
				self, isFile = true, !e.Dir
				return nil
			}
			e.Rel = path
			if !p.IsRoot() {
				e.Rel = path[len(rel)+1:]
			}
			if e.Dir {
				e.Size = memoryhook.DirSize
			}
			out = append(out, e)
			return nil
		})
		switch {
		case err != nil:
			return err
		case !self:
			return memoryhook.ErrNotExist
		case isFile:
			return memoryhook.ErrNotFile
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (b *backend) Create(ctx context.Context, sc memoryhook.Scope, p memoryhook.Path, data []byte) error {
	return b.write(ctx, sc, func(ctx context.Context, tx pgx.Tx, u *memoryhook.Usage) error {
		before := *u
		found, err := kinds(ctx, tx, sc.Tenant, rels(append(p.Ancestors(), p)...))
		if err != nil {
			return err
		}
		have, err := parents(p, found)
		if err != nil {
			return err
		}
		if _, ok := found[p.Rel()]; ok {
			return memoryhook.ErrExist
		}
		u.Entries += len(p.Ancestors()) - have + 1 // new directories and the file
		u.Bytes += int64(len(data))
		if err := sc.Limits.CheckChange(before, *u); err != nil {
			return err
		}
		if err := mkdirs(ctx, tx, sc.Tenant, p, have); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO ctxproxy_memory_entries (tenant, path, is_dir, size, data) VALUES ($1, $2, false, $3, $4)`,
			sc.Tenant, p.Rel(), len(data), data)
		if err != nil {
			return err
		}
		return recCreate(ctx, tx, sc, p.Rel(), data)
	})
}

func (b *backend) Update(ctx context.Context, sc memoryhook.Scope, p memoryhook.Path, edit func(old []byte) ([]byte, error)) error {
	if p.IsRoot() {
		return memoryhook.ErrNotFile
	}
	return b.write(ctx, sc, func(ctx context.Context, tx pgx.Tx, u *memoryhook.Usage) error {
		before := *u
		var dir bool
		var size int64
		var old []byte
		err := tx.QueryRow(ctx, `SELECT is_dir, size, CASE WHEN size <= $3 THEN data END
			FROM ctxproxy_memory_entries WHERE tenant = $1 AND path = $2 FOR UPDATE`,
			sc.Tenant, p.Rel(), sc.Limits.MaxFileBytes).Scan(&dir, &size, &old)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return memoryhook.ErrNotExist
		case err != nil:
			return err
		case dir:
			return memoryhook.ErrNotFile
		}
		if err := sc.Limits.CheckRead(p, size); err != nil {
			return err
		}
		data, err := edit(old)
		if err != nil {
			return err
		}
		u.Bytes += int64(len(data)) - size
		if err := sc.Limits.CheckChange(before, *u); err != nil {
			return err
		}
		if err := recUpdate(ctx, tx, sc, p.Rel(), old, data); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE ctxproxy_memory_entries SET data = $3, size = $4, updated_at = now() WHERE tenant = $1 AND path = $2`,
			sc.Tenant, p.Rel(), data, len(data))
		return err
	})
}

func (b *backend) Delete(ctx context.Context, sc memoryhook.Scope, p memoryhook.Path) error {
	if p.IsRoot() { // the command layer refuses it; never empty a tenant by accident
		return memoryhook.Unavailable("invalid delete", errors.New("delete of the root"))
	}
	return b.write(ctx, sc, func(ctx context.Context, tx pgx.Tx, u *memoryhook.Usage) error {
		if err := recDelete(ctx, tx, sc, p.Rel()); err != nil {
			return err
		}
		lo, hi := subtree(p.Rel())
		var n, bytes int64
		err := tx.QueryRow(ctx, `WITH gone AS (
				DELETE FROM ctxproxy_memory_entries
				WHERE tenant = $1 AND (path = $2 OR (path >= $3 AND path < $4))
				RETURNING is_dir, size)
			SELECT count(*), coalesce(sum(size) FILTER (WHERE NOT is_dir), 0) FROM gone`,
			sc.Tenant, p.Rel(), lo, hi).Scan(&n, &bytes)
		switch {
		case err != nil:
			return err
		case n == 0:
			return memoryhook.ErrNotExist
		}
		u.Entries -= int(n)
		u.Bytes -= bytes
		return nil
	})
}

func (b *backend) Rename(ctx context.Context, sc memoryhook.Scope, from, to memoryhook.Path) error {
	if from.IsRoot() || to.Within(from) && !to.IsRoot() && len(to.Elems()) > len(from.Elems()) {
		return memoryhook.Unavailable("invalid rename", fmt.Errorf("rename %s to %s", from, to)) // the command layer refuses these
	}
	return b.write(ctx, sc, func(ctx context.Context, tx pgx.Tx, u *memoryhook.Usage) error {
		if to.IsRoot() {
			return memoryhook.ErrExist
		}
		before := *u
		found, err := kinds(ctx, tx, sc.Tenant, rels(append(to.Ancestors(), to, from)...))
		if err != nil {
			return err
		}
		if _, ok := found[to.Rel()]; ok {
			return memoryhook.ErrExist
		}
		fromDir, ok := found[from.Rel()]
		if !ok {
			return memoryhook.ErrNotExist
		}
		have, err := parents(to, found)
		if err != nil {
			return err
		}
		if fromDir && memoryhook.Grows(from, to) {
			ext, err := extent(ctx, tx, sc.Tenant, from)
			if err != nil {
				return err
			}
			if err := memoryhook.CheckMove(from, to, ext); err != nil {
				return err
			}
		}
		u.Entries += len(to.Ancestors()) - have
		if err := sc.Limits.CheckChange(before, *u); err != nil {
			return err
		}
		if err := mkdirs(ctx, tx, sc.Tenant, to, have); err != nil {
			return err
		}
		if err := recRename(ctx, tx, sc, from.Rel(), to.Rel()); err != nil {
			return err
		}
		// from and everything below it move in one statement; nothing can
		// exist below to (to does not), so no key collides.
		lo, hi := subtree(from.Rel())
		_, err = tx.Exec(ctx, `UPDATE ctxproxy_memory_entries SET path = $5 || substr(path, char_length($2) + 1), updated_at = now()
			WHERE tenant = $1 AND (path = $2 OR (path >= $3 AND path < $4))`,
			sc.Tenant, from.Rel(), lo, hi, to.Rel())
		return err
	})
}

// extent measures how far directory dir's rows reach below it, in one
// range scan of the primary key (linear in the rows below dir).
func extent(ctx context.Context, tx pgx.Tx, tenant string, dir memoryhook.Path) (memoryhook.Extent, error) {
	lo, hi := subtree(dir.Rel())
	var slashes, bytes *int
	err := tx.QueryRow(ctx, `SELECT max(length(path) - length(replace(path, '/', ''))), max(octet_length(path))
		FROM ctxproxy_memory_entries WHERE tenant = $1 AND path >= $2 AND path < $3`,
		tenant, lo, hi).Scan(&slashes, &bytes)
	if err != nil || slashes == nil { // nothing below dir
		return memoryhook.Extent{}, err
	}
	return memoryhook.Extent{
		Depth: *slashes - strings.Count(dir.Rel(), "/"),
		Bytes: *bytes - len(dir.Rel()),
	}, nil
}

// Ready pings, once more on a fresh connection if a pooled one was dead.
func (b *backend) Ready(ctx context.Context) error {
	err := b.pool.Ping(ctx)
	if retryable(err) && ctx.Err() == nil {
		b.brokeAt.Store(time.Now().UnixNano())
		err = b.pool.Ping(ctx)
	}
	return unavailable(ctx, err)
}
