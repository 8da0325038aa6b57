package tokens

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"

	"go.uber.org/zap"
)

// writeAPIError writes the API's error shape.
func writeAPIError(w http.ResponseWriter, status int, typ, msg string) {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n')) //nolint:errcheck // client gone
}

// RequireAdminToken guards next with token, compared in constant time, taken from
// "Authorization: Bearer <token>" or "x-admin-token: <token>". An empty token disables the
// endpoint: every request gets 404, so no admin endpoint is ever open by omission.
func RequireAdminToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeAPIError(w, http.StatusNotFound, "not_found_error", "admin endpoints are disabled: start ctxproxy with CTXPROXY_ADMIN_TOKEN (or --admin-token) set")
		})
	}
	want := sha256.Sum256([]byte(token)) // hashing equalises lengths for the constant-time compare
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := adminTokenFrom(r)
		h := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(h[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ctxproxy-admin"`)
			writeAPIError(w, http.StatusUnauthorized, "authentication_error", "invalid or missing admin token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func adminTokenFrom(r *http.Request) (string, bool) {
	if a := r.Header.Get("Authorization"); a != "" {
		scheme, tok, found := strings.Cut(a, " ")
		if found && strings.EqualFold(scheme, "Bearer") && strings.TrimSpace(tok) != "" {
			return strings.TrimSpace(tok), true
		}
	}
	if t := r.Header.Get("X-Admin-Token"); t != "" {
		return t, true
	}
	return "", false
}

// HandlerOption configures ReportHandler.
type HandlerOption func(*handlerConfig)

type handlerConfig struct {
	log  *zap.Logger
	caps CapsFunc // nil: the report has no caps
}

// WithLogger logs ledger failures of the handler to log.
func WithLogger(log *zap.Logger) HandlerOption {
	return func(c *handlerConfig) {
		if log != nil {
			c.log = log
		}
	}
}

// ReportHandler serves GET /admin/report?tenant=&since=&until=&group_by=model|day|key|user as JSON
// (see Report), behind RequireAdminToken(adminToken): an empty token disables it (404).
// Bad parameters get 400 invalid_request_error; a ledger failure 500 api_error (logged).
func ReportHandler(l Ledger, adminToken string, opts ...HandlerOption) http.Handler {
	return RequireAdminToken(adminToken, NewReportHandler(l, opts...))
}

// NewReportHandler is ReportHandler without authorisation, for a caller that
// authorises operator requests itself (package admin).
func NewReportHandler(l Ledger, opts ...HandlerOption) http.Handler {
	cfg := handlerConfig{log: zap.NewNop()}
	for _, o := range opts {
		o(&cfg)
	}
	log := cfg.log
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeAPIError(w, http.StatusMethodNotAllowed, "invalid_request_error", "use GET")
			return
		}
		q := r.URL.Query()
		for k, v := range q {
			switch k {
			case "tenant", "since", "until", "group_by":
				if len(v) > 1 {
					writeAPIError(w, http.StatusBadRequest, "invalid_request_error", "parameter "+k+" given more than once")
					return
				}
			default:
				writeAPIError(w, http.StatusBadRequest, "invalid_request_error", "unknown parameter "+k+" (want tenant, since, until, group_by)")
				return
			}
		}
		g, err := ParseGroupBy(q.Get("group_by"))
		if err != nil {
			writeAPIError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		f, err := ParseFilter(q.Get("tenant"), q.Get("since"), q.Get("until"))
		if err != nil {
			writeAPIError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		rep, err := RunReport(r.Context(), l, f, g)
		if err != nil {
			log.Error("admin report failed", zap.Error(err))
			writeAPIError(w, http.StatusInternalServerError, "api_error", "the ledger could not be read")
			return
		}
		if cfg.caps != nil {
			if rep.Caps, err = cfg.caps(r.Context(), f.Tenant); err != nil {
				log.Error("admin report: caps failed", zap.Error(err))
				writeAPIError(w, http.StatusInternalServerError, "api_error", "the limits store could not be read")
				return
			}
		}
		b, err := json.Marshal(rep)
		if err != nil {
			log.Error("admin report encode failed", zap.Error(err))
			writeAPIError(w, http.StatusInternalServerError, "api_error", "the report could not be encoded")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(append(b, '\n')) //nolint:errcheck // client gone
	})
}
