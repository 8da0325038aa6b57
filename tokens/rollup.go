package tokens

import (
	"context"
	"fmt"
	"time"
)

// Rollups: a report over a month of calls reads the sums each store keeps per hour (the file
// ledger: per day) and tenant and model, key id or user, not the month's lines. Both stores
// keep them as they append, from the same lineTotals the line-by-line report uses: PostgreSQL
// in the transactions of its batches (ctxproxy_ledger_rollup and _day, with the sums of the
// batches not folded into them yet: ledger_pg_rollup.go), the file ledger beside its file
// (fileRollup). A report's whole buckets come from the rollup, the parts of a bucket at
// either end of its period from the lines themselves, both from one view of the store.

// rollupSums are the sums a rollup keeps: each a field of Totals and, by the same name, a
// column of ctxproxy_ledger_rollup and a field of the file ledger's rollup. Adding a summed
// field to Totals is a line here (last: pending rollup rows are encoded in this order) and a
// PGSchema version that adds its column, with its backfill from ctxproxy_ledger; the pending
// rows of older builds lack the new sum, so the backfill sums it over every line, pending or
// not, into existing rollup rows, and inserts the rows still missing with that sum alone (the
// rest of theirs is pending). The file ledger rebuilds a rollup whose sums differ.
var rollupSums = [...]struct {
	col string
	of  func(*Totals) *int64
}{
	{"calls", func(t *Totals) *int64 { return &t.Calls }},
	{"input_tokens", func(t *Totals) *int64 { return &t.InputTokens }},
	{"output_tokens", func(t *Totals) *int64 { return &t.OutputTokens }},
	{"cache_creation_input_tokens", func(t *Totals) *int64 { return &t.CacheCreationInputTokens }},
	{"cache_read_input_tokens", func(t *Totals) *int64 { return &t.CacheReadInputTokens }},
	{"cleared_input_tokens", func(t *Totals) *int64 { return &t.ClearedInputTokens }},
	{"cleared_tool_uses", func(t *Totals) *int64 { return &t.ClearedToolUses }},
	{"cleared_thinking_turns", func(t *Totals) *int64 { return &t.ClearedThinkingTurns }},
	{"cost_nano_usd", func(t *Totals) *int64 { return (*int64)(&t.CostUSD) }},
	{"savings_nano_usd", func(t *Totals) *int64 { return (*int64)(&t.SavingsUSD) }},
	{"price_unknown_calls", func(t *Totals) *int64 { return &t.PriceUnknownCalls }},
	{"web_search_requests", func(t *Totals) *int64 { return &t.WebSearchRequests }},
	{"compactions", func(t *Totals) *int64 { return &t.Compactions }},
	{"compaction_cost_nano_usd", func(t *Totals) *int64 { return (*int64)(&t.CompactionCostUSD) }},
	{"compaction_savings_nano_usd", func(t *Totals) *int64 { return (*int64)(&t.CompactionSavingsUSD) }},
	{"savings_gross_nano_usd", func(t *Totals) *int64 { return (*int64)(&t.SavingsGrossUSD) }},
	{"cache_penalty_nano_usd", func(t *Totals) *int64 { return (*int64)(&t.CachePenaltyUSD) }},
	{"cache_missed_input_tokens", func(t *Totals) *int64 { return &t.CacheMissedInputTokens }},
	{"cache_effect_unknown_calls", func(t *Totals) *int64 { return &t.CacheEffectUnknownCalls }},
}

// rollupDims are the groups a rollup keeps apart within each bucket and tenant. Every line is
// in exactly one row of each, so a tenant's (or a day's) sums are those of its model rows.
var rollupDims = [...]string{GroupByModel, GroupByKey, GroupByUser}

// rollupKey is one rollup row: a bucket (its start, UTC, in Unix seconds), a tenant, a
// dimension (its index in rollupDims) and its value ("" for a line without a key id or
// user). Integers, not a time.Time and a dimension's name, since each line looks up a row
// of every dimension: on the file ledger's append path, hashing the keys was most of the
// rollup's cost.
type rollupKey struct {
	bucket int64
	dim    uint8
	tenant string
	value  string
}

// bucketTime is the start of the key's bucket.
func (k rollupKey) bucketTime() time.Time { return time.Unix(k.bucket, 0).UTC() }

// rollupBucket is the start of t's bucket of width (a whole number of seconds that divides a
// day), in Unix seconds: t.UTC().Truncate(width), as the Unix epoch starts a day.
func rollupBucket(t time.Time, width time.Duration) int64 {
	s, w := t.Unix(), int64(width/time.Second)
	return s - ((s%w)+w)%w
}

// lineKey is what a line's rollup rows are known from: its bucket (the start, in Unix
// seconds), tenant, model, key id and user.
type lineKey struct {
	bucket                   int64
	tenant, model, key, user string
}

// newLineKey is c's lineKey in buckets of width.
func newLineKey(c *Call, width time.Duration) lineKey {
	return lineKey{bucket: rollupBucket(c.Time, width), tenant: c.Tenant, model: c.Model, key: c.KeyID, user: c.User}
}

// dimValue is the key's value in dimension g (a rollupDims), as dimValue is a line's.
func (k lineKey) dimValue(g string) string {
	return dimValue(&Call{Model: k.model, KeyID: k.key, User: k.user}, g)
}

// rollupRow is k's row of dimension d (an index of rollupDims).
func (k lineKey) rollupRow(d int) rollupKey {
	return rollupKey{bucket: k.bucket, dim: uint8(d), tenant: k.tenant, value: k.dimValue(rollupDims[d])}
}

// dimIndex is g's index in rollupDims, or -1.
func dimIndex(g string) int {
	for i, d := range rollupDims {
		if d == g {
			return i
		}
	}
	return -1
}

// rollupLedger is a ledger that keeps rollups.
type rollupLedger interface {
	Ledger
	// rollupView opens one view of the store (a snapshot, or the file as it is now) for a
	// report, with the widths of the buckets it keeps, widest first.
	rollupView(ctx context.Context) (rollupView, []time.Duration, error)
}

// rollupView reads one view of a store for a report; close ends it.
type rollupView interface {
	// addRollup adds to b the sums of tenant's lines ("" for all) in the whole buckets of
	// width in [from, to) (zero: open), grouped as b is. A report calls it, for each width
	// widest first, before addLines.
	addRollup(ctx context.Context, b *reportBuilder, width time.Duration, tenant string, from, to time.Time) error
	// addLines adds to b the lines f selects, one by one.
	addLines(ctx context.Context, b *reportBuilder, f Filter) error
	close(ctx context.Context) error
}

// reportFromRollups builds f's report from l's rollups for the whole buckets in f's period,
// the widest that fit, and from its lines for the minutes at either end.
func reportFromRollups(ctx context.Context, l rollupLedger, f Filter, groupBy string) (rep Report, err error) {
	v, widths, err := l.rollupView(ctx)
	if err != nil {
		return Report{}, err
	}
	defer func() {
		if cerr := v.close(ctx); cerr != nil && err == nil {
			err = cerr
		}
	}()
	b := newReportBuilder(groupBy)
	if err := addPeriod(ctx, v, b, widths, f); err != nil {
		return Report{}, err
	}
	return b.report(), nil
}

// addPeriod adds f's period to b: its whole buckets of widths[0] from the rollup, the parts
// at either end with the next width, and what no width covers from the lines.
func addPeriod(ctx context.Context, v rollupView, b *reportBuilder, widths []time.Duration, f Filter) error {
	if len(widths) == 0 {
		return v.addLines(ctx, b, f)
	}
	width := widths[0]
	from, to := f.Since, f.Until // the whole buckets: [from, to)
	if !from.IsZero() {
		if from = from.UTC().Truncate(width); from.Before(f.Since) {
			from = from.Add(width)
		}
	}
	if !to.IsZero() {
		to = to.UTC().Truncate(width)
	}
	if !from.IsZero() && !to.IsZero() && !from.Before(to) { // no whole bucket
		return addPeriod(ctx, v, b, widths[1:], f)
	}
	if err := v.addRollup(ctx, b, width, f.Tenant, from, to); err != nil {
		return fmt.Errorf("read rollup: %w", err)
	}
	if !from.IsZero() && f.Since.Before(from) {
		if err := addPeriod(ctx, v, b, widths[1:], Filter{Tenant: f.Tenant, Since: f.Since, Until: from}); err != nil {
			return err
		}
	}
	if !to.IsZero() && to.Before(f.Until) {
		return addPeriod(ctx, v, b, widths[1:], Filter{Tenant: f.Tenant, Since: to, Until: f.Until})
	}
	return nil
}
