package tokens

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ctxproxy/ctxproxy/internal/pgmigrate"
)

// PGLedger stores calls in the table ctxproxy_ledger. Its schema (PGSchema) is versioned in
// ctxproxy_ledger_migrations and brought up to date by OpenPGLedger under an advisory lock (internal/pgmigrate), so
// several instances may start at once. Times are stored to the microsecond.
type PGLedger struct {
	pool *pgxpool.Pool
	fold struct { // when this process's batches fold the pending rollup rows (foldDue)
		sync.Mutex
		everyLines int
		after      time.Duration
		lines      int       // in the batches since the last fold
		last       time.Time // of the last fold; zero: the first batch folds
		running    bool
	}
}

// newPGLedger is a ledger on pool that folds as pgFoldLines and pgFoldAfter say.
func newPGLedger(pool *pgxpool.Pool) *PGLedger {
	l := &PGLedger{pool: pool}
	l.fold.everyLines, l.fold.after = pgFoldLines, pgFoldAfter
	return l
}

// PGSchemas are the PostgreSQL schemas of the ledger's database, applied by
// OpenPGLedger and by `ctxproxy migrate --ledger` (see internal/pgmigrate for
// how to add one).
var PGSchemas = []pgmigrate.Schema{PGSchema}

// PGSchema is the ledger's table. Never edit a version that shipped; append a
// new one.
var PGSchema = pgmigrate.Schema{Name: "ledger", Versions: [][]string{
	{
		`CREATE TABLE ctxproxy_ledger (
			id                             bigserial   PRIMARY KEY,
			time                           timestamptz NOT NULL,
			tenant                         text        NOT NULL,
			model                          text        NOT NULL,
			request_id                     text        NOT NULL DEFAULT '',
			message_id                     text        NOT NULL DEFAULT '',
			stream                         boolean     NOT NULL DEFAULT false,
			status                         integer     NOT NULL DEFAULT 0,
			input_tokens                   bigint      NOT NULL DEFAULT 0,
			output_tokens                  bigint      NOT NULL DEFAULT 0,
			cache_creation_input_tokens    bigint      NOT NULL DEFAULT 0,
			cache_creation_1h_input_tokens bigint      NOT NULL DEFAULT 0,
			cache_read_input_tokens        bigint      NOT NULL DEFAULT 0,
			applied_edits                  json        NOT NULL DEFAULT '[]', -- json, not jsonb: unknown edits kept byte for byte
			cleared_input_tokens           bigint      NOT NULL DEFAULT 0,
			cost_nano_usd                  bigint      NOT NULL DEFAULT 0,
			savings_nano_usd               bigint      NOT NULL DEFAULT 0,
			price_unknown                  boolean     NOT NULL DEFAULT false
		)`,
		`CREATE INDEX ctxproxy_ledger_tenant_time ON ctxproxy_ledger (tenant, time)`,
		`CREATE INDEX ctxproxy_ledger_time ON ctxproxy_ledger (time)`,
	},
	{
		// Attribution: the key's id (first 8 hex of its sha256) and, for a ctxproxy key, its user.
		`ALTER TABLE ctxproxy_ledger ADD COLUMN key_id text NOT NULL DEFAULT '', ADD COLUMN user_name text NOT NULL DEFAULT ''`,
	},
	{ // 3: the cost breakdown (iterations, TTL cache writes, web search, batch tier, compaction)
		`ALTER TABLE ctxproxy_ledger
			ADD COLUMN web_search_requests      bigint NOT NULL DEFAULT 0,
			ADD COLUMN service_tier             text   NOT NULL DEFAULT '',
			ADD COLUMN iterations               json,
			ADD COLUMN cost_breakdown           json,
			ADD COLUMN compactions              bigint NOT NULL DEFAULT 0,
			ADD COLUMN compaction_cost_nano_usd bigint NOT NULL DEFAULT 0`,
	},
	// 4: count_tokens calls (NULL on Messages calls; original NULL when the reply had none).
	{
		`ALTER TABLE ctxproxy_ledger ADD COLUMN count_input_tokens bigint, ADD COLUMN count_original_input_tokens bigint`,
	},
	// 5: the measure of a compaction on its count_tokens call (compact.measure_savings).
	{
		`ALTER TABLE ctxproxy_ledger ADD COLUMN compacted_input_tokens bigint NOT NULL DEFAULT 0,
			ADD COLUMN compaction_savings_nano_usd bigint NOT NULL DEFAULT 0`,
	},
	// 6: a stream the client cut before its message_delta, charged an estimate.
	{
		`ALTER TABLE ctxproxy_ledger ADD COLUMN cut boolean NOT NULL DEFAULT false`,
	},
	// 7: a Message Batches result: its batch and custom_id.
	{
		`ALTER TABLE ctxproxy_ledger ADD COLUMN batch_id text NOT NULL DEFAULT '', ADD COLUMN custom_id text NOT NULL DEFAULT ''`,
	},
	// 8: savings net of the prompt cache: gross, penalty, the missed cache tokens,
	// cache_effect and the miss's cause. Older rows read as recorded: gross NULL (= savings),
	// no penalty, cache_effect none.
	{
		`ALTER TABLE ctxproxy_ledger ADD COLUMN savings_gross_nano_usd bigint,
			ADD COLUMN cache_penalty_nano_usd bigint NOT NULL DEFAULT 0,
			ADD COLUMN cache_missed_input_tokens bigint NOT NULL DEFAULT 0,
			ADD COLUMN cache_effect text NOT NULL DEFAULT 'none',
			ADD COLUMN cache_miss_cause text NOT NULL DEFAULT ''`,
	},
	// 9: rollups, so a report over a month reads sums, not rows: each hour's (UTC) lines summed
	// per tenant and model, key id and user (dim), written in the transaction of each batch
	// (rollupSums names the sums). The table is locked while the existing lines are summed
	// into it, so no line is written meanwhile without its rollup. A report counts a
	// count_tokens line only for a measured compaction's savings (lineTotals).
	{
		`LOCK TABLE ctxproxy_ledger IN SHARE MODE`,
		`CREATE TABLE ctxproxy_ledger_rollup (
			dim                         text        NOT NULL, -- model, key or user
			tenant                      text        NOT NULL,
			hour                        timestamptz NOT NULL,
			value                       text        NOT NULL, -- '' for a line without a key id or user
			calls                       bigint      NOT NULL DEFAULT 0,
			input_tokens                bigint      NOT NULL DEFAULT 0,
			output_tokens               bigint      NOT NULL DEFAULT 0,
			cache_creation_input_tokens bigint      NOT NULL DEFAULT 0,
			cache_read_input_tokens     bigint      NOT NULL DEFAULT 0,
			cleared_input_tokens        bigint      NOT NULL DEFAULT 0,
			cleared_tool_uses           bigint      NOT NULL DEFAULT 0,
			cleared_thinking_turns      bigint      NOT NULL DEFAULT 0,
			cost_nano_usd               bigint      NOT NULL DEFAULT 0,
			savings_nano_usd            bigint      NOT NULL DEFAULT 0,
			price_unknown_calls         bigint      NOT NULL DEFAULT 0,
			web_search_requests         bigint      NOT NULL DEFAULT 0,
			compactions                 bigint      NOT NULL DEFAULT 0,
			compaction_cost_nano_usd    bigint      NOT NULL DEFAULT 0,
			compaction_savings_nano_usd bigint      NOT NULL DEFAULT 0,
			savings_gross_nano_usd      bigint      NOT NULL DEFAULT 0,
			cache_penalty_nano_usd      bigint      NOT NULL DEFAULT 0,
			cache_missed_input_tokens   bigint      NOT NULL DEFAULT 0,
			cache_effect_unknown_calls  bigint      NOT NULL DEFAULT 0,
			PRIMARY KEY (dim, tenant, hour, value)
		) WITH (fillfactor = 80)`, // room on each page for the updates of its rows
		`CREATE INDEX ctxproxy_ledger_rollup_hour ON ctxproxy_ledger_rollup (dim, hour)`,
		`INSERT INTO ctxproxy_ledger_rollup (dim, tenant, hour, value, calls, input_tokens, output_tokens,
			cache_creation_input_tokens, cache_read_input_tokens, cleared_input_tokens, cleared_tool_uses, cleared_thinking_turns,
			cost_nano_usd, savings_nano_usd, price_unknown_calls, web_search_requests, compactions, compaction_cost_nano_usd,
			compaction_savings_nano_usd, savings_gross_nano_usd, cache_penalty_nano_usd, cache_missed_input_tokens,
			cache_effect_unknown_calls)
		SELECT d.dim, l.tenant, date_trunc('hour', l.time, 'UTC'), d.value, sum(l.calls), sum(l.input_tokens), sum(l.output_tokens),
			sum(l.cache_creation_input_tokens), sum(l.cache_read_input_tokens), sum(l.cleared_input_tokens), sum(l.cleared_tool_uses),
			sum(l.cleared_thinking_turns), sum(l.cost_nano_usd), sum(l.savings_nano_usd), sum(l.price_unknown_calls),
			sum(l.web_search_requests), sum(l.compactions), sum(l.compaction_cost_nano_usd), sum(l.compaction_savings_nano_usd),
			sum(l.savings_gross_nano_usd), sum(l.cache_penalty_nano_usd), sum(l.cache_missed_input_tokens), sum(l.cache_effect_unknown_calls)
		FROM (
			SELECT time, tenant, model, key_id, user_name, 1 AS calls, input_tokens, output_tokens, cache_creation_input_tokens,
				cache_read_input_tokens, cleared_input_tokens,
				(SELECT coalesce(sum(CASE WHEN json_typeof(e->'cleared_tool_uses') = 'number'
					THEN trunc((e->>'cleared_tool_uses')::numeric)::bigint ELSE 0 END), 0)
					FROM json_array_elements(CASE WHEN json_typeof(applied_edits) = 'array' THEN applied_edits ELSE '[]' END) e) AS cleared_tool_uses,
				(SELECT coalesce(sum(CASE WHEN json_typeof(e->'cleared_thinking_turns') = 'number'
					THEN trunc((e->>'cleared_thinking_turns')::numeric)::bigint ELSE 0 END), 0)
					FROM json_array_elements(CASE WHEN json_typeof(applied_edits) = 'array' THEN applied_edits ELSE '[]' END) e) AS cleared_thinking_turns,
				cost_nano_usd, savings_nano_usd, CASE WHEN price_unknown THEN 1 ELSE 0 END AS price_unknown_calls,
				web_search_requests, compactions, compaction_cost_nano_usd, 0 AS compaction_savings_nano_usd,
				coalesce(savings_gross_nano_usd, savings_nano_usd) AS savings_gross_nano_usd, cache_penalty_nano_usd,
				cache_missed_input_tokens, CASE WHEN cache_effect = 'unknown' THEN 1 ELSE 0 END AS cache_effect_unknown_calls
			FROM ctxproxy_ledger WHERE count_input_tokens IS NULL
			UNION ALL
			SELECT time, tenant, model, key_id, user_name, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, compaction_savings_nano_usd, 0, 0, 0, 0
			FROM ctxproxy_ledger WHERE count_input_tokens IS NOT NULL AND compaction_savings_nano_usd <> 0
		) l
		CROSS JOIN LATERAL (VALUES ('model', l.model), ('key', l.key_id), ('user', l.user_name)) AS d(dim, value)
		GROUP BY 1, 2, 3, 4`,
	},
	// 10: a tenant's reports read its rollups; the few lines at either end of a period are
	// found by time alone. Dropping the index pays for the rollups' writes.
	{
		`DROP INDEX ctxproxy_ledger_tenant_time`,
	},
	// 11: the same sums per UTC day (hour is the day's start), written beside the hours' in the
	// transaction of each batch: a month's report reads about 30 rows a tenant and model, not
	// 720 (0.7 million rows for 100 tenants' month, seconds to sum on two cores).
	{
		`LOCK TABLE ctxproxy_ledger IN SHARE MODE`,
		`CREATE TABLE ctxproxy_ledger_rollup_day (LIKE ctxproxy_ledger_rollup INCLUDING ALL) WITH (fillfactor = 80)`,
		`INSERT INTO ctxproxy_ledger_rollup_day SELECT dim, tenant, date_trunc('day', hour, 'UTC'), value, sum(calls), sum(input_tokens),
			sum(output_tokens), sum(cache_creation_input_tokens), sum(cache_read_input_tokens), sum(cleared_input_tokens),
			sum(cleared_tool_uses), sum(cleared_thinking_turns), sum(cost_nano_usd), sum(savings_nano_usd), sum(price_unknown_calls),
			sum(web_search_requests), sum(compactions), sum(compaction_cost_nano_usd), sum(compaction_savings_nano_usd),
			sum(savings_gross_nano_usd), sum(cache_penalty_nano_usd), sum(cache_missed_input_tokens), sum(cache_effect_unknown_calls)
			FROM ctxproxy_ledger_rollup GROUP BY 1, 2, 3, 4`,
	},
	// 12: the conversation a call belongs to, and the policy lab's measurements (shadow_name
	// NULL on every other line; rollups never count them).
	{
		`ALTER TABLE ctxproxy_ledger ADD COLUMN conversation text NOT NULL DEFAULT '',
			ADD COLUMN shadow_name text,
			ADD COLUMN shadow_of text NOT NULL DEFAULT '',
			ADD COLUMN shadow_input_tokens bigint NOT NULL DEFAULT 0,
			ADD COLUMN shadow_original_input_tokens bigint NOT NULL DEFAULT 0,
			ADD COLUMN estimated_cost_nano_usd bigint NOT NULL DEFAULT 0,
			ADD COLUMN estimated_savings_nano_usd bigint NOT NULL DEFAULT 0,
			ADD COLUMN new_clearing_point boolean NOT NULL DEFAULT false,
			ADD COLUMN compact_not_measured boolean NOT NULL DEFAULT false`,
	},
	// 13: a batch's sums as one row (appendPending) in the statement that inserts its lines;
	// a batch now and then folds them into the rollup tables (ledger_pg_rollup.go). No index:
	// a fold takes them all, a report reads them all.
	{
		`CREATE TABLE ctxproxy_ledger_rollup_pending (batch bytea NOT NULL)`,
	},
	// 14: a pending row of up to a page stays in its page, uncompressed: a batch of 64 lines
	// sums to about 2.3 kB, past the 2 kB at which PostgreSQL would compress it and move it
	// out (a tenth of the append's server CPU).
	{
		`ALTER TABLE ctxproxy_ledger_rollup_pending SET (toast_tuple_target = 8160)`,
	},
}}

// pgRollupTables are the rollup tables by bucket width, widest first.
var pgRollupTables = []struct {
	width time.Duration
	table string
}{{24 * time.Hour, "ctxproxy_ledger_rollup_day"}, {time.Hour, "ctxproxy_ledger_rollup"}}

// OpenPGLedger connects to url (a pgx connection string; search_path and other runtime
// parameters may be given as query parameters) and migrates the schema.
func OpenPGLedger(ctx context.Context, url string) (*PGLedger, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open postgres ledger: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres ledger: %w", err)
	}
	if _, err := pgmigrate.Apply(ctx, pool, PGSchemas...); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres ledger %s@%s/%s: %w", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Database, err)
	}
	return newPGLedger(pool), nil
}

// ReadPGLedger connects to the ledger at url to read it (a report): it writes no schema, and
// refuses a database that holds no ledger, or one at another version than this build reads,
// saying so.
func ReadPGLedger(ctx context.Context, url string) (*PGLedger, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open postgres ledger: %w", err)
	}
	where := fmt.Sprintf("%s@%s/%s", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres ledger: %w", err)
	}
	if err := pgmigrate.Check(ctx, pool, PGSchemas...); err != nil {
		pool.Close()
		if errors.Is(err, pgmigrate.ErrMissing) {
			return nil, fmt.Errorf("no ledger in postgres %s: its tables are not there (a serving ctxproxy or `ctxproxy migrate` creates them; a report never does)", where)
		}
		return nil, fmt.Errorf("postgres ledger %s: %w (run `ctxproxy migrate` with this build)", where, err)
	}
	return newPGLedger(pool), nil
}

// Append inserts c.
func (l *PGLedger) Append(ctx context.Context, c Call) error {
	_, err := l.AppendBatch(ctx, []Call{c})
	return err
}

// pgColumns are the columns AppendBatch inserts, in the order of pgArgs.
const pgColumns = `INSERT INTO ctxproxy_ledger (time, tenant, model, request_id, message_id, stream, status,
		input_tokens, output_tokens, cache_creation_input_tokens, cache_creation_1h_input_tokens, cache_read_input_tokens,
		applied_edits, cleared_input_tokens, cost_nano_usd, savings_nano_usd, price_unknown, key_id, user_name,
		web_search_requests, service_tier, iterations, cost_breakdown, compactions, compaction_cost_nano_usd,
		count_input_tokens, count_original_input_tokens, compacted_input_tokens, compaction_savings_nano_usd, cut, batch_id, custom_id,
		savings_gross_nano_usd, cache_penalty_nano_usd, cache_missed_input_tokens, cache_effect, cache_miss_cause, ` +
	pgColumnsV12 + `) VALUES `

// pgColumnsV12 are the columns schema 12 added, last in pgColumns.
const pgColumnsV12 = `conversation, shadow_name, shadow_of, shadow_input_tokens, shadow_original_input_tokens,
		estimated_cost_nano_usd, estimated_savings_nano_usd, new_clearing_point, compact_not_measured`

const (
	pgNumColumns    = 46
	pgNumColumnsV12 = 9
)

// AppendBatch inserts cs in one multi-row INSERT with their sums (one pending rollup row),
// in one round trip and one statement; a batch that folds (foldDue) also takes the pending
// rows into the rollup tables, in its transaction. Never a line without its sums. A fold that
// fails does not cost the batch its lines: they go in as a batch that does not fold (their
// sums pending for the next fold), and the fold's error comes back with every line stored.
func (l *PGLedger) AppendBatch(ctx context.Context, cs []Call) (int, error) {
	if len(cs) == 0 {
		return 0, nil
	}
	if !l.foldDue(len(cs)) {
		if err := l.appendPending(ctx, cs); err != nil {
			return 0, fmt.Errorf("ledger append: %w", err)
		}
		return len(cs), nil
	}
	sql, args := pgLinesInsert(cs, nil)
	var b pgx.Batch
	b.Queue(sql, args...)
	sums := make(pendingSums, len(cs))
	for i := range cs {
		sums.add(&cs[i])
	}
	err := l.appendFolding(ctx, &b, sums)
	l.folded()
	var commit commitError
	switch {
	case err == nil:
		return len(cs), nil
	case errors.As(err, &commit):
		// Whether the transaction committed is unknown: writing the lines again could
		// count them twice.
		return 0, fmt.Errorf("ledger append: %w", err)
	}
	if perr := l.appendPending(ctx, cs); perr != nil {
		return 0, fmt.Errorf("ledger append: %w", errors.Join(err, perr))
	}
	return len(cs), fmt.Errorf("ledger append: lines stored, their rollup sums left pending for the next fold: %w", err)
}

// appendPending inserts cs with their sums as one pending rollup row, in one statement.
func (l *PGLedger) appendPending(ctx context.Context, cs []Call) error {
	sums := make(pendingSums, len(cs))
	for i := range cs {
		sums.add(&cs[i])
	}
	var pending []byte
	if len(sums) > 0 {
		pending = appendPending(nil, sums)
	}
	sql, args := pgLinesInsert(cs, pending)
	_, err := l.pool.Exec(ctx, sql, args...)
	return err
}

// pgLinesInsert is the multi-row INSERT of cs and its arguments; with pending (an encoded
// pendingSums), the same statement inserts it as a pending rollup row.
func pgLinesInsert(cs []Call, pending []byte) (string, []any) {
	var sql strings.Builder
	args := make([]any, 0, len(cs)*pgNumColumns+1)
	if pending != nil {
		sql.WriteString(pgPendingInsert(len(cs)*pgNumColumns + 1))
	}
	sql.WriteString(pgColumns)
	for i := range cs {
		if i > 0 {
			sql.WriteByte(',')
		}
		sql.WriteString(pgValuesRow(len(args)))
		args = appendPGArgs(args, &cs[i])
	}
	if pending != nil {
		args = append(args, pending)
	}
	return sql.String(), args
}

// pgValuesRow is the VALUES row of one line whose first argument is $n+1.
func pgValuesRow(n int) string {
	b := make([]byte, 0, 8*pgNumColumns)
	b = append(b, '(')
	for j := range pgNumColumns {
		if j > 0 {
			b = append(b, ',')
		}
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(n+j+1), 10)
	}
	return string(append(b, ')'))
}

// appendPGArgs appends c's values in the order of pgColumns.
func appendPGArgs(args []any, c *Call) []any {
	edits := appendEdits(nil, c.Edits)
	u := c.Usage
	var its, breakdown *string
	if c.Iterations != nil {
		s := string(appendIterations(nil, c.Iterations))
		its = &s
	}
	if c.Breakdown != (CostBreakdown{}) {
		s := string(appendBreakdown(nil, c.Breakdown))
		breakdown = &s
	}
	var countIn, countOrig, gross *int64
	if ct := c.CountTokens; ct != nil {
		countIn = &ct.InputTokens
		if ct.HasOriginal {
			countOrig = &ct.OriginalInputTokens
		}
	} else {
		g := int64(c.SavingsGross)
		gross = &g
	}
	effect := c.CacheEffect
	if effect == "" {
		effect = CacheNone
	}
	var sh Shadow
	var shName *string
	if c.Shadow != nil {
		sh, shName = *c.Shadow, &c.Shadow.Name
	}
	return append(args,
		c.Time.UTC().Truncate(time.Microsecond), c.Tenant, c.Model, c.RequestID, c.MessageID, c.Stream, c.Status,
		u.InputTokens, u.OutputTokens, u.CacheCreationInputTokens, u.CacheCreation1hInputTokens, u.CacheReadInputTokens,
		string(edits), c.ClearedInputTokens(), int64(c.Cost), int64(c.Savings), c.PriceUnknown, c.KeyID, c.User,
		u.WebSearchRequests, c.ServiceTier, its, breakdown, c.Compactions, int64(c.CompactionCost),
		countIn, countOrig, c.CompactedInputTokens, int64(c.CompactionSavings), c.Cut, c.BatchID, c.CustomID,
		gross, int64(c.CachePenalty), c.CacheMissedInputTokens, effect, c.CacheMissCause,
		c.Conversation, shName, sh.Shadows, sh.InputTokens, sh.OriginalInputTokens, int64(sh.EstimatedCost),
		int64(sh.EstimatedSavings), sh.NewClearingPoint, sh.CompactNotMeasured)
}

// Query returns the calls matching f in insertion order.
func (l *PGLedger) Query(ctx context.Context, f Filter) ([]Call, error) {
	var out []Call
	err := pgQueryLines(ctx, l.pool, f, func(c *Call) { out = append(out, *c) })
	return out, err
}

// pgQuerier is a pool or a transaction.
type pgQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// pgQueryLines calls fn with each line matching f, in insertion order.
func pgQueryLines(ctx context.Context, db pgQuerier, f Filter, fn func(*Call)) error {
	where, args := pgWhere(f, "time", nil)
	rows, err := db.Query(ctx, `SELECT time, tenant, model, request_id, message_id, stream, status,
		input_tokens, output_tokens, cache_creation_input_tokens, cache_creation_1h_input_tokens, cache_read_input_tokens,
		applied_edits::text, cost_nano_usd, savings_nano_usd, price_unknown, key_id, user_name,
		web_search_requests, service_tier, iterations::text, cost_breakdown::text, compactions, compaction_cost_nano_usd,
		count_input_tokens, count_original_input_tokens, compacted_input_tokens, compaction_savings_nano_usd, cut, batch_id, custom_id,
		COALESCE(savings_gross_nano_usd, savings_nano_usd), cache_penalty_nano_usd, cache_missed_input_tokens, cache_effect, cache_miss_cause,
		conversation, shadow_name, shadow_of, shadow_input_tokens, shadow_original_input_tokens, estimated_cost_nano_usd,
		estimated_savings_nano_usd, new_clearing_point, compact_not_measured
		FROM ctxproxy_ledger WHERE true`+where+` ORDER BY id`, args...)
	if err != nil {
		return fmt.Errorf("query ledger: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c Call
		var edits string
		var its, breakdown *string
		var cost, savings, compactionCost, compactionSavings, gross, penalty int64
		var countIn, countOrig *int64
		var shName *string
		var sh Shadow
		var estCost, estSavings int64
		u := &c.Usage
		if err := rows.Scan(&c.Time, &c.Tenant, &c.Model, &c.RequestID, &c.MessageID, &c.Stream, &c.Status,
			&u.InputTokens, &u.OutputTokens, &u.CacheCreationInputTokens, &u.CacheCreation1hInputTokens, &u.CacheReadInputTokens,
			&edits, &cost, &savings, &c.PriceUnknown, &c.KeyID, &c.User,
			&u.WebSearchRequests, &c.ServiceTier, &its, &breakdown, &c.Compactions, &compactionCost, &countIn, &countOrig,
			&c.CompactedInputTokens, &compactionSavings, &c.Cut, &c.BatchID, &c.CustomID,
			&gross, &penalty, &c.CacheMissedInputTokens, &c.CacheEffect, &c.CacheMissCause,
			&c.Conversation, &shName, &sh.Shadows, &sh.InputTokens, &sh.OriginalInputTokens, &estCost,
			&estSavings, &sh.NewClearingPoint, &sh.CompactNotMeasured); err != nil {
			return fmt.Errorf("query ledger: %w", err)
		}
		c.Time = c.Time.UTC()
		c.Cost, c.Savings, c.CompactionCost, c.CompactionSavings = Money(cost), Money(savings), Money(compactionCost), Money(compactionSavings)
		c.SavingsGross, c.CachePenalty = Money(gross), Money(penalty)
		if err := readBreakdown(&c, its, breakdown); err != nil {
			return fmt.Errorf("query ledger: %w", err)
		}
		if shName != nil {
			sh.Name, sh.EstimatedCost, sh.EstimatedSavings = *shName, Money(estCost), Money(estSavings)
			c.Shadow, c.CacheEffect = &sh, ""
		}
		if countIn != nil {
			c.CacheEffect = "" // a count has no savings, so no cache effect
			c.CountTokens = &CountTokens{InputTokens: *countIn}
			if countOrig != nil {
				c.CountTokens.OriginalInputTokens, c.CountTokens.HasOriginal = *countOrig, true
			}
		}
		var raw []json.RawMessage
		if err := json.Unmarshal([]byte(edits), &raw); err != nil {
			return fmt.Errorf("query ledger: applied_edits: %w", err)
		}
		for _, r := range raw {
			var e AppliedEdit
			if err := e.UnmarshalJSON(r); err != nil {
				return fmt.Errorf("query ledger: %w", err)
			}
			c.Edits = append(c.Edits, e)
		}
		fn(&c)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("query ledger: %w", err)
	}
	return nil
}

// pgWhere appends to args f's conditions on tenant and on the time column, and returns them
// as " AND …": only the conditions f sets, so each query's plan uses the indexes it can.
func pgWhere(f Filter, timeCol string, args []any) (string, []any) {
	var w strings.Builder
	cond := func(sql string, v any) {
		args = append(args, v)
		fmt.Fprintf(&w, " AND %s $%d", sql, len(args))
	}
	if f.Tenant != "" {
		cond("tenant =", f.Tenant)
	}
	if !f.Since.IsZero() {
		cond(timeCol+" >=", f.Since)
	}
	if !f.Until.IsZero() {
		cond(timeCol+" <", f.Until)
	}
	return w.String(), args
}

// rollupView is one REPEATABLE READ, read-only transaction: the rollup and the lines a
// report reads are from one snapshot, whatever is appended meanwhile.
func (l *PGLedger) rollupView(ctx context.Context) (rollupView, []time.Duration, error) {
	tx, err := l.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, nil, fmt.Errorf("query ledger: %w", err)
	}
	widths := make([]time.Duration, len(pgRollupTables))
	for i, t := range pgRollupTables {
		widths[i] = t.width
	}
	return &pgRollupView{tx: tx}, widths, nil
}

type pgRollupView struct {
	tx      pgx.Tx
	pending pendingSums // read by the first addPending
}

func (v *pgRollupView) close(ctx context.Context) error { return v.tx.Rollback(ctx) }

func (v *pgRollupView) addLines(ctx context.Context, b *reportBuilder, f Filter) error {
	return pgQueryLines(ctx, v.tx, f, b.addCall)
}

// pgRollupSums is the SELECT list of the sums of rollup rows.
var pgRollupSums = func() string {
	var s strings.Builder
	for _, f := range rollupSums {
		fmt.Fprintf(&s, ", sum(%s)::bigint", f.col)
	}
	return s.String()
}()

func (v *pgRollupView) addRollup(ctx context.Context, b *reportBuilder, width time.Duration, tenant string, from, to time.Time) error {
	table := ""
	for _, t := range pgRollupTables {
		if t.width == width {
			table = t.table
		}
	}
	dim, group := b.groupBy, "value"
	if dim == GroupByDay { // a tenant's lines are its model rows
		dim, group = GroupByModel, `to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM-DD')`
	}
	sql := `SELECT tenant, ` + group + pgRollupSums + ` FROM ` + table + ` WHERE dim = $1`
	where, args := pgWhere(Filter{Tenant: tenant, Since: from, Until: to}, "hour", []any{dim})
	sql += where
	rows, err := v.tx.Query(ctx, sql+" GROUP BY 1, 2", args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	dest := make([]any, 2+len(rollupSums))
	var t Totals
	var rowTenant, value string
	dest[0], dest[1] = &rowTenant, &value
	for i, f := range rollupSums {
		dest[2+i] = f.of(&t)
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if b.groupBy != GroupByDay {
			value = groupName(value)
		}
		b.add(rowTenant, value, &t)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return v.addPending(ctx, b, width, tenant, from, to)
}

// Ping checks the database is reachable.
func (l *PGLedger) Ping(ctx context.Context) error { return l.pool.Ping(ctx) }

// Close closes the pool.
func (l *PGLedger) Close() error {
	l.pool.Close()
	return nil
}

// readBreakdown reads the iterations and cost breakdown columns (JSON as in a ledger line).
func readBreakdown(c *Call, its, breakdown *string) error {
	if its != nil {
		var rs []iterationRecord
		if err := json.Unmarshal([]byte(*its), &rs); err != nil {
			return fmt.Errorf("iterations: %w", err)
		}
		c.Iterations = iterationsFromRecord(rs)
		if c.Iterations == nil {
			c.Iterations = []Iteration{}
		}
	}
	if breakdown != nil {
		var r breakdownRecord
		if err := json.Unmarshal([]byte(*breakdown), &r); err != nil {
			return fmt.Errorf("cost_breakdown: %w", err)
		}
		c.Breakdown = breakdownFromRecord(&r)
	}
	return nil
}
