package limits

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ctxproxy/ctxproxy/internal/pgmigrate"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// PGStore keeps spend counters, reservations and per-minute limiter state in PostgreSQL, shared
// by every replica on the database. Each operation is one statement (one round trip): Reserve is
// a function that locks the request's counter rows in a fixed order, so concurrent requests of a
// tenant are checked one after the other, never both against the same remainder.
type PGStore struct {
	pool *pgxpool.Pool
	// timeout bounds each call, so a hung database costs a request at most this long before
	// on_store_error decides.
	timeout time.Duration
}

// PGSchemas are the PostgreSQL schemas of the limits store's database, applied by OpenPGStore
// (see internal/pgmigrate for how to add one; `ctxproxy migrate` must apply them to the database
// the limits store is opened on).
var PGSchemas = []pgmigrate.Schema{PGSchema}

// PGSchema is the limits store's tables and functions. Never edit a version that shipped; append a
// new one.
var PGSchema = pgmigrate.Schema{Name: "limits", Versions: [][]string{
	{
		`CREATE TABLE ctxproxy_spend (
			tenant     text        NOT NULL,
			end_user   text        NOT NULL, -- '' for the tenant as a whole
			bucket     text        NOT NULL, -- YYYY-MM-DD, YYYY-Www or YYYY-MM (UTC)
			spent_nano bigint      NOT NULL DEFAULT 0,
			updated_at timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (tenant, end_user, bucket)
		)`,
		`CREATE TABLE ctxproxy_spend_holds (
			id          text        NOT NULL,
			tenant      text        NOT NULL,
			end_user    text        NOT NULL,
			bucket      text        NOT NULL,
			amount_nano bigint      NOT NULL,
			expires_at  timestamptz NOT NULL,
			PRIMARY KEY (id, tenant, end_user, bucket)
		)`,
		`CREATE INDEX ctxproxy_spend_holds_counter ON ctxproxy_spend_holds (tenant, end_user, bucket, expires_at)`,
		// Reserve: lock each counter row (creating it) in the order given, drop its expired holds,
		// read spend and live holds, and hold the amount on all of them only if it fits under all.
		`CREATE FUNCTION ctxproxy_spend_reserve(p_id text, p_tenant text, p_users text[], p_buckets text[],
				p_caps bigint[], p_amount bigint, p_ttl_ms bigint)
			RETURNS TABLE (refused int, spent bigint[], held bigint[]) LANGUAGE plpgsql AS $$
		DECLARE
			i int;
			s bigint;
			h bigint;
			bad int := 0;
		BEGIN
			spent := '{}';
			held := '{}';
			FOR i IN 1 .. coalesce(array_length(p_buckets, 1), 0) LOOP
				INSERT INTO ctxproxy_spend AS c (tenant, end_user, bucket) VALUES (p_tenant, p_users[i], p_buckets[i])
					ON CONFLICT (tenant, end_user, bucket) DO UPDATE SET spent_nano = c.spent_nano
					RETURNING c.spent_nano INTO s;
				DELETE FROM ctxproxy_spend_holds x WHERE x.tenant = p_tenant AND x.end_user = p_users[i]
					AND x.bucket = p_buckets[i] AND x.expires_at <= clock_timestamp();
				SELECT coalesce(sum(x.amount_nano), 0) INTO h FROM ctxproxy_spend_holds x
					WHERE x.tenant = p_tenant AND x.end_user = p_users[i] AND x.bucket = p_buckets[i];
				spent := spent || s;
				held := held || h;
				IF bad = 0 AND s + h + p_amount > p_caps[i] THEN
					bad := i;
				END IF;
			END LOOP;
			IF bad = 0 THEN
				INSERT INTO ctxproxy_spend_holds (id, tenant, end_user, bucket, amount_nano, expires_at)
					SELECT p_id, p_tenant, u, b, p_amount, clock_timestamp() + p_ttl_ms * interval '1 millisecond'
					FROM unnest(p_users, p_buckets) AS t(u, b);
			END IF;
			refused := bad - 1;
			RETURN NEXT;
		END $$`,
		// The per-minute limiter: one GCRA theoretical arrival time per key, in Unix nanoseconds.
		`CREATE TABLE ctxproxy_rate (
			key    text   PRIMARY KEY,
			tat_ns bigint NOT NULL
		)`,
	},
	{
		// Version 2: nothing on the request path waits for the WAL flush. Every request of a
		// tenant takes the same counter rows' locks, and a synchronous commit holds them through
		// the fsync, so a tenant's requests would queue on the disk (about 130 a second on a
		// slow one). A database crash can lose the last moments of holds, limiter state and
		// settles (at most 3 × wal_writer_delay, 600 ms by default); replica crashes lose
		// nothing, and nothing is ever counted twice.
		`CREATE OR REPLACE FUNCTION ctxproxy_spend_reserve(p_id text, p_tenant text, p_users text[], p_buckets text[],
				p_caps bigint[], p_amount bigint, p_ttl_ms bigint)
			RETURNS TABLE (refused int, spent bigint[], held bigint[]) LANGUAGE plpgsql AS $$
		DECLARE
			i int;
			s bigint;
			h bigint;
			bad int := 0;
		BEGIN
			SET LOCAL synchronous_commit = off;
			spent := '{}';
			held := '{}';
			FOR i IN 1 .. coalesce(array_length(p_buckets, 1), 0) LOOP
				INSERT INTO ctxproxy_spend AS c (tenant, end_user, bucket) VALUES (p_tenant, p_users[i], p_buckets[i])
					ON CONFLICT (tenant, end_user, bucket) DO UPDATE SET spent_nano = c.spent_nano
					RETURNING c.spent_nano INTO s;
				DELETE FROM ctxproxy_spend_holds x WHERE x.tenant = p_tenant AND x.end_user = p_users[i]
					AND x.bucket = p_buckets[i] AND x.expires_at <= clock_timestamp();
				SELECT coalesce(sum(x.amount_nano), 0) INTO h FROM ctxproxy_spend_holds x
					WHERE x.tenant = p_tenant AND x.end_user = p_users[i] AND x.bucket = p_buckets[i];
				spent := spent || s;
				held := held || h;
				IF bad = 0 AND s + h + p_amount > p_caps[i] THEN
					bad := i;
				END IF;
			END LOOP;
			IF bad = 0 THEN
				INSERT INTO ctxproxy_spend_holds (id, tenant, end_user, bucket, amount_nano, expires_at)
					SELECT p_id, p_tenant, u, b, p_amount, clock_timestamp() + p_ttl_ms * interval '1 millisecond'
					FROM unnest(p_users, p_buckets) AS t(u, b);
			END IF;
			refused := bad - 1;
			RETURN NEXT;
		END $$`,
		`CREATE FUNCTION ctxproxy_rate_take(p_key text, p_inc bigint, p_period bigint)
			RETURNS bigint LANGUAGE plpgsql AS $$
		DECLARE
			now_ns bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000;
			tat bigint;
		BEGIN
			SET LOCAL synchronous_commit = off;
			INSERT INTO ctxproxy_rate AS r (key, tat_ns) VALUES (p_key, now_ns + p_inc)
				ON CONFLICT (key) DO UPDATE SET tat_ns = greatest(r.tat_ns, now_ns) + p_inc
				WHERE greatest(r.tat_ns, now_ns) + p_inc - now_ns <= p_period
				RETURNING r.tat_ns INTO tat;
			IF FOUND THEN
				RETURN 0; -- admitted
			END IF;
			SELECT r.tat_ns + p_inc - now_ns - p_period INTO tat FROM ctxproxy_rate r WHERE r.key = p_key;
			RETURN greatest(tat, 1); -- refused: nanoseconds until it fits
		END $$`,
		// Settle: the hold goes and the cost lands in one transaction, or neither does.
		`CREATE FUNCTION ctxproxy_spend_settle(p_id text, p_tenant text, p_users text[], p_buckets text[], p_cost bigint)
			RETURNS void LANGUAGE plpgsql AS $$
		BEGIN
			SET LOCAL synchronous_commit = off;
			DELETE FROM ctxproxy_spend_holds WHERE id = p_id;
			INSERT INTO ctxproxy_spend AS c (tenant, end_user, bucket, spent_nano)
				SELECT p_tenant, u, b, p_cost FROM unnest(p_users, p_buckets) AS t(u, b)
				ON CONFLICT (tenant, end_user, bucket) DO UPDATE SET spent_nano = c.spent_nano + EXCLUDED.spent_nano, updated_at = now();
		END $$`,
	},
	{
		// Version 3: the Message Batches created through the proxy (BatchStore): the hold of a
		// batch's requests and the counters its results' cost is charged to, until the first
		// replica that sees its results closes it.
		`CREATE TABLE ctxproxy_batches (
			id         text        PRIMARY KEY,
			tenant     text        NOT NULL,
			hold_id    text        NOT NULL, -- '' when the batch holds nothing
			users      text[]      NOT NULL, -- its counters, as the hold's rows name them
			buckets    text[]      NOT NULL,
			key_id     text        NOT NULL,
			key_user   text        NOT NULL,
			expires_at timestamptz NOT NULL,
			closed_at  timestamptz
		)`,
		`CREATE INDEX ctxproxy_batches_expires ON ctxproxy_batches (expires_at)`,
	},
	{
		// Version 4: rolling windows (WindowStore, the memory gate's writes per minute): one row
		// per event, counted under an advisory lock on the key so that concurrent takes of a key
		// are counted one after the other. A take drops its key's events past the window, and a
		// few of any key's (idle users' rows do not stay).
		`CREATE TABLE ctxproxy_window (
			key   text   NOT NULL,
			at_ns bigint NOT NULL
		)`,
		`CREATE INDEX ctxproxy_window_key ON ctxproxy_window (key, at_ns)`,
		`CREATE INDEX ctxproxy_window_at ON ctxproxy_window (at_ns)`,
		`CREATE FUNCTION ctxproxy_window_take(p_key text, p_max bigint, p_window_ns bigint)
			RETURNS bigint LANGUAGE plpgsql AS $$
		DECLARE
			now_ns bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000;
			n bigint;
			oldest bigint;
		BEGIN
			SET LOCAL synchronous_commit = off;
			PERFORM pg_advisory_xact_lock(hashtextextended('ctxproxy_window:' || p_key, 0));
			DELETE FROM ctxproxy_window WHERE key = p_key AND at_ns <= now_ns - p_window_ns;
			DELETE FROM ctxproxy_window WHERE ctid IN (
				SELECT ctid FROM ctxproxy_window WHERE at_ns <= now_ns - p_window_ns LIMIT 8);
			SELECT count(*) INTO n FROM ctxproxy_window WHERE key = p_key;
			IF n < p_max THEN
				INSERT INTO ctxproxy_window (key, at_ns) VALUES (p_key, now_ns);
				RETURN 0; -- counted
			END IF;
			SELECT w.at_ns INTO oldest FROM ctxproxy_window w WHERE w.key = p_key
				ORDER BY w.at_ns OFFSET n - p_max LIMIT 1;
			RETURN greatest(oldest + p_window_ns - now_ns, 1); -- refused: nanoseconds until one leaves
		END $$`,
	},
}}

// OpenPGStore connects to url and brings the schema up to date.
func OpenPGStore(ctx context.Context, url string) (*PGStore, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open limits store: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open limits store: %w", err)
	}
	if _, err := pgmigrate.Apply(ctx, pool, PGSchemas...); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open limits store %s@%s/%s: %w", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Database, err)
	}
	return &PGStore{pool: pool, timeout: 2 * time.Second}, nil
}

// ReadPGStore connects to the spend counters at url to read them (a report): it writes no
// schema, and refuses a database without the limits' tables, or with them at another version.
func ReadPGStore(ctx context.Context, url string) (*PGStore, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open limits store: %w", err)
	}
	where := fmt.Sprintf("%s@%s/%s", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open limits store: %w", err)
	}
	if err := pgmigrate.Check(ctx, pool, PGSchemas...); err != nil {
		pool.Close()
		if errors.Is(err, pgmigrate.ErrMissing) {
			return nil, fmt.Errorf("no spend counters in postgres %s: their tables are not there (a serving ctxproxy or `ctxproxy migrate` creates them)", where)
		}
		return nil, fmt.Errorf("limits store %s: %w (run `ctxproxy migrate` with this build)", where, err)
	}
	return &PGStore{pool: pool, timeout: 2 * time.Second}, nil
}

func (s *PGStore) Name() string { return "postgres" }

// Close closes the pool.
func (s *PGStore) Close() { s.pool.Close() }

// Ping checks the database answers.
func (s *PGStore) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

func columns(cs []Counter) (users, buckets []string, caps []int64) {
	users, buckets, caps = make([]string, len(cs)), make([]string, len(cs)), make([]int64, len(cs))
	for i, c := range cs {
		users[i], buckets[i], caps[i] = c.User, c.Bucket, int64(c.Cap)
	}
	return users, buckets, caps
}

func (s *PGStore) Reserve(ctx context.Context, id, tenant string, cs []Counter, amount tokens.Money, ttl time.Duration) (Reservation, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	users, buckets, caps := columns(cs)
	var spent, held []int64
	r := Reservation{}
	err := s.pool.QueryRow(ctx, `SELECT refused, spent, held FROM ctxproxy_spend_reserve($1, $2, $3, $4, $5, $6, $7)`,
		id, tenant, users, buckets, caps, int64(amount), ttl.Milliseconds()).Scan(&r.Refused, &spent, &held)
	if err != nil {
		return Reservation{}, fmt.Errorf("reserve spend: %w", err)
	}
	if len(spent) != len(cs) || len(held) != len(cs) {
		return Reservation{}, errors.New("reserve spend: the store answered for the wrong number of counters")
	}
	r.Spent, r.Reserved = make([]tokens.Money, len(cs)), make([]tokens.Money, len(cs))
	for i := range cs {
		r.Spent[i], r.Reserved[i] = tokens.Money(spent[i]), tokens.Money(held[i])
	}
	return r, nil
}

func (s *PGStore) Settle(ctx context.Context, id, tenant string, cs []Counter, cost tokens.Money) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	users, buckets, _ := columns(cs)
	_, err := s.pool.Exec(ctx, `SELECT ctxproxy_spend_settle($1, $2, $3, $4, $5)`,
		id, tenant, users, buckets, int64(cost))
	if err != nil {
		return fmt.Errorf("settle spend: %w", err)
	}
	return nil
}

func (s *PGStore) Release(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `DELETE FROM ctxproxy_spend_holds WHERE id = $1`, id); err != nil {
		return fmt.Errorf("release spend hold: %w", err)
	}
	return nil
}

func (s *PGStore) UserSpend(ctx context.Context, tenant, bucket string) (map[string]tokens.Money, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT end_user, spent_nano FROM ctxproxy_spend
		WHERE tenant = $1 AND bucket = $2 AND end_user <> '' ORDER BY end_user`, tenant, bucket)
	if err != nil {
		return nil, fmt.Errorf("read user spend: %w", err)
	}
	defer rows.Close()
	out := map[string]tokens.Money{}
	for rows.Next() {
		var u string
		var n int64
		if err := rows.Scan(&u, &n); err != nil {
			return nil, fmt.Errorf("read user spend: %w", err)
		}
		out[u] = tokens.Money(n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read user spend: %w", err)
	}
	return out, nil
}

func (s *PGStore) Spent(ctx context.Context, tenant string, cs []Counter) ([]tokens.Money, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	users, buckets, _ := columns(cs)
	rows, err := s.pool.Query(ctx, `SELECT coalesce(c.spent_nano, 0) FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS t(u, b, n)
		LEFT JOIN ctxproxy_spend c ON c.tenant = $1 AND c.end_user = t.u AND c.bucket = t.b ORDER BY t.n`, tenant, users, buckets)
	if err != nil {
		return nil, fmt.Errorf("read spend: %w", err)
	}
	vals, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("read spend: %w", err)
	}
	out := make([]tokens.Money, len(vals))
	for i, v := range vals {
		out[i] = tokens.Money(v)
	}
	return out, nil
}

func (s *PGStore) OpenBatch(ctx context.Context, b Batch, holdTTL, recordTTL time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	users, buckets, _ := columns(b.Counters)
	// One statement: old records go, the hold lives on as the batch's, the batch is recorded.
	_, err := s.pool.Exec(ctx, `WITH gone AS (DELETE FROM ctxproxy_batches WHERE expires_at <= clock_timestamp()),
		held AS (UPDATE ctxproxy_spend_holds SET expires_at = clock_timestamp() + $8 * interval '1 millisecond'
			WHERE id = $3 AND $3 <> '')
		INSERT INTO ctxproxy_batches (id, tenant, hold_id, users, buckets, key_id, key_user, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, clock_timestamp() + $9 * interval '1 millisecond')
		ON CONFLICT (id) DO NOTHING`,
		b.ID, b.Tenant, b.HoldID, users, buckets, b.KeyID, b.User, holdTTL.Milliseconds(), recordTTL.Milliseconds())
	if err != nil {
		return fmt.Errorf("record batch: %w", err)
	}
	return nil
}

func (s *PGStore) CloseBatch(ctx context.Context, id, tenant string) (Batch, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	b := Batch{ID: id, Tenant: tenant}
	var users, buckets []string
	err := s.pool.QueryRow(ctx, `UPDATE ctxproxy_batches SET closed_at = clock_timestamp()
		WHERE id = $1 AND tenant = $2 AND closed_at IS NULL AND expires_at > clock_timestamp()
		RETURNING hold_id, users, buckets, key_id, key_user`, id, tenant).Scan(&b.HoldID, &users, &buckets, &b.KeyID, &b.User)
	if errors.Is(err, pgx.ErrNoRows) {
		return Batch{}, false, nil
	}
	if err != nil {
		return Batch{}, false, fmt.Errorf("close batch: %w", err)
	}
	if len(users) != len(buckets) {
		return Batch{}, false, errors.New("close batch: the store answered counters of two lengths")
	}
	for i := range users {
		b.Counters = append(b.Counters, Counter{User: users[i], Bucket: buckets[i]})
	}
	return b, true, nil
}
