package server

import (
	"context"
	"fmt"
	"strings"

	"github.com/ctxproxy/ctxproxy/internal/pgurl"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// LimitsStoreURL is where the spend counters live: --limits-store, else the ledger's database when
// it is PostgreSQL (one database for a fleet), else this process's memory.
func LimitsStoreURL(limitsStore, ledger string) string {
	switch {
	case limitsStore != "":
		return limitsStore
	case pgurl.Is(ledger):
		return ledger
	}
	return "memory"
}

// openLimits builds the enforcer of spend caps and per-minute limits with its stores; close
// releases them.
func openLimits(ctx context.Context, cfg *Settings, prices *tokens.Prices, metrics *tokens.Metrics, log *zap.Logger) (*limits.Enforcer, func(), error) {
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	var spend limits.SpendStore
	var pg *limits.PGStore
	switch u := LimitsStoreURL(cfg.LimitsStore, cfg.Ledger); {
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
