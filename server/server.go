// Package server builds a ctxproxy from its settings: it opens the stores
// (policies, memory, ledger, keys, limits, console sign-ins), starts tracing,
// the memory history's pruning, the policy watch and the side listeners
// (debug, metrics), and wires the proxy with its admin API and console.
// `ctxproxy serve`, `ctxproxy demo` and the test harness (package stack) all
// build it here, so the compat suites run the production wiring.
package server

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/pgurl"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/capabilities"
	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/proxy"
	"github.com/ctxproxy/ctxproxy/shadow"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// Settings say what to build; they are serve's flags (ctxproxy --help says
// what each means), already parsed.
type Settings struct {
	Upstream            string
	Policies            string
	MemoryDir           string
	MemoryStore         string // "" or "file": the file store in MemoryDir; or a postgres:// URL
	MaxBody             int64
	RequireKnownTenant  bool
	ForwardWhileReading bool
	Ledger              string
	Prices              string
	AdminToken          string
	MemoryAudit         string
	UpstreamTimeout     time.Duration
	StreamIdleTimeout   time.Duration
	DebugAddr           string
	MetricsAddr         string
	TrustedProxies      []netip.Prefix
	LimitsStore         string
	RatelimitStore      string
	DebugManualClock    bool
	// DebugNoCacheTracking: proxy.Config.NoCacheTracking (a benchmark aid).
	DebugNoCacheTracking bool

	Version string // the release, for the traces' service.version
	// Getenv reads the OTEL_* variables that turn tracing on; nil: os.Getenv.
	Getenv func(string) string
	// Log gets the request and error lines; Lifecycle the start-up lines
	// scripts wait for, at every level. nil: no logs.
	Log, Lifecycle *zap.Logger
}

// Server is a built ctxproxy, its stores open and its background work
// running. Handler serves the agents' listener; Close stops it all.
type Server struct {
	Handler  http.Handler
	Upstream *url.URL
	Policies *policy.Store
	Models   *capabilities.Cache
	Keys     *keys.Keyring
	Limits   *limits.Enforcer

	closers []func() // in the order Close runs them
}

// Open builds the server. On error what was opened is closed again.
func Open(ctx context.Context, cfg Settings) (_ *Server, err error) {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Lifecycle == nil {
		cfg.Lifecycle = zap.NewNop()
	}
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	cfg = cfg.withDefaults()
	log, lifecycle := cfg.Log, cfg.Lifecycle
	s := &Server{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	// onClose runs stop before what was opened earlier.
	onClose := func(stop func()) { s.closers = append([]func(){stop}, s.closers...) }

	up, err := url.Parse(cfg.Upstream)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return nil, fmt.Errorf("--upstream %q: want an http(s) URL", cfg.Upstream)
	}
	s.Upstream = up
	// The policies decide their edits from what the API says of each
	// tenant's models, read with the tenants' credentials (models.go).
	var pols *policy.Store
	var retiring *retiringWatch
	models := capabilities.New(capabilities.Options{Upstream: up, Log: log,
		Tenants:    func() []capabilities.Tenant { return modelTenants(pols.Current()) },
		OnRetiring: func(rs []capabilities.Retiring) { retiring.update(rs) }})
	pols, err = policy.NewStore(cfg.Policies, log, policy.WithModels(models))
	if err != nil {
		return nil, fmt.Errorf("load policies: %w", err)
	}
	s.Policies, s.Models = pols, models
	mem, closeMem, err := OpenMemoryStore(ctx, cfg.MemoryStore, cfg.MemoryDir, log)
	if err != nil {
		return nil, err
	}
	onClose(closeMem)

	pricesPath, pricesRequired := PricesFile(cfg.Policies, cfg.Prices)
	prices, err := tokens.OpenPrices(pricesPath, pricesRequired)
	if err != nil {
		return nil, fmt.Errorf("load prices: %w", err)
	}
	lifecycle.Info("prices", zap.String("table", prices.Describe(filepath.Base(pricesPath))))
	ledger, err := tokens.OpenLedger(ctx, cfg.Ledger)
	if err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	onClose(func() { ledger.Close() })
	metrics := tokens.NewMetrics(tenantNames(pols.Current()), prices.Models())
	metrics.SetShadowCandidates(shadowCandidates(pols.Current()))
	retiring = newRetiringWatch(metrics.Registry(), metrics.TenantLabel, log)
	onClose(seedModelUsage(ctx, ledger, models, lifecycle))
	onClose(startModels(ctx, models, lifecycle))
	rec := tokens.NewRecorder(prices.Prices, metrics, ledger, log)
	onClose(func() {
		// Flush queued ledger records before the ledger closes.
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rec.Close(cctx); err != nil {
			log.Error("flush ledger", zap.Error(err))
		}
	})
	ring, stopKeys, err := openKeyring(ctx, &cfg, log)
	if err != nil {
		return nil, fmt.Errorf("open key store: %w", err)
	}
	onClose(stopKeys)
	s.Keys = ring

	tracer, stopTracer, err := startTracing(ctx, &cfg, log, lifecycle)
	if err != nil {
		return nil, err
	}
	onClose(stopTracer)
	lim, closeLimits, err := openLimits(ctx, &cfg, prices.Prices, metrics, log)
	if err != nil {
		return nil, err
	}
	onClose(closeLimits)
	s.Limits = lim
	capsOf := func(ctx context.Context, tenant string) ([]tokens.CapRow, error) {
		return limits.Caps(ctx, lim.Store(), pols.Current(), tenant, time.Now())
	}

	memAPI, audit, stopMemAPI, err := memoryOperatorAPI(ctx, &cfg, mem, pols, ring, log)
	if err != nil {
		return nil, err
	}
	onClose(stopMemAPI)
	sessions, closeSessions, err := openConsoleSessions(ctx, &cfg, log)
	if err != nil {
		return nil, err
	}
	onClose(closeSessions)

	tracker, clock := cacheTracker(&cfg)
	// The policy lab: its own connections (never a client's), the tracker's clock for its
	// per-minute bound; closed before the recorder flushes, so its last lines are written.
	lab := shadow.New(shadow.Config{Upstream: up, Transport: proxy.NewTransport(shadow.DefaultTimeout),
		Recorder: rec, Metrics: metrics, Log: log, Now: tracker.Now})
	onClose(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		lab.Close(cctx)
	})
	srv, err := proxy.New(proxy.Config{
		Upstream:            up,
		Policies:            pols,
		Models:              models,
		Memory:              mem,
		MemoryAPI:           memAPI,
		Recorder:            rec,
		Metrics:             metrics,
		Tracer:              tracer,
		Admin:               adminHandler(&cfg, ledger, ring, pols, log, capsOf),
		Console:             consoleHandler(&cfg, consoleParts{mem: mem, audit: audit, ledger: ledger, ring: ring, pols: pols, metrics: metrics, caps: capsOf, limits: lim.Store(), sessions: sessions, models: models, prices: rec.CurrentPrices}, log),
		Keys:                ring,
		Limits:              lim,
		CacheTracker:        tracker,
		NoCacheTracking:     cfg.DebugNoCacheTracking,
		Lab:                 lab,
		Log:                 log,
		MaxBody:             cfg.MaxBody,
		ForwardWhileReading: cfg.ForwardWhileReading,
		RequireKnownTenant:  cfg.RequireKnownTenant,
		UpstreamTimeout:     cfg.UpstreamTimeout,
		StreamIdleTimeout:   cfg.StreamIdleTimeout,
	})
	if err != nil {
		return nil, err
	}
	s.Handler = srv

	// Reload policies, and with them the prices and the metrics' tenant
	// labels, when asked (Reload) and when a file in the folder changes.
	pols.OnReload(func(err error) {
		if err == nil {
			metrics.SetTenants(tenantNames(pols.Current()))
			metrics.SetShadowCandidates(shadowCandidates(pols.Current()))
		}
		reloadPrices(rec, lim, pricesPath, pricesRequired, log)
	})
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if err := pols.Watch(watchCtx); err != nil && watchCtx.Err() == nil {
			log.Error("policy watch stopped", zap.Error(err))
		}
	}()
	onClose(func() { stopWatch(); <-watched })

	stopSide, err := serveSideListeners(&cfg, metrics.Handler(), clock, refreshModels(models), log, lifecycle)
	if err != nil {
		return nil, err
	}
	onClose(stopSide)
	return s, nil
}

// Reload loads the policies again (SIGHUP); errors are logged by the store
// and the last good set stays.
func (s *Server) Reload() { s.Policies.Reload() }

// Close stops the background work and closes the stores, the ledger after
// its queued records are flushed. Stop serving Handler first. Calling it
// again does nothing.
func (s *Server) Close() {
	closers := s.closers
	s.closers = nil
	for _, c := range closers {
		c()
	}
}

// PricesFile is the prices file laid over the built-in table: --prices
// (required to exist), else prices.yaml in the policies folder (optional).
func PricesFile(policies, prices string) (path string, required bool) {
	if prices != "" {
		return prices, true
	}
	return filepath.Join(policies, policy.PricesFile), false
}

// reloadPrices loads the price table again; one that fails to load is
// refused with a log line and the last good table stays in force.
func reloadPrices(rec *tokens.Recorder, lim *limits.Enforcer, path string, required bool, log *zap.Logger) {
	tab, err := tokens.OpenPrices(path, required)
	if err != nil {
		// The file's base name only: logs carry no host paths.
		log.Error("prices reload refused; the last good prices stay in force", zap.String("file", filepath.Base(path)),
			zap.String("error", strings.ReplaceAll(err.Error(), path, filepath.Base(path))))
		return
	}
	rec.SetPrices(tab.Prices)
	lim.SetPrices(tab.Prices)
	log.Info("prices reloaded", zap.String("table", tab.Describe(filepath.Base(path))))
}

func tenantNames(set *policy.Set) []string {
	var names []string
	for _, p := range set.Tenants() {
		names = append(names, p.Tenant)
	}
	return names
}

// shadowCandidates is the names of every tenant's policy-lab candidates.
func shadowCandidates(set *policy.Set) map[string][]string {
	out := map[string][]string{}
	for _, p := range set.Tenants() {
		if p.Shadow == nil {
			continue
		}
		for _, c := range p.Shadow.Candidates {
			out[p.Tenant] = append(out[p.Tenant], c.Name)
		}
	}
	return out
}

// OpenMemoryStore picks the memory store (--memory-store): the file store in
// dir by default, or PostgreSQL for a postgres:// URL.
func OpenMemoryStore(ctx context.Context, spec, dir string, log *zap.Logger) (memoryhook.Store, func(), error) {
	switch {
	case spec == "" || spec == "file":
		fs, err := memoryhook.NewFileStore(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("open memory store %s: %w", dir, err)
		}
		return fs, func() {}, nil
	case pgurl.Is(spec):
		return openPGMemory(ctx, spec, log)
	}
	return nil, nil, fmt.Errorf("--memory-store %q: want file or a postgres:// URL", spec)
}
