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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/proxy"
)

// Every server under test runs in its own process, so each row's peak RSS
// is its own. ctxproxy is the real binary (built once per run, started with
// its own flags and --debug-addr for pprof and /debug/stats). The fake
// upstream and the bare proxy are the bench's own: this binary re-executed
// with the hidden first argument childArg. Such a child prints
// "READY <addr> <admin addr>" on stdout, serves until SIGTERM or until its
// stdin closes (the bench died), and serves the same debug paths as
// ctxproxy on the admin address.

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
	upstream := fs.String("upstream", "", "bare: upstream base URL")
	eventDelay := fs.Duration("event-delay", 0, "fake: delay between SSE events of a stream")
	events := fs.Int("events", 200, "fake: events per stream")
	pool := fs.Bool("pool", false, "bare: give the ReverseProxy a BufferPool")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var h http.Handler
	switch kind {
	case "fake":
		h = newBenchFake(*eventDelay, *events)
	case "bare":
		u, err := url.Parse(*upstream)
		if err != nil {
			return err
		}
		h = bareProxy(u, *pool)
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
	// The settings of cmd/ctxproxy's server (proxy.NewHTTPServer), with
	// errors to stderr.
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
	return nil
}

// childStats is what /debug/stats reports, the bench children's and
// ctxproxy's (--debug-addr) alike.
type childStats struct {
	Goroutines int    `json:"goroutines"`
	HeapInuse  uint64 `json:"heap_inuse"`
	HeapAlloc  uint64 `json:"heap_alloc"`
	StackInuse uint64 `json:"stack_inuse"`
	Sys        uint64 `json:"sys"`
	NumGC      uint32 `json:"num_gc"`
	// ctxproxy's only (runtime/metrics; 0 from the bench's own children):
	// live heap at the last GC, the next GC's goal, memory given back to the OS.
	HeapLive     uint64  `json:"heap_live"`
	HeapGoal     uint64  `json:"heap_goal"`
	HeapReleased uint64  `json:"heap_released"`
	GCCPUSeconds float64 `json:"gc_cpu_seconds"`
}

func adminMux(srv *http.Server) *http.ServeMux {
	m := http.NewServeMux()
	// /debug/closeidle drops the server's idle keep-alive connections, so a
	// growth check compares goroutines without connection-pool noise.
	m.HandleFunc("/debug/closeidle", func(w http.ResponseWriter, r *http.Request) {
		srv.SetKeepAlivesEnabled(false)
		srv.SetKeepAlivesEnabled(true)
	})
	m.HandleFunc("/debug/pprof/", pprof.Index)
	m.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	m.HandleFunc("/debug/stats", func(w http.ResponseWriter, r *http.Request) {
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
//   - with X-Bench-Memory: write instead, the round writes: it creates a
//     file of its own and deletes it (two versioned writes, and the
//     tenant's files stay as they were, however long the run);
//   - a streaming request gets one text block in events-6 deltas, each
//     carrying its send time, EventDelay apart;
//   - anything else a short text reply.
func newBenchFake(eventDelay time.Duration, events int) http.Handler {
	api := fakeapi.New(fakeapi.WithRecordLimit(1))
	chunks := max(events-6, 1) // message_start, ping, block start/stop, message_delta, message_stop
	stamped := strings.Repeat(stampPiece, chunks)
	reply := fakeapi.Text("Done. The handler tests pass again: the router now keeps the trailing slash, " +
		"and the two tests that depended on the old behaviour were updated accordingly.")
	var writes atomic.Int64
	api.SetResponder(func(r *fakeapi.Request) fakeapi.Reply {
		switch mem := r.Header.Get("X-Bench-Memory"); {
		case mem == "" || answersMemory(r):
		case mem == "write":
			path := fmt.Sprintf("/memories/bench-%d.md", writes.Add(1))
			return fakeapi.Reply{Content: []json.RawMessage{fakeapi.MemoryCreate(path, memoryNote), fakeapi.MemoryDelete(path)}}
		default:
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

// memoryNote is what a write round's file holds: a note of the size a
// model writes.
const memoryNote = "# Build notes\n\n- The router keeps the trailing slash since the handler refactor; " +
	"tests that assumed otherwise were updated.\n- Run `go test ./...` before committing; the race detector " +
	"catches the cache's map writes.\n"

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
// same upstream transport as ctxproxy; pooled, with the BufferPool a
// competent one sets (else it allocates a 32 KiB copy buffer per request).
func bareProxy(u *url.URL, pooled bool) http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = u.Host
		},
		Transport:     proxy.NewTransport(10 * time.Minute),
		FlushInterval: -1,
	}
	if pooled {
		rp.BufferPool = &bufferPool{}
	}
	return rp
}

// bufferPool is an httputil.BufferPool of 32 KiB copy buffers.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(v []byte) { b.p.Put(&v) }

// child is a running server process of the bench.
type child struct {
	name    string
	pid     int
	addr    string // host:port it serves on
	admin   string // host:port of pprof and /debug/stats
	errPath string // its stderr
	tree    bool   // a master and its worker processes (nginx): figures sum them all
	flush   func() // writes out buffered stderr, if any
	end     func() // stops it and waits
	once    sync.Once
}

// startChild starts one of the bench's own servers (runChild).
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
	c := &child{name: name, pid: cmd.Process.Pid, errPath: errf.Name(), flush: func() {}}
	c.end = func() {
		stdin.Close()
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		errf.Close()
	}
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

// startCtxproxy runs the ctxproxy binary bin as a user would, with args
// after its listening flags and env added to the bench's environment, and
// takes both addresses from its log.
func startCtxproxy(workDir, name, bin string, env []string, args ...string) (*child, error) {
	errf, err := os.Create(filepath.Join(workDir, name+".stderr"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(withoutCtxproxyEnv(os.Environ()), env...)
	dieWithParent(cmd)
	// Its log goes to the file in large writes, not a write(2) per line of
	// a row at --log-level=info, in this process that drives the load.
	w := &lockedWriter{w: bufio.NewWriterSize(errf, 64<<10)}
	p, err := binaries.Start(context.Background(), cmd, "ctxproxy listening", w)
	if err != nil {
		w.Flush()
		errf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.DropLog() // the file has it
	c := &child{name: name, pid: p.Pid(), addr: p.Addr, admin: p.Addrs["debug listening"], errPath: errf.Name(), flush: w.Flush}
	c.end = func() {
		p.Stop()
		w.Flush()
		errf.Close()
	}
	if c.admin == "" {
		c.stop()
		return nil, fmt.Errorf("%s logged no debug address: %s", name, c.stderrTail())
	}
	return c, nil
}

// withoutCtxproxyEnv drops CTXPROXY_* and OTEL_* variables, so only the
// bench's flags configure the proxy under test (an OTLP endpoint in the
// bench's environment would turn tracing on in every row).
func withoutCtxproxyEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "CTXPROXY_") && !strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	return out
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Flush()
}

func (c *child) url() string { return "http://" + c.addr }

func (c *child) stderrTail() string {
	c.flush()
	b, _ := os.ReadFile(c.errPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// stop ends the child and waits for it.
func (c *child) stop() { c.once.Do(c.end) }

// pids is the process and, for a process tree (nginx's master and its
// workers), its children: what the row's CPU and memory figures sum.
func (c *child) pids() []int {
	if !c.tree {
		return []int{c.pid}
	}
	return append([]int{c.pid}, childPids(c.pid)...)
}

// childPids lists pid's child processes: the kernel's children file of its
// main thread (where nginx's master forks its workers), else a scan of /proc.
func childPids(pid int) []int {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)); err == nil {
		var out []int
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
		return out
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields(n); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

// procStatus sums a field in kB of /proc/PID/status over the child's
// processes, in bytes.
func (c *child) procStatus(field string) int64 {
	var sum int64
	for _, pid := range c.pids() {
		sum += procStatusField(pid, field)
	}
	return sum
}

func procStatusField(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
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

// clockTick is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux the bench runs on (the kernel's ABI fixes it for user space).
const clockTick = 10 * time.Millisecond

// cpu is the user+system time the child's processes have used, from
// /proc/PID/stat (0 where there is none). A tree also counts what its root
// has reaped (cutime, cstime): a worker that exited mid-run still counts.
func (c *child) cpu() time.Duration {
	var sum time.Duration
	for _, pid := range c.pids() {
		sum += procCPU(pid, c.tree && pid == c.pid)
	}
	return sum
}

func procCPU(pid int, reaped bool) time.Duration {
	f := statFields(pid)
	if len(f) < 15 { // state is field 3; utime, stime, cutime, cstime are 14 to 17
		return 0
	}
	var ticks int64
	idx := []int{11, 12}
	if reaped {
		idx = append(idx, 13, 14)
	}
	for _, i := range idx {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick
}

// statFields are the fields of /proc/PID/stat after the command name, from
// the state (field 3) on; nil when the process is gone.
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	// The command name, in parentheses, may hold spaces: count fields after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// minorFaults is the process's minor page faults so far, from
// /proc/PID/stat (0 where there is none): a page the runtime gave back to
// the OS and touches again faults.
func (c *child) minorFaults() int64 {
	f := statFields(c.pid)
	if len(f) < 8 { // minflt is field 10, the 8th after the command
		return 0
	}
	n, _ := strconv.ParseInt(f[7], 10, 64)
	return n
}

func (c *child) hwm() int64 { return c.procStatus("VmHWM") }
func (c *child) rss() int64 { return c.procStatus("VmRSS") }

var adminClient = &http.Client{Timeout: 30 * time.Second}

func (c *child) closeIdle() {
	if c.admin == "" {
		return
	}
	if resp, err := adminClient.Get("http://" + c.admin + "/debug/closeidle"); err == nil {
		resp.Body.Close()
	}
}

func (c *child) stats(gc bool) (childStats, error) {
	var s childStats
	if c.admin == "" {
		return s, fmt.Errorf("%s serves no /debug/stats", c.name)
	}
	u := "http://" + c.admin + "/debug/stats"
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
