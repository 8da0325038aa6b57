package server

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/capabilities"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// startReadTimeout bounds the read of the models at start: past it the
// proxy serves, the tenants not read yet on the built-in lists.
const startReadTimeout = 15 * time.Second

// modelTenants is every tenant of set with its own upstream key, if any,
// and the models its policy names.
func modelTenants(set *policy.Set) []capabilities.Tenant {
	var out []capabilities.Tenant
	for _, p := range set.Tenants() {
		key, _ := p.UpstreamKey()
		t := capabilities.Tenant{Name: p.Tenant, Key: key}
		if c := p.ContextManagement.Compact; c != nil && c.ModelsListed {
			t.Models = c.Models
		}
		out = append(out, t)
	}
	return out
}

// retiringWatch reports the models the tenants use that are deprecated or
// retired (capabilities.Retiring, after every read): a log line when one
// starts to hold, and ctxproxy_model_retiring{tenant,model,retires_at} 1
// while it holds.
type retiringWatch struct {
	gauge  *prometheus.GaugeVec
	tenant func(string) string // the metrics' tenant label
	log    *zap.Logger
	mu     sync.Mutex
	held   map[[3]string]bool
}

func newRetiringWatch(reg prometheus.Registerer, tenant func(string) string, log *zap.Logger) *retiringWatch {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ctxproxy_model_retiring",
		Help: "1 while a model that a tenant used in the last 7 days, or that its policy names, is deprecated or retired (retires_at empty when the API gives no date).",
	}, []string{"tenant", "model", "retires_at"})
	reg.MustRegister(g)
	return &retiringWatch{gauge: g, tenant: tenant, log: log, held: map[[3]string]bool{}}
}

func (w *retiringWatch) update(rs []capabilities.Retiring) {
	w.mu.Lock()
	defer w.mu.Unlock()
	next := make(map[[3]string]bool, len(rs))
	for _, r := range rs {
		k := [3]string{w.tenant(r.Tenant), r.Model, r.RetiresAt}
		next[k] = true
		if w.held[k] {
			continue
		}
		w.gauge.WithLabelValues(k[:]...).Set(1)
		fields := []zap.Field{zap.String("tenant", r.Tenant), zap.String("model", r.Model),
			zap.String("lifecycle", r.Lifecycle), zap.String("retires_at", r.RetiresAt), zap.Bool("named_by_policy", r.Named)}
		if !r.LastUsed.IsZero() {
			fields = append(fields, zap.Time("last_used", r.LastUsed))
		}
		w.log.Warn("model retiring: a tenant uses a model the API lists as deprecated or retired; move it to another model", fields...)
	}
	for k := range w.held {
		if !next[k] {
			w.gauge.DeleteLabelValues(k[:]...)
		}
	}
	w.held = next
}

// seedModelUsage tells models when each tenant last used each model in the
// last capabilities.UsageWindow, from the ledger (which outlives a restart,
// the cache's memory does not), so a deploy does not silence the warning
// for a retiring model a tenant used yesterday. It reads in the background
// (a large file ledger takes seconds to read; serving need not wait for a
// warning) and logs "model usage read from the ledger" when done; a ledger
// that cannot be read is logged and only the calls from the start count.
// The returned func stops the read and waits for it (before the ledger closes).
func seedModelUsage(ctx context.Context, ledger tokens.Ledger, models *capabilities.Cache, lifecycle *zap.Logger) (stop func()) {
	l, ok := ledger.(tokens.ModelUseLedger)
	if !ok {
		return func() {}
	}
	rctx, cancel := context.WithTimeout(ctx, startReadTimeout)
	done := make(chan struct{})
	go func() {
		defer close(done)
		uses, err := l.LastUsed(rctx, time.Now().Add(-capabilities.UsageWindow))
		if err != nil {
			lifecycle.Warn("model retiring: cannot read from the ledger which models the tenants used before this start; only the calls from now on count", zap.Error(err))
			return
		}
		seeds := make([]capabilities.Use, len(uses))
		for i, u := range uses {
			seeds[i] = capabilities.Use{Tenant: u.Tenant, Model: u.Model, At: u.Hour}
		}
		models.SeedUsage(seeds)
		lifecycle.Info("model usage read from the ledger", zap.Int("tenant_models", len(seeds)))
	}()
	return func() { cancel(); <-done }
}

// startModels reads the tenants' models once before the proxy serves, then
// every ten minutes (and a pass-through tenant's once its first credential
// is forwarded) until stop.
func startModels(ctx context.Context, models *capabilities.Cache, lifecycle *zap.Logger) (stop func()) {
	rctx, cancel := context.WithTimeout(ctx, startReadTimeout)
	if err := models.Refresh(rctx); err != nil {
		lifecycle.Warn("model capabilities: some tenants' models could not be read; their edits follow the built-in lists", zap.Error(err))
	}
	cancel()
	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); models.Run(runCtx) }()
	return func() { stopRun(); <-done }
}

// refreshModels is POST /debug/models/refresh on the debug listener: read
// every tenant's models now rather than at the next tick (after the API
// changed a model, or in a test). It answers once the read is done.
func refreshModels(models *capabilities.Cache) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := models.Refresh(r.Context()); err != nil {
			w.WriteHeader(http.StatusBadGateway)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		_, _ = w.Write([]byte(`{"ok":true}` + "\n"))
	})
}
