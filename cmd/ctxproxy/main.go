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
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/pgurl"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ctxproxy/ctxproxy/proxy"
	"github.com/ctxproxy/ctxproxy/server"
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
			if len(args) > 1 {
				fmt.Fprintf(stderr, "ctxproxy %s: unexpected argument %q\n", args[0], args[1])
				return 2
			}
			fmt.Fprintln(stdout, "ctxproxy", version)
			return 0
		case "migrate":
			return runMigrate(ctx, args[1:], stdout, stderr, getenv)
		case "validate":
			return runValidate(args[1:], stdout, stderr, getenv)
		case "report":
			return runReport(ctx, args[1:], stdout, stderr, getenv)
		case "advise":
			return runAdvise(ctx, args[1:], stdout, stderr, getenv)
		case "keys":
			return runKeys(ctx, args[1:], stdout, stderr, getenv)
		case "memory":
			return runMemory(ctx, args[1:], stdout, stderr, getenv)
		case "demo":
			return runDemo(ctx, args[1:], stdout, stderr, getenv)
		case "help":
			if len(args) > 1 {
				fmt.Fprintf(stderr, "ctxproxy help: unexpected argument %q (ctxproxy COMMAND -h shows a command's flags)\n", args[1])
				return 2
			}
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
	if !pgurl.Is(cfg.MemoryStore) { // the file store: `ctxproxy memory` must not write it under us
		unlock, err := lockStore(storeLockPath(cfg.MemoryDir), false)
		if err != nil {
			return fmt.Errorf("memory store %s: %w (a `ctxproxy memory` command writing it?)", cfg.MemoryDir, err)
		}
		defer unlock()
	}
	srv, err := server.Open(ctx, cfg.settings(log, lifecycle))
	if err != nil {
		return err
	}
	defer srv.Close()

	// Reload policies, and with them the prices and the metrics' tenant
	// labels, on SIGHUP (and, in server, when a file in the folder changes).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	hupCtx, stopHup := context.WithCancel(ctx)
	defer stopHup()
	go func() {
		for {
			select {
			case <-hup:
				srv.Reload()
			case <-hupCtx.Done():
				return
			}
		}
	}()

	if cfg.DebugPoisonBuffers {
		proxy.PoisonPooledBuffers(true)
		lifecycle.Warn("request-body buffers are poisoned as they go back to their pool (--debug-poison-buffers): a debugging aid, it costs a write of every large body")
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	hs := proxy.NewHTTPServer(srv.Handler, log)
	lifecycle.Info("ctxproxy listening", zap.String("addr", ln.Addr().String()), zap.String("upstream", srv.Upstream.Redacted()),
		zap.String("policies", cfg.Policies), zap.Int("tenants", len(srv.Policies.Current().Tenants())), zap.String("version", version),
		zap.String("limits_store", srv.Limits.SpendStoreName()), zap.String("ratelimit_store", srv.Limits.RateStoreName()))
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

// settings are the flags server.Open takes.
func (c *config) settings(log, lifecycle *zap.Logger) server.Settings {
	return server.Settings{
		Upstream:             c.Upstream,
		Policies:             c.Policies,
		MemoryDir:            c.MemoryDir,
		MemoryStore:          c.MemoryStore,
		MaxBody:              c.MaxBody,
		RequireKnownTenant:   c.RequireKnownTenant,
		ForwardWhileReading:  c.ForwardWhileReading,
		Ledger:               c.Ledger,
		Prices:               c.Prices,
		AdminToken:           c.AdminToken,
		MemoryAudit:          c.MemoryAudit,
		UpstreamTimeout:      c.UpstreamTimeout,
		StreamIdleTimeout:    c.StreamIdleTimeout,
		DebugAddr:            c.DebugAddr,
		MetricsAddr:          c.MetricsAddr,
		TrustedProxies:       c.TrustedProxies,
		LimitsStore:          c.LimitsStore,
		RatelimitStore:       c.RatelimitStore,
		DebugManualClock:     c.DebugManualClock,
		DebugNoCacheTracking: c.DebugNoCacheTracking,
		Version:              version,
		Log:                  log,
		Lifecycle:            lifecycle,
	}
}
