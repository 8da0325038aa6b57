package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/pgurl"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// limitsStoreURL is where the spend counters live: --limits-store, else the ledger's database when
// it is PostgreSQL (one database for a fleet), else this process's memory.
func limitsStoreURL(cfg *config) string {
	switch {
	case cfg.LimitsStore != "":
		return cfg.LimitsStore
	case pgurl.Is(cfg.Ledger):
		return cfg.Ledger
	}
	return "memory"
}

// openLimits builds the enforcer of spend caps and per-minute limits with its stores; close
// releases them.
func openLimits(ctx context.Context, cfg *config, prices *tokens.Prices, metrics *tokens.Metrics, log *zap.Logger) (*limits.Enforcer, func(), error) {
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	var spend limits.SpendStore
	var pg *limits.PGStore
	switch u := limitsStoreURL(cfg); {
	case u == "memory":
		spend = limits.NewMemoryStore()
	case pgurl.Is(u):
		s, err := limits.OpenPGStore(ctx, u)
		if err != nil {
			return nil, nil, fmt.Errorf("--limits-store: %w", err)
		}
		closers = append(closers, s.Close)
		spend, pg = s, s
	default:
		return nil, nil, fmt.Errorf("--limits-store %q: want memory or a postgres:// URL", u)
	}
	rate, err := openRateStore(ctx, cfg.RatelimitStore, pg, &closers)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	e := limits.New(limits.Config{Spend: spend, Rate: rate, Prices: prices, Metrics: limits.NewMetrics(metrics.Registry()), Log: log})
	return e, closeAll, nil
}

func openRateStore(ctx context.Context, spec string, pg *limits.PGStore, closers *[]func()) (limits.RateStore, error) {
	switch {
	case spec == "" && pg != nil:
		return pg.Rate(), nil
	case spec == "" || spec == "memory":
		return limits.NewMemoryRate(), nil
	case strings.HasPrefix(spec, "redis://"), strings.HasPrefix(spec, "rediss://"):
		r, err := limits.OpenRedisRate(ctx, spec)
		if err != nil {
			return nil, fmt.Errorf("--ratelimit-store: %w", err)
		}
		*closers = append(*closers, func() { r.Close() })
		return r, nil
	case pgurl.Is(spec):
		s, err := limits.OpenPGStore(ctx, spec)
		if err != nil {
			return nil, fmt.Errorf("--ratelimit-store: %w", err)
		}
		*closers = append(*closers, s.Close)
		return s.Rate(), nil
	}
	return nil, fmt.Errorf("--ratelimit-store %q: want memory, a redis:// or a postgres:// URL", spec)
}

const defaultPolicies = "./policies"

// reportCaps is spend against caps for `ctxproxy report`, read from the limits store when it is
// PostgreSQL. Counters in a serving process's memory are not reachable from here: it says so
// (when a tenant has caps) and /admin/report of that process shows them.
func reportCaps(ctx context.Context, cfg *config, tenant string, stderr io.Writer) ([]tokens.CapRow, error) {
	dir := cfg.Policies
	if dir == "" {
		// Not asked for: the caps are shown when the default folder is there.
		if _, err := os.Stat(defaultPolicies); err != nil {
			return nil, nil
		}
		dir = defaultPolicies
	}
	set, err := policy.LoadDirWithoutKeys(dir) // a report calls no upstream: it needs no tenant's key
	if err != nil {
		return nil, fmt.Errorf("--policies: %w", err)
	}
	capped := false
	for _, p := range set.Tenants() {
		capped = capped || ((tenant == "" || p.Tenant == tenant) && p.Limits.Capped())
	}
	if !capped {
		return nil, nil
	}
	u := limitsStoreURL(cfg)
	if !pgurl.Is(u) {
		fmt.Fprintln(stderr, "ctxproxy report: spend counters are in the serving process's memory (no PostgreSQL --limits-store or --ledger): see its /admin/report")
		return nil, nil
	}
	st, err := limits.OpenPGStore(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("--limits-store: %w", err)
	}
	defer st.Close()
	return limits.Caps(ctx, st, set, tenant, time.Now())
}
