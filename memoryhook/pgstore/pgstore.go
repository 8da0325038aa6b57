// Package pgstore is the PostgreSQL memory store: the shared
// store several ctxproxy replicas use, so an agent's memory is the same
// whichever replica answers.
//
// It is a memoryhook.Backend wrapped with memoryhook.NewStore, so every
// result string comes from memoryhook and matches the file store's
// character for character (memoryhook/storetest runs against both).
//
// It also keeps each memory's history (memoryhook.History: the versions
// written in the same transaction as the write, redaction, pruning) and
// the threads' continuations (memoryhook.Continuations), so the operator
// API and every replica see the same.
//
// Every query names the tenant (it leads every primary key). Each write is
// one transaction that first locks the tenant's usage row (SELECT … FOR
// UPDATE), then the rows it changes: writes of one tenant are serialised
// across replicas, the limits check sees exact usage, and no update is
// lost. Reads are single statements and take no lock.
//
// Every command runs under a deadline (Timeout, 5 s by default, or the
// caller's if sooner); when the database is down or slow the command fails
// with a memoryhook.UnavailableError ("memory store unavailable: database
// unavailable" or "…: database timed out"), never hangs. A command that
// fails on a broken connection before it could have changed anything is
// tried once more on a fresh one, so the first command after the database
// is back does not fail on a stale pooled connection. pgxpool reconnects by
// itself.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// Defaults of the options.
const (
	DefaultTimeout         = 5 * time.Second
	DefaultReadyTimeout    = 2 * time.Second
	DefaultApplicationName = "ctxproxy"
)

// Store is the PostgreSQL memory store. It implements memoryhook.Store and
// memoryhook.Continuations; Close releases the pool.
type Store struct {
	cmds         memoryhook.Store
	b            *backend
	pool         *pgxpool.Pool
	timeout      time.Duration
	readyTimeout time.Duration
	sweepEvery   int // one put in sweepEvery sweeps the tenant's expired continuations
}

var (
	_ memoryhook.Store         = (*Store)(nil)
	_ memoryhook.Continuations = (*Store)(nil)
)

// Option configures Open.
type Option func(*options)

type options struct {
	timeout, readyTimeout time.Duration
	appName               string
}

// WithTimeout bounds each command (and each continuation call): a slower
// database makes it fail as unavailable. Default DefaultTimeout.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithReadyTimeout bounds Ready's ping. Default DefaultReadyTimeout.
func WithReadyTimeout(d time.Duration) Option { return func(o *options) { o.readyTimeout = d } }

// WithApplicationName sets application_name of the pool's connections (as
// pg_stat_activity shows them). Default: the URL's application_name, else
// DefaultApplicationName.
func WithApplicationName(name string) Option { return func(o *options) { o.appName = name } }

// Open connects to url (a pgx connection string, "postgres://…"; pool_*
// parameters and runtime parameters such as search_path may be given as
// query parameters) and creates or migrates the schema. It fails when the
// database cannot be reached within ctx.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	o := options{timeout: DefaultTimeout, readyTimeout: DefaultReadyTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if o.timeout <= 0 {
		o.timeout = DefaultTimeout
	}
	if o.readyTimeout <= 0 {
		o.readyTimeout = DefaultReadyTimeout
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's message may quote the URL, password included.
		return nil, errors.New("open postgres memory store: invalid connection string")
	}
	rp := cfg.ConnConfig.RuntimeParams
	switch {
	case o.appName != "":
		rp["application_name"] = o.appName
	case rp["application_name"] == "":
		rp["application_name"] = DefaultApplicationName
	}
	// A replica that stalls inside a transaction (paused, partitioned) must
	// not hold a tenant's lock much longer than a command may take.
	if rp["idle_in_transaction_session_timeout"] == "" {
		rp["idle_in_transaction_session_timeout"] = strconv.FormatInt(max(2*o.timeout, time.Second).Milliseconds(), 10)
	}
	// The pool keeps dialling after an Acquire gives up; without a bound a
	// black-holed database would pile up connects for minutes.
	if cfg.ConnConfig.ConnectTimeout <= 0 || cfg.ConnConfig.ConnectTimeout > o.timeout {
		cfg.ConnConfig.ConnectTimeout = o.timeout
	}
	b := &backend{}
	cfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return b.suspect(p) }
	where := fmt.Sprintf("%s@%s:%d/%s", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres memory store %s: %w", where, err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres memory store %s: %w", where, err)
	}
	b.pool = pool
	return &Store{cmds: memoryhook.NewStore(b), b: b, pool: pool,
		timeout: o.timeout, readyTimeout: o.readyTimeout, sweepEvery: 64}, nil
}

// Close closes the pool; commands then fail as unavailable.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Ready pings the database within the ready timeout; the error says why not
// (it names no password).
func (s *Store) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.readyTimeout)
	defer cancel()
	return s.b.Ready(ctx)
}

// deadline is the one deadline a whole command runs under.
func (s *Store) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// View implements memoryhook.Store.
func (s *Store) View(ctx context.Context, sc memoryhook.Scope, p memoryhook.Path, viewRange []int) (string, error) {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	return s.cmds.View(ctx, sc, p, viewRange)
}

// Create implements memoryhook.Store.
func (s *Store) Create(ctx context.Context, sc memoryhook.Scope, p memoryhook.Path, text string) (string, error) {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	return s.cmds.Create(ctx, sc, p, text)
}

// StrReplace implements memoryhook.Store.
func (s *Store) StrReplace(ctx context.Context, sc memoryhook.Scope, p memoryhook.Path, oldStr, newStr string) (string, error) {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	return s.cmds.StrReplace(ctx, sc, p, oldStr, newStr)
}

// Insert implements memoryhook.Store.
func (s *Store) Insert(ctx context.Context, sc memoryhook.Scope, p memoryhook.Path, line int, text string) (string, error) {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	return s.cmds.Insert(ctx, sc, p, line, text)
}

// Delete implements memoryhook.Store.
func (s *Store) Delete(ctx context.Context, sc memoryhook.Scope, p memoryhook.Path) (string, error) {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	return s.cmds.Delete(ctx, sc, p)
}

// Rename implements memoryhook.Store.
func (s *Store) Rename(ctx context.Context, sc memoryhook.Scope, from, to memoryhook.Path) (string, error) {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	return s.cmds.Rename(ctx, sc, from, to)
}
