package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
)

// serveSideListeners opens the listeners beside the agents': --debug-addr
// (pprof, /debug/stats) and --metrics-addr (/metrics). /metrics is never on
// the agents' listener: it names every tenant, its spend and its caps, for
// Prometheus only. Without --metrics-addr it is on the debug listener, and
// without either it is not served. clock (--debug-manual-clock) moves the
// conversations' clock; nil: no such route. refresh reads the tenants'
// models now. stop closes what was opened.
func serveSideListeners(cfg *Settings, metrics, clock, refresh http.Handler, log, lifecycle *zap.Logger) (stop func(), err error) {
	var closers []func()
	stop = func() {
		for _, c := range closers {
			c()
		}
	}
	ownMetrics := cfg.MetricsAddr != "" && cfg.MetricsAddr != cfg.DebugAddr
	if cfg.DebugAddr != "" {
		h, serves := debugHandler(), "/debug/pprof/, /debug/stats"
		if !ownMetrics {
			h.Handle("GET /metrics", metrics)
			serves += ", /metrics"
		}
		h.Handle("POST /debug/models/refresh", refresh)
		serves += ", /debug/models/refresh"
		if clock != nil { // --debug-manual-clock
			h.Handle("POST /debug/clock", clock)
			serves += ", /debug/clock"
		}
		ln, err := serveSide("debug", cfg.DebugAddr, h, log)
		if err != nil {
			return stop, err
		}
		closers = append(closers, ln.close)
		lifecycle.Info("debug listening", zap.String("addr", ln.addr), zap.String("serves", serves))
		if !ln.loopback {
			lifecycle.Warn("the debug listener is not on loopback: whoever reaches it can read profiles of the requests", zap.String("addr", ln.addr))
		}
	}
	switch {
	case ownMetrics:
		h := http.NewServeMux()
		h.Handle("GET /metrics", metrics)
		ln, err := serveSide("metrics", cfg.MetricsAddr, h, log)
		if err != nil {
			stop()
			return func() {}, err
		}
		closers = append(closers, ln.close)
		lifecycle.Info("metrics listening", zap.String("addr", ln.addr), zap.String("serves", "/metrics"))
	case cfg.DebugAddr == "":
		lifecycle.Info("metrics not served: set --metrics-addr (CTXPROXY_METRICS_ADDR) for Prometheus to scrape /metrics")
	}
	return stop, nil
}

// sideListener is a listener serving beside the agents' one.
type sideListener struct {
	addr     string
	loopback bool
	close    func()
}

// serveSide serves h on addr (--name-addr) until close.
func serveSide(name, addr string, h http.Handler, log *zap.Logger) (sideListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return sideListener{}, fmt.Errorf("listen --%s-addr %s: %w", name, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: zap.NewStdLog(log.Named(name))}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error(name+" listener stopped", zap.Error(err))
		}
	}()
	return sideListener{addr: ln.Addr().String(), loopback: isLoopback(ln.Addr()), close: func() { srv.Close() }}, nil
}

// debugHandler serves what --debug-addr exposes: net/http/pprof under
// /debug/pprof/ and /debug/stats. It lives on its own listener, never the
// proxy's: profiles show the internals of tenants' requests.
func debugHandler() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("/debug/pprof/", pprof.Index)
	m.HandleFunc("/debug/pprof/cmdline", cmdline)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	m.HandleFunc("/debug/stats", serveStats)
	return m
}

// cmdline is pprof's /debug/pprof/cmdline without the secrets a command
// line may hold (redactArgs).
func cmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, strings.Join(redactArgs(os.Args), "\x00"))
}

// redactArgs is args with the value of --admin-token (-admin-token, =value
// or the next argument) replaced, and the password of every URL in them
// (--upstream, a postgres:// or redis:// store) masked as url.Redacted does.
func redactArgs(args []string) []string {
	out := slices.Clone(args)
	for i := 1; i < len(out); i++ {
		a := out[i]
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case !strings.HasPrefix(a, "-"):
			out[i] = redactURL(a)
		case name != "admin-token":
			if hasValue {
				out[i] = a[:len(a)-len(value)] + redactURL(value)
			}
		case hasValue:
			out[i] = a[:len(a)-len(value)] + redacted
		case i+1 < len(out):
			i++
			out[i] = redacted
		}
	}
	return out
}

// redactURL is s with its password masked when it is a URL that has one.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); !ok {
		return s
	}
	return u.Redacted()
}

const redacted = "[redacted]"

// debugStats is /debug/stats: exact live-memory numbers, which the
// Prometheus Go collector on /metrics only samples between collections.
type debugStats struct {
	Goroutines int    `json:"goroutines"`
	HeapInuse  uint64 `json:"heap_inuse"`
	HeapAlloc  uint64 `json:"heap_alloc"`
	StackInuse uint64 `json:"stack_inuse"`
	Sys        uint64 `json:"sys"`
	NumGC      uint32 `json:"num_gc"`
	// The heap marked live by the last collection, the goal of the next one
	// and what the scavenger has given back: a reader that must not disturb
	// the collector (no ?gc=1) sees the heap's state through these.
	HeapLive     uint64 `json:"heap_live"`
	HeapGoal     uint64 `json:"heap_goal"`
	HeapReleased uint64 `json:"heap_released"`
	// The runtime's estimate of the CPU time the collector has used so far.
	GCCPUSeconds float64 `json:"gc_cpu_seconds"`
}

// gcMetrics are the runtime/metrics samples behind HeapLive, HeapGoal,
// HeapReleased and GCCPUSeconds, in that order.
var gcMetrics = []string{"/gc/heap/live:bytes", "/gc/heap/goal:bytes", "/memory/classes/heap/released:bytes",
	"/cpu/classes/gc/total:cpu-seconds"}

// serveStats answers debugStats; with ?gc=1 it collects first, so the heap
// numbers are what is live.
func serveStats(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("gc") == "1" {
		runtime.GC()
		runtime.GC() // and what the first one's finalizers let go
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := debugStats{Goroutines: runtime.NumGoroutine(), HeapInuse: ms.HeapInuse,
		HeapAlloc: ms.HeapAlloc, StackInuse: ms.StackInuse, Sys: ms.Sys, NumGC: ms.NumGC}
	readGCMetrics(&st)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
}

// readGCMetrics reads gcMetrics into st; one this runtime does not know
// reads 0.
func readGCMetrics(st *debugStats) {
	s := make([]metrics.Sample, len(gcMetrics))
	for i, name := range gcMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	u := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	st.HeapLive, st.HeapGoal, st.HeapReleased = u(0), u(1), u(2)
	if s[3].Value.Kind() == metrics.KindFloat64 {
		st.GCCPUSeconds = s[3].Value.Float64()
	}
}

// isLoopback: addr is bound to a loopback address only.
func isLoopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
