package server

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/capabilities"
	"github.com/ctxproxy/ctxproxy/policy"
)

// startReadTimeout bounds the read of the models at start: past it the
// proxy serves, the tenants not read yet on the built-in lists.
const startReadTimeout = 15 * time.Second

// modelTenants is every tenant of set with its own upstream key, if any.
func modelTenants(set *policy.Set) []capabilities.Tenant {
	var out []capabilities.Tenant
	for _, p := range set.Tenants() {
		key, _ := p.UpstreamKey()
		out = append(out, capabilities.Tenant{Name: p.Tenant, Key: key})
	}
	return out
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
