// Package proxy is ctxproxy's HTTP side. A Messages or count_tokens request is
// admitted (its tenant by its key, ctxproxy's own keys checked through a
// KeyVerifier, the tenant's caps and per-minute limits through package
// limits), rewritten by the tenant's policy (package policy), sent upstream
// (whole, or while it is still read for large bodies: lead.go) and answered
// plain or as a relayed SSE stream; when the model calls the memory tool the
// proxy runs the call itself (package memoryhook) and continues the
// conversation upstream (the memory loop, threads included). Each upstream
// call is accounted (package tokens), with what the edits did to the prompt
// cache (package cachetrack). Message Batches are admitted and settled
// against the caps; every other /v1/ route passes through untouched but for
// the credential. /healthz, /readyz, the admin API and the console are
// mounted here; errors use the API's own shape (internal/apierr).
package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/cachetrack"
	"github.com/ctxproxy/ctxproxy/capabilities"
	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/ctxproxy/ctxproxy/internal/upstreamreq"
	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/shadow"
	"github.com/ctxproxy/ctxproxy/tokens"
	"github.com/ctxproxy/ctxproxy/tracing"
)

// Config is what a Server needs. MaxBody, UpstreamTimeout and
// StreamIdleTimeout are required: serve's defaults are written once, in
// server.DefaultSettings, which fills them.
type Config struct {
	Upstream  *url.URL
	Policies  *policy.Store
	Memory    memoryhook.Store // nil: memory proxy mode answers tool errors
	Recorder  *tokens.Recorder // nil: no accounting
	Metrics   *tokens.Metrics  // request metrics (the binary serves them on a listener of its own); nil: none
	Tracer    *tracing.Tracer  // nil: no traces
	Admin     http.Handler     // the operator API under /admin/ (package admin); nil: disabled
	Console   http.Handler     // the operator console under /admin/ui/ (package console); nil: disabled
	Keys      KeyVerifier      // ctxproxy's own keys; nil: every sk-ctx- key is unknown
	MemoryAPI http.Handler     // /v1/memory_stores (package memapi); nil: passed upstream like any /v1/ path
	Limits    *limits.Enforcer // spend caps and per-minute limits; nil: none enforced
	// CacheTracker remembers each conversation's previous call, to measure what edits did to the
	// prompt cache (cacheconv.go); nil: one of its own on the wall clock.
	CacheTracker *cachetrack.Tracker
	// Models reads what the API says of each tenant's models; the policies
	// decide from it (policy.WithModels), the proxy only offers it a
	// pass-through tenant's credential. nil: the built-in lists decide.
	Models *capabilities.Cache
	// NoCacheTracking tracks no conversation: every clearing call's cache effect is unknown and
	// no diagnosis is asked. A benchmark aid (what the conversation lookup costs).
	NoCacheTracking bool
	// Lab is the policy lab, which measures tenants' shadow candidates (package shadow); nil:
	// none measured.
	Lab                *shadow.Lab
	Log                *zap.Logger
	MaxBody            int64         // request body limit
	RequireKnownTenant bool          // answer 401 to clients that match no tenant
	UpstreamTimeout    time.Duration // time to the upstream's response headers
	StreamIdleTimeout  time.Duration // longest silence between stream bytes
	Transport          http.RoundTripper
	// ForwardWhileReading sends a large request body upstream while it arrives
	// (lead.go); off, every body is read whole first. Off by default: in the
	// bench it is level with reading whole (bench/RESULTS.md, session 7).
	ForwardWhileReading bool
}

// Server is the proxy. Create it with New; it is an http.Handler.
type Server struct {
	cfg    Config
	log    *zap.Logger
	up     *upstream
	router *mux.Router
	pass   http.Handler // the reverse proxy of passthrough routes (servePassthrough authenticates)
	trim   *idleTrim    // empties the upstream's idle pool after a burst
	// leadShapes is, per tenant, the leadShape of its last large body: the next
	// one's upload starts with it (lead.go).
	leadShapes sync.Map
	// writeRate counts the model's memory writes per user (memory.gate): in
	// the limits store when replicas share one (gaterate.go), else here;
	// seeded holds the stores whose template was seen to (memory.go).
	writeRate memoryhook.WriteCounter
	seeded    sync.Map
	// replies are plain memory-loop replies kept for the SDKs' resends (replay.go).
	replies replies
}

const maxReplyBytes = 256 << 20 // bound on a non-streamed upstream reply

// New builds a Server from cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Upstream == nil || cfg.Upstream.Host == "" {
		return nil, errors.New("proxy: upstream URL is required")
	}
	if cfg.Policies == nil {
		return nil, errors.New("proxy: policies are required")
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if missing := missingLimits(cfg); missing != "" {
		// No silent defaults here: serve's are server.DefaultSettings', one place.
		return nil, fmt.Errorf("proxy: Config.%s required (server.DefaultSettings has serve's)", missing)
	}
	if cfg.NoCacheTracking {
		cfg.CacheTracker = nil
	} else if cfg.CacheTracker == nil {
		cfg.CacheTracker = cachetrack.New(nil, 0)
	}
	rt := cfg.Transport
	if rt == nil {
		rt = NewTransport(cfg.UpstreamTimeout)
	}
	s := &Server{
		cfg: cfg,
		log: cfg.Log,
		up:  &upstream{base: cfg.Upstream, client: &http.Client{Transport: rt, CheckRedirect: noRedirect}},

		writeRate: gateRate(cfg.Limits, cfg.Log),
	}
	s.trim = newIdleTrim(rt)
	s.router = s.routes()
	s.pass = s.tracePassthrough(s.passthrough(rt))
	return s, nil
}

// missingLimits names the limits cfg lacks ("MaxBody and UpstreamTimeout are"), "" when none.
func missingLimits(cfg Config) string {
	var names []string
	if cfg.MaxBody <= 0 {
		names = append(names, "MaxBody")
	}
	if cfg.UpstreamTimeout <= 0 {
		names = append(names, "UpstreamTimeout")
	}
	if cfg.StreamIdleTimeout <= 0 {
		names = append(names, "StreamIdleTimeout")
	}
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0] + " is"
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + " are"
}

// NewTransport is the upstream transport: keep-alive pools sized for many
// concurrent agents, and a bound on the wait for response headers.
func NewTransport(headerTimeout time.Duration) *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: dialUpstream(&net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
		}),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: headerTimeout,
		// The proxy negotiates and decodes content codings itself.
		DisableCompression: true,
	}
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// routes serves what is not under /v1/ (ServeHTTP in routes.go sends /v1/).
func (s *Server) routes() *mux.Router {
	r := mux.NewRouter()
	r.SkipClean(true) // paths go upstream as they came
	r.HandleFunc("/healthz", s.healthz).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/readyz", s.readyz).Methods(http.MethodGet, http.MethodHead)
	if s.cfg.Console != nil {
		r.PathPrefix("/admin/ui/").Handler(s.cfg.Console)
	}
	if s.cfg.Admin != nil {
		r.PathPrefix("/admin/").Handler(s.cfg.Admin)
	} else {
		r.PathPrefix("/admin/").HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			apierr.Write(w, http.StatusNotFound, "not_found_error", "the admin endpoints are disabled; start ctxproxy with CTXPROXY_ADMIN_TOKEN (or --admin-token) set to enable them")
		})
	}
	r.NotFoundHandler = http.HandlerFunc(notFound)
	return r
}

// passthrough relays every other /v1/ call untouched.
func (s *Server) passthrough(rt http.RoundTripper) http.Handler {
	base := s.cfg.Upstream
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(base)
			pr.Out.Host = base.Host
			// Keep the client's forwarding headers as they were: the proxy is
			// meant to be invisible.
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			s.cfg.Tracer.Inject(pr.Out.Context(), pr.Out.Header)
			if key := passthroughCaller(pr.In).upstreamKey; key != "" {
				upstreamreq.SetCredential(pr.Out.Header, upstreamreq.Key(key))
				// The reply is scrubbed of the key: it must come readable.
				pr.Out.Header.Set("Accept-Encoding", "identity")
			}
			if br := batchReadOf(pr.In.Context()); br != nil {
				pr.Out = br.prepare(pr.Out)
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			c := passthroughCaller(resp.Request)
			scrubReply(resp, c.upstreamKey)
			limits.HideUpstreamRatelimit(c.pol, resp.Header)
			s.observeBatch(resp)
			notePassError(resp)
			return nil
		},
		Transport:     rt,
		FlushInterval: -1, // flush at once: some /v1/ routes stream
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			status, msg := upstreamFailure(r.Context(), err)
			if status == 0 {
				return // the client went away
			}
			apierr.Write(w, status, "", msg)
		},
	}
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"status":"ok"}`))
}

// readyz is ready when policies are loaded, the upstream is set and the
// memory store answers.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	var problems []string
	if s.cfg.Policies.Current() == nil {
		problems = append(problems, "policies not loaded")
	}
	if s.cfg.Memory != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		err := s.cfg.Memory.Ready(ctx)
		cancel()
		if err != nil {
			problems = append(problems, "memory store unavailable: "+err.Error())
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if len(problems) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		b := append([]byte(`{"status":"not ready","reason":`), jsonstr.Append(nil, strings.Join(problems, "; "))...)
		w.Write(append(b, '}'))
		return
	}
	// Redacted, as the start-up log line: the URL may carry a password.
	b := append([]byte(`{"status":"ready","upstream":`), jsonstr.Append(nil, s.cfg.Upstream.Redacted())...)
	w.Write(append(b, '}'))
}

// NewHTTPServer wraps h in the http.Server ctxproxy listens with: bounded
// header and body read times (a slow-body client is cut off and cannot hold
// a connection forever), and no write timeout, since streams run long.
func NewHTTPServer(h http.Handler, log *zap.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
	}
}
