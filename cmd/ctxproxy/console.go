package main

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/console"
	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/memapi"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// consoleParts is what the console reads: the same stores /admin and the
// memory operator API use.
type consoleParts struct {
	mem     memoryhook.Store
	audit   *memapi.Audit
	ledger  tokens.Ledger
	ring    *keys.Keyring
	pols    *policy.Store
	metrics *tokens.Metrics
	caps    tokens.CapsFunc
	limits  any // the limits store; checked when it can Ping
}

// consoleHandler is the operator console at /admin/ui/, under the same
// authorisation as /admin.
func consoleHandler(cfg *config, p consoleParts, log *zap.Logger) http.Handler {
	cc := console.Config{
		Auth:     adminAuth(cfg, p.pols),
		Policies: p.pols,
		Ledger:   p.ledger,
		Keys:     p.ring,
		Audit:    p.audit,
		Log:      log,
		Ready:    readyChecks(p),
		Spend:    p.caps,
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
