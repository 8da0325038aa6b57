package proxy

import (
	"context"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
)

// servePassthrough forwards a /v1/ request the policy does not rewrite
// (models, batch reads, files…): after the caller is authenticated like a
// Messages one (--require-known-tenant covers every route that reaches the
// upstream), and with a log line like every other request.
func (s *Server) servePassthrough(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	c, refused := s.authenticate(r.Context(), r.Header)
	tenant := "none"
	if c.pol != nil {
		tenant = c.pol.Tenant
	}
	sw := &statusWriter{ResponseWriter: w}
	pe := &passError{}
	switch {
	case refused != nil:
		apierr.Write(sw, refused.status, refused.typ, refused.msg)
	case !c.known && s.cfg.RequireKnownTenant:
		apierr.Write(sw, http.StatusUnauthorized, "authentication_error", "the API key matches no ctxproxy tenant")
	default:
		// The reverse proxy sends the tenant's own key, and answers as its
		// policy says (passthroughCaller).
		r = r.WithContext(context.WithValue(context.WithValue(r.Context(), passCallerKey{}, c), passErrorKey{}, pe))
		if br := s.batchReadFor(r, tenant); br != nil {
			// The proxy reads the reply (batchreads.go).
			r = r.WithContext(context.WithValue(r.Context(), batchReadKey{}, br))
			defer br.cancel()
		}
		if c.upstreamKey == "" {
			s.pass.ServeHTTP(sw, r)
			break
		}
		scrub := &scrubWriter{ResponseWriter: sw, key: c.upstreamKey}
		s.pass.ServeHTTP(scrub, r)
		scrub.done()
	}
	status := sw.status
	if status == 0 {
		status = 499 // the client went away before an answer
	}
	if m := s.cfg.Metrics; m != nil && status >= 400 {
		if pe.typ == "" && status != 499 {
			pe.typ, pe.code = errorLabels(status, nil) // the proxy's own answer
		}
		m.ObserveError(tenant, status, pe.typ, pe.code)
	}
	if ce := s.log.Check(zap.InfoLevel, "request"); ce != nil {
		ce.Write(
			zap.String("tenant", tenant),
			zap.String("key", c.keyID),
			zap.String("method", r.Method),
			zap.String("path", r.URL.Path),
			zap.Bool("passthrough", true),
			zap.Int("status", status),
			zap.Duration("duration", time.Since(start)),
			zap.Int64("bytes_out", sw.n),
		)
	}
}

// passError names a relayed error reply of a pass-through request (ModifyResponse reads it) for
// ctxproxy_errors_total; the reply itself goes on unchanged.
type passError struct{ typ, code string }

type passErrorKey struct{}

// notePassError names resp's error, when it is one, for the request's passError.
func notePassError(resp *http.Response) {
	pe, _ := resp.Request.Context().Value(passErrorKey{}).(*passError)
	if pe != nil && resp.StatusCode >= 400 {
		pe.typ, pe.code = peekError(resp)
	}
}

// tracePassthrough gives every other /v1/ call a server span, and the
// upstream request its traceparent (see the passthrough's Rewrite).
func (s *Server) tracePassthrough(next http.Handler) http.Handler {
	t := s.cfg.Tracer
	if !t.Enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, sp := t.StartServer(r, "/v1/*")
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(ctx))
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		sp.EndServer(status, "")
	})
}

// statusWriter remembers the status a handler wrote (0 until it wrote one;
// 1xx are interim) and the bytes of the body; Unwrap keeps flushing
// (http.ResponseController) working through it.
type statusWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
