package tokens

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The PostgreSQL ledger's rollups are two parts, both written in transactions with the lines
// they sum, so a report (one snapshot) never sees a line without its sums nor sums without
// their line, whenever a process dies:
//
//   - a batch's sums, one row of ctxproxy_ledger_rollup_pending (its lines summed per hour,
//     tenant, model, key id and user, encoded by appendPending), inserted by the statement
//     that inserts its lines;
//   - the rollup tables (pgRollupTables), into which a batch now and then folds the pending
//     rows: it deletes them and adds their sums, with its own, in its transaction.
//
// Adding a batch's sums to six rollup rows a line (three dimensions, hours and days) in its
// own transaction doubled the server's CPU per line; one more row a batch costs a few
// percent, and a fold adds each rollup row once for thousands of lines. A report reads the
// rollup tables and adds the pending rows (pgRollupView).

// Folds: a ledger folds when its batches since its last fold hold pgFoldLines lines, or
// pgFoldAfter has passed (so pending rows stay few when calls are few; the first batch of a
// process folds what a process before it left).
const (
	pgFoldLines = 4096
	pgFoldAfter = 10 * time.Second
)

// pendingSums are the sums of a batch's lines per hour (lineKey).
type pendingSums map[lineKey]*Totals

// add adds c's sums (lineCounts: shadow lines and count_tokens without savings add none).
func (p pendingSums) add(c *Call) {
	if !lineCounts(c) {
		return
	}
	k := newLineKey(c, time.Hour)
	r := p[k]
	if r == nil {
		r = new(Totals)
		p[k] = r
	}
	r.addLine(c)
}

// pendingFormat is the first byte of an encoded pendingSums.
const pendingFormat = 1

// appendPending appends p encoded: pendingFormat, the number of sums (rollupSums' order:
// a new sum goes last), the number of rows, and each row: its hour in hours since the Unix
// epoch (varint), tenant, model, key id and user (each a string: uvarint 0 then its length
// and bytes, or the uvarint n of the nth string met before), a bit mask of its sums that
// are not 0 and those sums (varints).
func appendPending(b []byte, p pendingSums) []byte {
	b = append(b, pendingFormat)
	b = binary.AppendUvarint(b, uint64(len(rollupSums)))
	b = binary.AppendUvarint(b, uint64(len(p)))
	seen := map[string]uint64{}
	str := func(s string) {
		if n, ok := seen[s]; ok {
			b = binary.AppendUvarint(b, n)
			return
		}
		seen[s] = uint64(len(seen) + 1)
		b = binary.AppendUvarint(b, 0)
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for k, t := range p {
		b = binary.AppendVarint(b, k.bucket/3600)
		str(k.tenant)
		str(k.model)
		str(k.key)
		str(k.user)
		var mask uint64
		for i, f := range rollupSums {
			if *f.of(t) != 0 {
				mask |= 1 << i
			}
		}
		b = binary.AppendUvarint(b, mask)
		for i, f := range rollupSums {
			if mask&(1<<i) != 0 {
				b = binary.AppendVarint(b, *f.of(t))
			}
		}
	}
	return b
}

var errPending = errors.New("corrupt pending rollup row")

// readPending adds the rows of an appendPending encoding to p.
func readPending(b []byte, p pendingSums) error {
	uv := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	if len(b) == 0 || b[0] != pendingFormat {
		return fmt.Errorf("%w: unknown format", errPending)
	}
	b = b[1:]
	nsums, rows := uv(), uv()
	if b == nil || nsums > uint64(len(rollupSums)) {
		return fmt.Errorf("%w: %d sums, this build keeps %d", errPending, nsums, len(rollupSums))
	}
	var strs []string
	str := func() string {
		n := uv()
		if n > 0 {
			if n > uint64(len(strs)) {
				b = nil
				return ""
			}
			return strs[n-1]
		}
		l := uv()
		if l > uint64(len(b)) {
			b = nil
			return ""
		}
		s := string(b[:l])
		b = b[l:]
		strs = append(strs, s)
		return s
	}
	for range rows {
		h, n := binary.Varint(b)
		if n <= 0 {
			return errPending
		}
		b = b[n:]
		k := lineKey{bucket: h * 3600, tenant: str(), model: str(), key: str(), user: str()}
		mask := uv()
		if b == nil || mask>>nsums != 0 {
			return errPending
		}
		r := p[k]
		if r == nil {
			r = new(Totals)
			p[k] = r
		}
		for i, f := range rollupSums[:nsums] {
			if mask&(1<<i) == 0 {
				continue
			}
			v, n := binary.Varint(b)
			if n <= 0 {
				return errPending
			}
			b = b[n:]
			*f.of(r) += v
		}
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d bytes after its rows", errPending, len(b))
	}
	return nil
}

// pgPendingInsert is the statement prefix that inserts a batch's pending row ($n) with its
// lines (pgColumns …).
func pgPendingInsert(n int) string {
	return fmt.Sprintf("WITH pending AS (INSERT INTO ctxproxy_ledger_rollup_pending (batch) VALUES ($%d)) ", n)
}

// pgFoldTake deletes and returns up to $1 pending rows, skipping those another fold holds and
// those of more sums than $2 (a newer build's, whose sums this one cannot write: left for it;
// the byte after pendingFormat is their number, one byte up to 127).
const pgFoldTake = `DELETE FROM ctxproxy_ledger_rollup_pending WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM ctxproxy_ledger_rollup_pending WHERE get_byte(batch, 1) <= $2
	LIMIT $1 FOR UPDATE SKIP LOCKED)) RETURNING batch`

// foldTake bounds the pending rows one fold takes: twice the batches this process can have
// written since its last fold (each holds a line at least), so its own never pile up and the
// rows a dead process left go within a few folds.
func (l *PGLedger) foldTake() int {
	return min(l.fold.everyLines, math.MaxInt/2) * 2
}

// foldDue says whether a batch of n lines folds, and if so takes the fold (one at a time in a
// process) until folded.
func (l *PGLedger) foldDue(n int) bool {
	l.fold.Lock()
	defer l.fold.Unlock()
	if l.fold.running || l.fold.lines+n < l.fold.everyLines && time.Since(l.fold.last) < l.fold.after {
		l.fold.lines += n
		return false
	}
	l.fold.running = true
	return true
}

// folded ends a fold taken by foldDue. A failed one is tried again at the next interval, not
// by every batch meanwhile (each would pay for the failure and then write its lines pending).
func (l *PGLedger) folded() {
	l.fold.Lock()
	defer l.fold.Unlock()
	l.fold.running = false
	l.fold.lines, l.fold.last = 0, time.Now()
}

// appendFolding writes cs and folds the pending rows, with cs's sums, into the rollup
// tables, in one transaction.
func (l *PGLedger) appendFolding(ctx context.Context, lines *pgx.Batch, sums pendingSums) (err error) {
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(ctx) // the error is err; the connection is closed if this fails
		}
	}()
	rows, err := tx.Query(ctx, pgFoldTake, l.foldTake(), len(rollupSums))
	if err != nil {
		return err
	}
	var batch []byte
	_, err = pgx.ForEachRow(rows, []any{&batch}, func() error { return readPending(batch, sums) })
	if err != nil {
		return fmt.Errorf("fold pending rollups: %w", err)
	}
	if len(sums) > 0 {
		for _, t := range pgRollupTables {
			lines.Queue(pgRollupUpserts[t.table], pgRollupArgs(sums, t.width)...)
		}
	}
	if err := tx.SendBatch(ctx, lines).Close(); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return commitError{err}
	}
	return nil
}

// commitError is a failed COMMIT: whether the transaction took effect is unknown.
type commitError struct{ err error }

func (e commitError) Error() string { return "commit: " + e.err.Error() }
func (e commitError) Unwrap() error { return e.err }

// pgRollupUpserts are the statements pgRollupUpsert makes, by table.
var pgRollupUpserts = func() map[string]string {
	m := map[string]string{}
	for _, t := range pgRollupTables {
		m[t.table] = pgRollupUpsert(t.table)
	}
	return m
}()

// pgRollupUpsert adds rows of sums (pgRollupArgs) to a rollup table.
func pgRollupUpsert(table string) string {
	var cols, arrays, set strings.Builder
	for i, f := range rollupSums {
		fmt.Fprintf(&cols, ", %s", f.col)
		fmt.Fprintf(&arrays, ", $%d::bigint[]", i+5)
		if i > 0 {
			set.WriteString(", ")
		}
		fmt.Fprintf(&set, "%s = r.%[1]s + excluded.%[1]s", f.col)
	}
	return `INSERT INTO ` + table + ` AS r (dim, tenant, hour, value` + cols.String() + `)
		SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[]` + arrays.String() + `)
		ON CONFLICT (dim, tenant, hour, value) DO UPDATE SET ` + set.String()
}

// pgRollupArgs are the rollup rows of p's buckets of width as the arrays of pgRollupUpsert,
// in key order so that concurrent folds lock the rows they share in the same order.
func pgRollupArgs(p pendingSums, width time.Duration) []any {
	m := make(map[rollupKey]*Totals, len(p))
	for k, t := range p {
		b := rollupBucket(time.Unix(k.bucket, 0), width)
		for d, g := range rollupDims {
			rk := rollupKey{bucket: b, dim: uint8(d), tenant: k.tenant, value: k.dimValue(g)}
			r := m[rk]
			if r == nil {
				r = new(Totals)
				m[rk] = r
			}
			r.addSums(t)
		}
	}
	keys := make([]rollupKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b rollupKey) int {
		return cmp.Or(strings.Compare(rollupDims[a.dim], rollupDims[b.dim]), strings.Compare(a.tenant, b.tenant), cmp.Compare(a.bucket, b.bucket), strings.Compare(a.value, b.value))
	})
	dims, tenants, values := make([]string, len(keys)), make([]string, len(keys)), make([]string, len(keys))
	hours := make([]time.Time, len(keys))
	sums := make([][]int64, len(rollupSums))
	for j := range sums {
		sums[j] = make([]int64, len(keys))
	}
	for i, k := range keys {
		dims[i], tenants[i], hours[i], values[i] = rollupDims[k.dim], k.tenant, k.bucketTime(), k.value
		t := m[k]
		for j, f := range rollupSums {
			sums[j][i] = *f.of(t)
		}
	}
	args := []any{dims, tenants, hours, values}
	for _, s := range sums {
		args = append(args, s)
	}
	return args
}

// addPending adds to b the pending rows of tenant ("" for all) in the whole buckets of width
// in [from, to) (zero: open), as addRollup adds the rollup tables' rows. The pending rows
// are read once a view.
func (v *pgRollupView) addPending(ctx context.Context, b *reportBuilder, width time.Duration, tenant string, from, to time.Time) error {
	if v.pending == nil {
		v.pending = pendingSums{}
		rows, err := v.tx.Query(ctx, `SELECT batch FROM ctxproxy_ledger_rollup_pending`)
		if err != nil {
			return err
		}
		var batch []byte
		if _, err := pgx.ForEachRow(rows, []any{&batch}, func() error { return readPending(batch, v.pending) }); err != nil {
			return err
		}
	}
	for k, t := range v.pending {
		if tenant != "" && k.tenant != tenant {
			continue
		}
		bucket := time.Unix(rollupBucket(time.Unix(k.bucket, 0), width), 0).UTC()
		if !from.IsZero() && bucket.Before(from) || !to.IsZero() && !bucket.Before(to) {
			continue
		}
		c := Call{Time: bucket, Tenant: k.tenant, Model: k.model, KeyID: k.key, User: k.user}
		b.add(k.tenant, groupOf(&c, b.groupBy), t)
	}
	return nil
}
