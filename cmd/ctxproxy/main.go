// Command ctxproxy is a reverse proxy in front of Anthropic's Messages API
// that enforces per-tenant context editing and runs the memory tool.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/pgurl"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/proxy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// version is the release; the Helm chart's appVersion (deploy/helm/ctxproxy/Chart.yaml) is the
// same, and a test holds them equal. A build may set it with -ldflags "-X main.version=...".
var version = "0.1.0"

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) > 0 {
		switch args[0] {
		case "--version", "-version", "version":
			fmt.Fprintln(stdout, "ctxproxy", version)
			return 0
		case "migrate":
			return runMigrate(ctx, args[1:], stdout, stderr, getenv)
		case "validate":
			return runValidate(args[1:], stdout, stderr, getenv)
		case "report":
			return runReport(ctx, args[1:], stdout, stderr, getenv)
		case "keys":
			return runKeys(ctx, args[1:], stdout, stderr, getenv)
		case "memory":
			return runMemory(ctx, args[1:], stdout, stderr, getenv)
		case "demo":
			return runDemo(ctx, args[1:], stdout, stderr, getenv)
		case "help":
			printUsage(stdout)
			return 0
		case "serve":
			args = args[1:]
		default:
			// Serving is the default only without a command: a mistyped one
			// (ctxproxy reprot) must not start a server.
			if !strings.HasPrefix(args[0], "-") {
				fmt.Fprintf(stderr, "ctxproxy: unknown command %q\n\n", args[0])
				printUsage(stderr)
				return 2
			}
		}
	}
	cfg, _, err := parseConfig("ctxproxy", args, getenv, serveFlags)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "ctxproxy:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := serve(ctx, cfg, stderr, nil); err != nil {
		fmt.Fprintln(stderr, "ctxproxy:", err)
		return 1
	}
	return 0
}

func newLogger(level string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "time"
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	// Durations as "12.3ms", not bare seconds: a reader sees the unit.
	enc.EncodeDuration = zapcore.StringDurationEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(w), lvl)
	return zap.New(core), nil
}

// newServeLogger is newLogger with its writes buffered: one write(2) per
// request line is measurable under load. Lines reach w within a second, and
// at once on Sync; stop flushes and ends the flusher. lifecycle writes to
// the same buffer at every level: its listening lines are what scripts wait
// for, also under --log-level=warn.
func newServeLogger(level string, w io.Writer) (log, lifecycle *zap.Logger, stop func(), err error) {
	bw := &zapcore.BufferedWriteSyncer{WS: zapcore.AddSync(w), Size: 256 << 10, FlushInterval: time.Second}
	if log, err = newLogger(level, bw); err != nil {
		return nil, nil, nil, err
	}
	lifecycle, _ = newLogger("debug", bw)
	return log, lifecycle, func() { bw.Stop() }, nil
}

// serve runs the proxy until ctx is done, then stops gracefully. ready, when
// set, receives the listening address.
func serve(ctx context.Context, cfg *config, logOut io.Writer, ready chan<- string) error {
	log, lifecycle, stopLog, err := newServeLogger(cfg.LogLevel, logOut)
	if err != nil {
		return err
	}
	defer stopLog()
	if cfg.AdminTokenFlag {
		lifecycle.Warn("--admin-token is on the command line, where every local user can read it (ps, /proc/PID/cmdline); " +
			"set CTXPROXY_ADMIN_TOKEN in the environment instead")
	}
	up, err := url.Parse(cfg.Upstream)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return fmt.Errorf("--upstream %q: want an http(s) URL", cfg.Upstream)
	}
	pols, err := policy.NewStore(cfg.Policies, log)
	if err != nil {
		return fmt.Errorf("load policies: %w", err)
	}
	mem, closeMem, err := openMemoryStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeMem()
	if !pgurl.Is(cfg.MemoryStore) { // the file store: `ctxproxy memory` must not write it under us
		unlock, err := lockStore(storeLockPath(cfg.MemoryDir), false)
		if err != nil {
			return fmt.Errorf("memory store %s: %w (a `ctxproxy memory` command writing it?)", cfg.MemoryDir, err)
		}
		defer unlock()
	}

	pricesPath, pricesRequired := pricesFile(cfg)
	prices, err := tokens.OpenPrices(pricesPath, pricesRequired)
	if err != nil {
		return fmt.Errorf("load prices: %w", err)
	}
	lifecycle.Info("prices", zap.String("table", prices.Describe(filepath.Base(pricesPath))))
	ledger, err := tokens.OpenLedger(ctx, cfg.Ledger)
	if err != nil {
		return fmt.Errorf("open ledger: %w", err)
	}
	defer ledger.Close()
	metrics := tokens.NewMetrics(tenantNames(pols.Current()), prices.Models())
	rec := tokens.NewRecorder(prices.Prices, metrics, ledger, log)
	defer func() {
		// Flush queued ledger records before the ledger closes.
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rec.Close(cctx); err != nil {
			log.Error("flush ledger", zap.Error(err))
		}
	}()
	ring, stopKeys, err := openKeyring(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("open key store: %w", err)
	}
	defer stopKeys()

	tracer, stopTracer, err := startTracing(ctx, log, lifecycle)
	if err != nil {
		return err
	}
	defer stopTracer()
	lim, closeLimits, err := openLimits(ctx, cfg, prices.Prices, metrics, log)
	if err != nil {
		return err
	}
	defer closeLimits()
	capsOf := func(ctx context.Context, tenant string) ([]tokens.CapRow, error) {
		return limits.Caps(ctx, lim.Store(), pols.Current(), tenant, time.Now())
	}

	memAPI, audit, stopMemAPI, err := memoryOperatorAPI(ctx, cfg, mem, pols, ring, log)
	if err != nil {
		return err
	}
	defer stopMemAPI()
	sessions, closeSessions, err := openConsoleSessions(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeSessions()

	tracker, clock := cacheTracker(cfg)
	srv, err := proxy.New(proxy.Config{
		Upstream:            up,
		Policies:            pols,
		Memory:              mem,
		MemoryAPI:           memAPI,
		Recorder:            rec,
		Metrics:             metrics,
		Tracer:              tracer,
		Admin:               adminHandler(cfg, ledger, ring, pols, log, capsOf),
		Console:             consoleHandler(cfg, consoleParts{mem: mem, audit: audit, ledger: ledger, ring: ring, pols: pols, metrics: metrics, caps: capsOf, limits: lim.Store(), sessions: sessions}, log),
		Keys:                ring,
		Limits:              lim,
		CacheTracker:        tracker,
		Log:                 log,
		MaxBody:             cfg.MaxBody,
		ForwardWhileReading: cfg.ForwardWhileReading,
		RequireKnownTenant:  cfg.RequireKnownTenant,
		UpstreamTimeout:     cfg.UpstreamTimeout,
		StreamIdleTimeout:   cfg.StreamIdleTimeout,
	})
	if err != nil {
		return err
	}

	// Reload policies, and with them the prices and the metrics' tenant
	// labels, on SIGHUP and when a file in the folder changes.
	pols.OnReload(func(err error) {
		if err == nil {
			metrics.SetTenants(tenantNames(pols.Current()))
		}
		reloadPrices(rec, lim, pricesPath, pricesRequired, log)
	})
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		for {
			select {
			case <-hup:
				pols.Reload() // errors are logged by the store; the last good set stays
			case <-watchCtx.Done():
				return
			}
		}
	}()
	go func() {
		if err := pols.Watch(watchCtx); err != nil && watchCtx.Err() == nil {
			log.Error("policy watch stopped", zap.Error(err))
		}
	}()

	stopSide, err := serveSideListeners(cfg, metrics.Handler(), clock, log, lifecycle)
	if err != nil {
		return err
	}
	defer stopSide()
	if cfg.DebugPoisonBuffers {
		proxy.PoisonPooledBuffers(true)
		lifecycle.Warn("request-body buffers are poisoned as they go back to their pool (--debug-poison-buffers): a debugging aid, it costs a write of every large body")
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	hs := proxy.NewHTTPServer(srv, log)
	lifecycle.Info("ctxproxy listening", zap.String("addr", ln.Addr().String()), zap.String("upstream", up.Redacted()),
		zap.String("policies", cfg.Policies), zap.Int("tenants", len(pols.Current().Tenants())), zap.String("version", version),
		zap.String("limits_store", lim.SpendStoreName()), zap.String("ratelimit_store", lim.RateStoreName()))
	log.Sync() // the listening line is what scripts wait for
	if ready != nil {
		ready <- ln.Addr().String()
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down", zap.Duration("grace", cfg.ShutdownGrace))
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
		log.Warn("grace period over; open requests were cut", zap.Error(err))
	}
	return nil
}

// pricesFile is the prices file laid over the built-in table: --prices
// (required to exist), else prices.yaml in the policies folder (optional).
func pricesFile(cfg *config) (path string, required bool) {
	if cfg.Prices != "" {
		return cfg.Prices, true
	}
	return filepath.Join(cfg.Policies, policy.PricesFile), false
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

// openMemoryStore picks the memory store: the file store by default, or
// PostgreSQL for a postgres:// URL.
func openMemoryStore(ctx context.Context, cfg *config, log *zap.Logger) (memoryhook.Store, func(), error) {
	spec := cfg.MemoryStore
	switch {
	case spec == "" || spec == "file":
		fs, err := memoryhook.NewFileStore(cfg.MemoryDir)
		if err != nil {
			return nil, nil, fmt.Errorf("open memory store %s: %w", cfg.MemoryDir, err)
		}
		return fs, func() {}, nil
	case pgurl.Is(spec):
		return openPGMemory(ctx, spec, log)
	}
	return nil, nil, fmt.Errorf("--memory-store %q: want file or a postgres:// URL", spec)
}
