package tokens

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ctxproxy/ctxproxy/internal/pgmigrate"
)

// PGLedger stores calls in the table ctxproxy_ledger. Its schema (PGSchema) is versioned in
// ctxproxy_ledger_migrations and brought up to date by OpenPGLedger under an advisory lock (internal/pgmigrate), so
// several instances may start at once. Times are stored to the microsecond.
type PGLedger struct {
	pool *pgxpool.Pool
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
	{ // 3: the cost breakdown of issue 15 (iterations, TTL cache writes, web search, batch tier, compaction)
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
	// 8: savings net of the prompt cache (issue 31): gross, penalty, the missed cache tokens,
	// cache_effect and the miss's cause. Older rows read as recorded: gross NULL (= savings),
	// no penalty, cache_effect none.
	{
		`ALTER TABLE ctxproxy_ledger ADD COLUMN savings_gross_nano_usd bigint,
			ADD COLUMN cache_penalty_nano_usd bigint NOT NULL DEFAULT 0,
			ADD COLUMN cache_missed_input_tokens bigint NOT NULL DEFAULT 0,
			ADD COLUMN cache_effect text NOT NULL DEFAULT 'none',
			ADD COLUMN cache_miss_cause text NOT NULL DEFAULT ''`,
	},
}}

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
	return &PGLedger{pool: pool}, nil
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
		savings_gross_nano_usd, cache_penalty_nano_usd, cache_missed_input_tokens, cache_effect, cache_miss_cause) VALUES `

const pgNumColumns = 37

// AppendBatch inserts cs in one multi-row INSERT: all of them or none.
func (l *PGLedger) AppendBatch(ctx context.Context, cs []Call) (int, error) {
	if len(cs) == 0 {
		return 0, nil
	}
	var sql strings.Builder
	sql.WriteString(pgColumns)
	args := make([]any, 0, len(cs)*pgNumColumns)
	for i := range cs {
		if i > 0 {
			sql.WriteByte(',')
		}
		sql.WriteByte('(')
		for j := range pgNumColumns {
			if j > 0 {
				sql.WriteByte(',')
			}
			sql.WriteByte('$')
			sql.WriteString(strconv.Itoa(len(args) + j + 1))
		}
		sql.WriteByte(')')
		args = appendPGArgs(args, &cs[i])
	}
	if _, err := l.pool.Exec(ctx, sql.String(), args...); err != nil {
		return 0, fmt.Errorf("ledger append: %w", err)
	}
	return len(cs), nil
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
	return append(args,
		c.Time.UTC().Truncate(time.Microsecond), c.Tenant, c.Model, c.RequestID, c.MessageID, c.Stream, c.Status,
		u.InputTokens, u.OutputTokens, u.CacheCreationInputTokens, u.CacheCreation1hInputTokens, u.CacheReadInputTokens,
		string(edits), c.ClearedInputTokens(), int64(c.Cost), int64(c.Savings), c.PriceUnknown, c.KeyID, c.User,
		u.WebSearchRequests, c.ServiceTier, its, breakdown, c.Compactions, int64(c.CompactionCost),
		countIn, countOrig, c.CompactedInputTokens, int64(c.CompactionSavings), c.Cut, c.BatchID, c.CustomID,
		gross, int64(c.CachePenalty), c.CacheMissedInputTokens, effect, c.CacheMissCause)
}

// Query returns the calls matching f in insertion order.
func (l *PGLedger) Query(ctx context.Context, f Filter) ([]Call, error) {
	var since, until *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	if !f.Until.IsZero() {
		until = &f.Until
	}
	rows, err := l.pool.Query(ctx, `SELECT time, tenant, model, request_id, message_id, stream, status,
		input_tokens, output_tokens, cache_creation_input_tokens, cache_creation_1h_input_tokens, cache_read_input_tokens,
		applied_edits::text, cost_nano_usd, savings_nano_usd, price_unknown, key_id, user_name,
		web_search_requests, service_tier, iterations::text, cost_breakdown::text, compactions, compaction_cost_nano_usd,
		count_input_tokens, count_original_input_tokens, compacted_input_tokens, compaction_savings_nano_usd, cut, batch_id, custom_id,
		COALESCE(savings_gross_nano_usd, savings_nano_usd), cache_penalty_nano_usd, cache_missed_input_tokens, cache_effect, cache_miss_cause
		FROM ctxproxy_ledger
		WHERE ($1 = '' OR tenant = $1) AND ($2::timestamptz IS NULL OR time >= $2) AND ($3::timestamptz IS NULL OR time < $3)
		ORDER BY id`, f.Tenant, since, until)
	if err != nil {
		return nil, fmt.Errorf("query ledger: %w", err)
	}
	var out []Call
	for rows.Next() {
		var c Call
		var edits string
		var its, breakdown *string
		var cost, savings, compactionCost, compactionSavings, gross, penalty int64
		var countIn, countOrig *int64
		u := &c.Usage
		if err := rows.Scan(&c.Time, &c.Tenant, &c.Model, &c.RequestID, &c.MessageID, &c.Stream, &c.Status,
			&u.InputTokens, &u.OutputTokens, &u.CacheCreationInputTokens, &u.CacheCreation1hInputTokens, &u.CacheReadInputTokens,
			&edits, &cost, &savings, &c.PriceUnknown, &c.KeyID, &c.User,
			&u.WebSearchRequests, &c.ServiceTier, &its, &breakdown, &c.Compactions, &compactionCost, &countIn, &countOrig,
			&c.CompactedInputTokens, &compactionSavings, &c.Cut, &c.BatchID, &c.CustomID,
			&gross, &penalty, &c.CacheMissedInputTokens, &c.CacheEffect, &c.CacheMissCause); err != nil {
			rows.Close()
			return nil, fmt.Errorf("query ledger: %w", err)
		}
		c.Time = c.Time.UTC()
		c.Cost, c.Savings, c.CompactionCost, c.CompactionSavings = Money(cost), Money(savings), Money(compactionCost), Money(compactionSavings)
		c.SavingsGross, c.CachePenalty = Money(gross), Money(penalty)
		if err := readBreakdown(&c, its, breakdown); err != nil {
			rows.Close()
			return nil, fmt.Errorf("query ledger: %w", err)
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
			rows.Close()
			return nil, fmt.Errorf("query ledger: applied_edits: %w", err)
		}
		for _, r := range raw {
			var e AppliedEdit
			if err := e.UnmarshalJSON(r); err != nil {
				rows.Close()
				return nil, fmt.Errorf("query ledger: %w", err)
			}
			c.Edits = append(c.Edits, e)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query ledger: %w", err)
	}
	return out, nil
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
