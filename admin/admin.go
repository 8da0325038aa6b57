package admin

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/keys"
)

// Config is what the operator API serves.
type Config struct {
	Auth   Auth
	Report http.Handler  // GET /admin/report (tokens.NewReportHandler); nil: 404
	Keys   *keys.Keyring // /admin/keys; nil: 404
	// Tenant says whether a tenant exists and whether it holds its own
	// Anthropic key (only such a tenant's clients can use ctxproxy keys).
	Tenant func(name string) (exists, ownKey bool)
	Log    *zap.Logger
}

type principalKey struct{}

// New serves /admin/ under cfg.Auth.
func New(cfg Config) http.Handler {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	mux := http.NewServeMux()
	if cfg.Report != nil {
		mux.Handle("/admin/report", tenantScopedReport(cfg.Report))
	}
	if cfg.Keys != nil {
		k := &keyAPI{ring: cfg.Keys, tenant: cfg.Tenant, log: cfg.Log}
		mux.HandleFunc("POST /admin/keys", k.create)
		mux.HandleFunc("GET /admin/keys", k.list)
		mux.HandleFunc("POST /admin/keys/{id}/revoke", k.revoke)
		mux.HandleFunc("POST /admin/keys/{id}/rotate", k.rotate)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !cfg.Auth.enabled() {
			apierr.Write(w, http.StatusNotFound, "not_found_error", "admin endpoints are disabled: start ctxproxy with CTXPROXY_ADMIN_TOKEN (or --admin-token) set")
			return
		}
		p, ok := cfg.Auth.Authorize(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ctxproxy-admin"`)
			apierr.Write(w, http.StatusUnauthorized, "authentication_error", "invalid or missing admin token")
			return
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			apierr.Write(w, http.StatusNotFound, "not_found_error", "no admin route for "+r.Method+" "+r.URL.Path)
			return
		}
		mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

func principal(r *http.Request) Principal {
	p, _ := r.Context().Value(principalKey{}).(Principal)
	return p
}

// tenantScopedReport keeps a tenant's operator to its own tenant's report.
func tenantScopedReport(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := principal(r)
		if p.Tenant == "" {
			next.ServeHTTP(w, r)
			return
		}
		q := r.URL.Query()
		if t := q.Get("tenant"); t != "" && t != p.Tenant {
			apierr.Write(w, http.StatusForbidden, "permission_error", "this token may only read its own tenant's report")
			return
		}
		q.Set("tenant", p.Tenant)
		r2 := r.Clone(r.Context())
		r2.URL.RawQuery = q.Encode()
		next.ServeHTTP(w, r2)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		apierr.Write(w, http.StatusInternalServerError, "api_error", "encode reply: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n')) //nolint:errcheck // client gone
}
