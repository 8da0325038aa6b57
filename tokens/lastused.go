package tokens

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/tidwall/gjson"
)

// ModelUse is the latest UTC hour in which a tenant's calls named a model.
type ModelUse struct {
	Tenant, Model string
	Hour          time.Time // the hour's start
}

// ModelUseLedger is a ledger that tells when each tenant last used each model, so a restarted
// proxy remembers which retiring models its tenants use (capabilities.Cache.SeedUsage).
type ModelUseLedger interface {
	// LastUsed is, per tenant and model with a call in since's hour or after, the hour of its
	// latest call: the calls a report counts (never the policy lab's lines, endpoint "shadow", nor a
	// count_tokens call), the uses capabilities.Cache.Used records while serving. It only reads: no
	// table, file or rollup is written. Its errors name no host path.
	LastUsed(ctx context.Context, since time.Time) ([]ModelUse, error)
}

var (
	_ ModelUseLedger = (*FileLedger)(nil)
	_ ModelUseLedger = (*PGLedger)(nil)
)

// lastUse collects the latest hour per tenant and model.
type lastUse map[[2]string]int64

func (u lastUse) add(tenant, model string, hour int64) {
	k := [2]string{tenant, model}
	if h, ok := u[k]; !ok || h < hour {
		if !ok { // the strings may point into a reused buffer
			k = [2]string{strings.Clone(tenant), strings.Clone(model)}
		}
		u[k] = hour
	}
}

func (u lastUse) list() []ModelUse {
	out := make([]ModelUse, 0, len(u))
	for k, h := range u {
		out = append(out, ModelUse{Tenant: k[0], Model: k[1], Hour: time.Unix(h, 0).UTC()})
	}
	return out
}

// LastUsed reads the lines as they are (not the rollup, whose day buckets are too coarse for
// a seven-day window, and whose catch-up writes its file): lines before since are passed over
// by their time, unparsed.
func (l *FileLedger) LastUsed(ctx context.Context, since time.Time) ([]ModelUse, error) {
	r, err := os.Open(l.path)
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", pathless(err))
	}
	defer r.Close()
	st, err := r.Stat()
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", pathless(err))
	}
	size := st.Size()
	if !st.Mode().IsRegular() {
		size = 0 // e.g. /dev/full: nothing to read back
	}
	u := lastUse{}
	from := time.Unix(rollupBucket(since, time.Hour), 0) // as the rollups have it: since's hour
	_, err = scanLines(ctx, r, 0, size, func(line []byte) {
		t, ok := lineTime(line)
		if ok && t.Before(from) {
			return
		}
		f := gjson.GetManyBytes(line, "time", "tenant", "model", "endpoint")
		if !ok {
			if t, ok = parseTime(f[0].String()); !ok || t.Before(from) {
				return
			}
		}
		if f[1].Type != gjson.String || f[2].Type != gjson.String || f[3].Exists() {
			return // not a call's line, or a count_tokens or policy-lab line
		}
		u.add(f[1].String(), f[2].String(), rollupBucket(t, time.Hour))
	})
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", pathless(err))
	}
	return u.list(), nil
}

func parseTime(s string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

// pathless is err without the host path an *fs.PathError carries.
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

// LastUsed reads the hourly rollup and the batches' sums not folded into it yet, in one
// read-only snapshot (a fold between two reads would hide its rows from both).
func (l *PGLedger) LastUsed(ctx context.Context, since time.Time) ([]ModelUse, error) {
	tx, err := l.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	from := time.Unix(rollupBucket(since, time.Hour), 0).UTC()
	// calls > 0: a count_tokens line adds a measured compaction's savings, never a call.
	rows, err := tx.Query(ctx, `SELECT tenant, value, max(hour) FROM ctxproxy_ledger_rollup
		WHERE dim = $1 AND hour >= $2 AND calls > 0 GROUP BY 1, 2`, GroupByModel, from)
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	u := lastUse{}
	var tenant, model string
	var hour time.Time
	if _, err := pgx.ForEachRow(rows, []any{&tenant, &model, &hour}, func() error {
		u.add(tenant, model, hour.Unix())
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	// A newer build's rows (more sums than this one reads; see pgFoldTake) are left out: the
	// rollup has them once that build folds them.
	rows, err = tx.Query(ctx, `SELECT batch FROM ctxproxy_ledger_rollup_pending WHERE get_byte(batch, 1) <= $1`, len(rollupSums))
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	pending := pendingSums{}
	var batch []byte
	if _, err := pgx.ForEachRow(rows, []any{&batch}, func() error { return readPending(batch, pending) }); err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	for k, t := range pending {
		if k.bucket >= from.Unix() && t.Calls > 0 {
			u.add(k.tenant, k.model, k.bucket)
		}
	}
	return u.list(), nil
}
