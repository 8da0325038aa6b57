package tokens

import (
	"encoding/json"
	"net/http"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"go.uber.org/zap"
)

// HandlerOption configures NewReportHandler.
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

// NewReportHandler serves GET /admin/report?tenant=&since=&until=&group_by=model|day|key|user
// as JSON (see Report), for package admin, which authorises the operator.
// Bad parameters get 400 invalid_request_error; a ledger failure 500 api_error (logged).
func NewReportHandler(l Ledger, opts ...HandlerOption) http.Handler {
	cfg := handlerConfig{log: zap.NewNop()}
	for _, o := range opts {
		o(&cfg)
	}
	log := cfg.log
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			apierr.Write(w, http.StatusMethodNotAllowed, "invalid_request_error", "use GET")
			return
		}
		q := r.URL.Query()
		for k, v := range q {
			switch k {
			case "tenant", "since", "until", "group_by":
				if len(v) > 1 {
					apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "parameter "+k+" given more than once")
					return
				}
			default:
				apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "unknown parameter "+k+" (want tenant, since, until, group_by)")
				return
			}
		}
		g, err := ParseGroupBy(q.Get("group_by"))
		if err != nil {
			apierr.Write(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		f, err := ParseFilter(q.Get("tenant"), q.Get("since"), q.Get("until"))
		if err != nil {
			apierr.Write(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		rep, err := RunReport(r.Context(), l, f, g)
		if err != nil {
			log.Error("admin report failed", zap.Error(err))
			apierr.Write(w, http.StatusInternalServerError, "api_error", "the ledger could not be read")
			return
		}
		if cfg.caps != nil {
			if rep.Caps, err = cfg.caps(r.Context(), f.Tenant); err != nil {
				log.Error("admin report: caps failed", zap.Error(err))
				apierr.Write(w, http.StatusInternalServerError, "api_error", "the limits store could not be read")
				return
			}
		}
		b, err := json.Marshal(rep)
		if err != nil {
			log.Error("admin report encode failed", zap.Error(err))
			apierr.Write(w, http.StatusInternalServerError, "api_error", "the report could not be encoded")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(append(b, '\n')) //nolint:errcheck // client gone
	})
}
