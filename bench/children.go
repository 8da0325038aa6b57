package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/http/pprof"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/proxy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// Every server under test runs in its own process (this binary re-executed
// with the hidden first argument childArg), so each row's peak RSS is its
// own. A child prints "READY <addr> <admin addr>" on stdout, serves until
// SIGTERM or until its stdin closes (the bench died), and serves pprof and
// /stats on the admin address.

const childArg = "__bench_child"

// stampMarker is replaced, at the moment the fake writes an event, by the
// wall-clock send time in nanoseconds (19 digits), so the client measures
// each event's delivery latency across processes.
var stampMarker = []byte("@@@@@@@@@@@@@@@@@@@")

const stampPiece = "t=@@@@@@@@@@@@@@@@@@@;"

func runChild(args []string) error {
	if len(args) == 0 {
		return errors.New("child kind missing")
	}
	kind, args := args[0], args[1:]
	fs := flag.NewFlagSet(kind, flag.ContinueOnError)
	upstream := fs.String("upstream", "", "upstream base URL")
	eventDelay := fs.Duration("event-delay", 0, "fake: delay between SSE events of a stream")
	events := fs.Int("events", 200, "fake: events per stream")
	policies := fs.String("policies", "", "ctxproxy: policy folder")
	memDir := fs.String("memory-dir", "", "ctxproxy: memory folder")
	ledger := fs.String("ledger", "", "ctxproxy: ledger spec")
	prices := fs.String("prices", "", "ctxproxy: prices file")
	logLevel := fs.String("log-level", "warn", "ctxproxy: log level")
	logFile := fs.String("log-file", "", "ctxproxy: log file (default stderr)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var h http.Handler
	var cleanup func()
	switch kind {
	case "fake":
		h = newBenchFake(*eventDelay, *events)
	case "bare":
		u, err := url.Parse(*upstream)
		if err != nil {
			return err
		}
		h = bareProxy(u)
	case "ctxproxy":
		var err error
		h, cleanup, err = newCtxproxy(*upstream, *policies, *memDir, *ledger, *prices, *logLevel, *logFile)
		if err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown child kind %q", kind)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	// The settings of cmd/ctxproxy's server, for every row alike.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 2 * time.Minute,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 1 << 20}
	admin := &http.Server{Handler: adminMux(srv), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	go admin.Serve(aln)
	fmt.Printf("READY %s %s\n", ln.Addr(), aln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { // the parent holds our stdin; EOF means it is gone
		io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	admin.Close()
	if cleanup != nil {
		cleanup()
	}
	return nil
}

// childStats is what /stats reports.
type childStats struct {
	Goroutines int    `json:"goroutines"`
	HeapInuse  uint64 `json:"heap_inuse"`
	HeapAlloc  uint64 `json:"heap_alloc"`
	StackInuse uint64 `json:"stack_inuse"`
	Sys        uint64 `json:"sys"`
	NumGC      uint32 `json:"num_gc"`
}

func adminMux(srv *http.Server) *http.ServeMux {
	m := http.NewServeMux()
	// /closeidle drops the server's idle keep-alive connections, so a growth
	// check compares goroutines without connection-pool noise.
	m.HandleFunc("/closeidle", func(w http.ResponseWriter, r *http.Request) {
		srv.SetKeepAlivesEnabled(false)
		srv.SetKeepAlivesEnabled(true)
	})
	m.HandleFunc("/debug/pprof/", pprof.Index)
	m.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	m.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("gc") == "1" {
			runtime.GC()
			runtime.GC()
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		json.NewEncoder(w).Encode(childStats{Goroutines: runtime.NumGoroutine(), HeapInuse: ms.HeapInuse,
			HeapAlloc: ms.HeapAlloc, StackInuse: ms.StackInuse, Sys: ms.Sys, NumGC: ms.NumGC})
	})
	return m
}

// newBenchFake is the fake upstream with the bench's script:
//   - a request with X-Bench-Memory: 1 whose last turn does not answer a
//     memory call gets one memory view call (memory proxy row: one memory
//     round per request);
//   - a streaming request gets one text block in events-6 deltas, each
//     carrying its send time, EventDelay apart;
//   - anything else a short text reply.
func newBenchFake(eventDelay time.Duration, events int) http.Handler {
	api := fakeapi.New(fakeapi.WithRecordLimit(1))
	chunks := max(events-6, 1) // message_start, ping, block start/stop, message_delta, message_stop
	stamped := strings.Repeat(stampPiece, chunks)
	reply := fakeapi.Text("Done. The handler tests pass again: the router now keeps the trailing slash, " +
		"and the two tests that depended on the old behaviour were updated accordingly.")
	api.SetResponder(func(r *fakeapi.Request) fakeapi.Reply {
		if r.Header.Get("X-Bench-Memory") == "1" && !answersMemory(r) {
			return fakeapi.Reply{Content: []json.RawMessage{fakeapi.MemoryView("/memories")}}
		}
		if r.Stream {
			d := eventDelay
			if r.Header.Get("X-Bench-Warmup") == "1" {
				d = 0
			}
			return fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text(stamped)}, TextChunks: chunks, EventDelay: d}
		}
		return fakeapi.Reply{Content: []json.RawMessage{reply}}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.ServeHTTP(&stampWriter{ResponseWriter: w}, r)
	})
}

// answersMemory: the last turn carries the result of a generated (memory) call.
func answersMemory(r *fakeapi.Request) bool {
	if len(r.Messages) == 0 {
		return false
	}
	last := gjson.ParseBytes(r.Messages[len(r.Messages)-1])
	found := false
	last.Get("content").ForEach(func(_, b gjson.Result) bool {
		if b.Get("type").Str == "tool_result" && strings.HasPrefix(b.Get("tool_use_id").Str, "toolu_fake_") {
			found = true
			return false
		}
		return true
	})
	return found
}

type stampWriter struct {
	http.ResponseWriter
	buf []byte
}

func (s *stampWriter) Write(p []byte) (int, error) {
	if bytes.Index(p, stampMarker) < 0 {
		return s.ResponseWriter.Write(p)
	}
	s.buf = append(s.buf[:0], p...)
	now := fmt.Appendf(nil, "%019d", time.Now().UnixNano())
	for b := s.buf; ; {
		i := bytes.Index(b, stampMarker)
		if i < 0 {
			break
		}
		copy(b[i:i+len(stampMarker)], now)
		b = b[i+len(stampMarker):]
	}
	return s.ResponseWriter.Write(s.buf)
}

func (s *stampWriter) Flush()                      { http.NewResponseController(s.ResponseWriter).Flush() }
func (s *stampWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// bareProxy is the floor for any Go proxy: httputil.ReverseProxy with the
// same upstream transport as ctxproxy.
func bareProxy(u *url.URL) http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = u.Host
		},
		Transport:     proxy.NewTransport(10 * time.Minute),
		FlushInterval: -1,
	}
}

// newCtxproxy builds ctxproxy as cmd/ctxproxy's serve does: policy store,
// file memory store, prices, ledger, metrics and recorder.
func newCtxproxy(upstream, polDir, memDir, ledgerSpec, pricesPath, level, logFile string) (http.Handler, func(), error) {
	var out zapcore.WriteSyncer = zapcore.AddSync(os.Stderr)
	var f *os.File
	if logFile != "" {
		var err error
		if f, err = os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return nil, nil, err
		}
		out = zapcore.AddSync(f)
	}
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, nil, err
	}
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "time"
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), out, lvl))
	up, err := url.Parse(upstream)
	if err != nil {
		return nil, nil, err
	}
	pols, err := policy.NewStore(polDir, log)
	if err != nil {
		return nil, nil, fmt.Errorf("load policies: %w", err)
	}
	mem, err := memoryhook.NewFileStore(memDir)
	if err != nil {
		return nil, nil, fmt.Errorf("memory store: %w", err)
	}
	var prices *tokens.Prices
	if pricesPath != "" {
		if prices, err = tokens.LoadPrices(pricesPath); err != nil {
			return nil, nil, fmt.Errorf("load prices: %w", err)
		}
	}
	ledger, err := tokens.OpenLedger(context.Background(), ledgerSpec)
	if err != nil {
		return nil, nil, fmt.Errorf("open ledger: %w", err)
	}
	var names []string
	for _, p := range pols.Current().Tenants() {
		names = append(names, p.Tenant)
	}
	metrics := tokens.NewMetrics(names, prices.Models())
	rec := tokens.NewRecorder(prices, metrics, ledger, log)
	srv, err := proxy.New(proxy.Config{Upstream: up, Policies: pols, Memory: mem, Recorder: rec, Metrics: metrics, Log: log})
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		rec.Close(ctx)
		cancel()
		ledger.Close()
		log.Sync()
		if f != nil {
			f.Close()
		}
	}
	return srv, cleanup, nil
}

// child is a running server process of the bench.
type child struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string // host:port it serves on
	admin string // host:port of pprof and /stats
	errf  *os.File
	once  sync.Once
}

func startChild(workDir, name string, args ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	errf, err := os.Create(filepath.Join(workDir, name+".stderr"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, append([]string{childArg}, args...)...)
	cmd.Stderr = errf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, stdin: stdin, errf: errf}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if t := sc.Text(); strings.HasPrefix(t, "READY ") {
				line <- t
			}
		}
		close(line)
	}()
	select {
	case l, ok := <-line:
		f := strings.Fields(l)
		if !ok || len(f) != 3 {
			c.stop()
			return nil, fmt.Errorf("%s did not start: %s", name, c.stderrTail())
		}
		c.addr, c.admin = f[1], f[2]
	case <-time.After(30 * time.Second):
		c.stop()
		return nil, fmt.Errorf("%s did not start within 30s: %s", name, c.stderrTail())
	}
	return c, nil
}

func (c *child) url() string { return "http://" + c.addr }

func (c *child) stderrTail() string {
	b, _ := os.ReadFile(c.errf.Name())
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// stop ends the child (SIGTERM, then SIGKILL after 5s) and waits for it.
func (c *child) stop() {
	c.once.Do(func() {
		c.stdin.Close()
		c.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { c.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			c.cmd.Process.Kill()
			<-done
		}
		c.errf.Close()
	})
}

// procStatus reads a field in kB of /proc/PID/status, in bytes.
func (c *child) procStatus(field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field+":") {
			f := strings.Fields(l[len(field)+1:])
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

func (c *child) hwm() int64 { return c.procStatus("VmHWM") }
func (c *child) rss() int64 { return c.procStatus("VmRSS") }

var adminClient = &http.Client{Timeout: 30 * time.Second}

func (c *child) closeIdle() {
	if resp, err := adminClient.Get("http://" + c.admin + "/closeidle"); err == nil {
		resp.Body.Close()
	}
}

func (c *child) stats(gc bool) (childStats, error) {
	var s childStats
	u := "http://" + c.admin + "/stats"
	if gc {
		u += "?gc=1"
	}
	resp, err := adminClient.Get(u)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// saveProfile fetches /debug/pprof/<what> into path.
func (c *child) saveProfile(ctx context.Context, what, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.admin+"/debug/pprof/"+what, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof %s: %s", what, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
