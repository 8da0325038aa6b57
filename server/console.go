package server

import (
	"context"
	"github.com/ctxproxy/ctxproxy/capabilities"
	"net/http"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/pgurl"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/console"
	"github.com/ctxproxy/ctxproxy/console/pgsessions"
	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/memapi"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// consoleParts is what the console reads: the same stores /admin and the
// memory operator API use.
type consoleParts struct {
	mem      memoryhook.Store
	audit    *memapi.Audit
	ledger   tokens.Ledger
	ring     *keys.Keyring
	pols     *policy.Store
	metrics  *tokens.Metrics
	caps     tokens.CapsFunc
	limits   any // the limits store; checked when it can Ping
	sessions console.Sessions
	models   *capabilities.Cache
	prices   func() *tokens.Prices
}

// consoleHandler is the operator console at /admin/ui/, under the same
// authorisation as /admin.
func consoleHandler(cfg *Settings, p consoleParts, log *zap.Logger) http.Handler {
	cc := console.Config{
		Auth:     adminAuth(cfg, p.pols),
		Policies: p.pols,
		Ledger:   p.ledger,
		Keys:     p.ring,
		Audit:    p.audit,
		Log:      log,
		Ready:    readyChecks(p),
		Spend:    p.caps,
		Sessions: p.sessions,
		Models:   p.models,
		Prices:   p.prices,
		// Whether a sign-in came over TLS, for the session cookie's Secure.
		TrustedProxies: cfg.TrustedProxies,
	}
	if g, ok := p.mem.(memoryhook.Governed); ok {
		cc.Memory = g
	}
	if p.metrics != nil {
		cc.Metrics = prometheus.Gatherer(p.metrics.Registry())
	}
	c, err := console.New(cc)
	if err != nil {
		// The templates are embedded: a failure here is a build defect.
		panic(err)
	}
	return c
}

// openConsoleSessions opens the store of the console's sign-ins: the memory
// store's PostgreSQL database when it has one (a sign-in on one replica
// serves the next page on any), else this process's memory (the file store
// is one process's too). stop closes it.
func openConsoleSessions(ctx context.Context, cfg *Settings, log *zap.Logger) (_ console.Sessions, stop func(), err error) {
	if !pgurl.Is(cfg.MemoryStore) {
		return console.NewMemorySessions(), func() {}, nil
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := pgsessions.Open(octx, cfg.MemoryStore)
	if err != nil {
		return nil, nil, err
	}
	log.Info("console sessions: PostgreSQL")
	return st, st.Close, nil
}

// readyChecks are the console's health checks: memory store, ledger.
func readyChecks(p consoleParts) func(context.Context) []console.Check {
	return func(ctx context.Context) []console.Check {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var out []console.Check
		if p.mem != nil {
			err := p.mem.Ready(ctx)
			out = append(out, check("memory store", err))
		}
		if pg, ok := p.limits.(interface{ Ping(context.Context) error }); ok {
			out = append(out, check("limits store (PostgreSQL)", pg.Ping(ctx)))
		}
		if pg, ok := p.ledger.(interface{ Ping(context.Context) error }); ok {
			out = append(out, check("ledger (PostgreSQL)", pg.Ping(ctx)))
		} else if p.ledger != nil {
			out = append(out, console.Check{Name: "ledger (file)", OK: true, Detail: "written by this process"})
		}
		return out
	}
}

func check(name string, err error) console.Check {
	if err != nil {
		return console.Check{Name: name, Detail: err.Error()}
	}
	return console.Check{Name: name, OK: true}
}
