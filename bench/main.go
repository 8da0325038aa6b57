// Command bench measures what ctxproxy costs next to a bare reverse proxy
// . It starts the fake upstream and, one after another in the same
// run, drives the same load at the fake directly, a bare
// httputil.ReverseProxy, and ctxproxy with three tenants (policy off;
// enforcing edits and injecting the memory tool; memory proxy mode with one
// memory call per request), nginx when it is installed, and what caps,
// tracing and memory history cost, then prints one markdown
// table.
//
//	go run ./bench -quick            # a minute or two
//	go run ./bench -out bench/RESULTS.md
//	go run ./bench -long             # 5-minute goroutine/memory growth run, then the after-burst check
//	go run ./bench -pprof /tmp/prof  # CPU and alloc profiles of every proxy cell
//
// Every server under test runs as its own process, started fresh for each
// row and load, so peak RSS (VmHWM) is that server's alone: ctxproxy is the
// real binary, built once per run and started with its own flags; the fake
// upstream and the bare proxy are this binary re-executed; nginx is the
// system's, with a config of the bench's. Load generation is in this
// process: a bounded worker pool on one shared http.Transport, all on
// 127.0.0.1.
package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/policy"
)

type config struct {
	quick       bool
	duration    time.Duration
	concurrency int
	largeConc   int
	smallSize   int
	largeSize   int
	largeTurns  int
	streams     int
	events      int
	eventDelay  time.Duration
	long        bool
	longDur     time.Duration
	out         string
	pprofDir    string
	rows        string
	loads       string
	keep        bool
	repeat      int

	reports      string // time the reports on this ledger instead of the table
	reportsMonth string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == childArg {
		if err := runChild(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			os.Exit(1)
		}
		return
	}
	var c config
	flag.BoolVar(&c.quick, "quick", false, "short phases (1 s per row and load): the whole run takes a minute or two")
	flag.DurationVar(&c.duration, "duration", 8*time.Second, "length of each throughput phase (the unloaded latency phase is half)")
	flag.IntVar(&c.concurrency, "concurrency", 32, "workers of the small-body throughput phase")
	flag.IntVar(&c.largeConc, "large-concurrency", 8, "workers of the large-body throughput phase (each holds a 1 MB body)")
	flag.IntVar(&c.smallSize, "small-size", 2048, "bytes of the small request body")
	flag.IntVar(&c.largeSize, "large-size", 1<<20, "bytes of the large request body (a tool transcript)")
	flag.IntVar(&c.largeTurns, "large-turns", 200, "messages of the large transcript after the first user turn")
	flag.IntVar(&c.streams, "streams", 500, "concurrent streaming requests of the streams load")
	flag.IntVar(&c.events, "events", 200, "SSE events per stream")
	flag.DurationVar(&c.eventDelay, "event-delay", 20*time.Millisecond, "the fake's delay between the events of a stream")
	flag.BoolVar(&c.long, "long", false, "run the growth check instead of the table: ctxproxy under mixed load for -long-duration, "+
		"then a burst of -streams streams and its one-connection latency against a fresh copy for -long-duration/2 (30 s–150 s)")
	flag.DurationVar(&c.longDur, "long-duration", 5*time.Minute, "length of the -long run")
	flag.StringVar(&c.out, "out", "", "also write the markdown to this file")
	flag.StringVar(&c.pprofDir, "pprof", "", "save CPU and alloc profiles of the proxy processes into this folder")
	flag.StringVar(&c.rows, "rows", "", "comma-separated row ids to run (default all but the opt-in 4cp and 4cr, which need PostgreSQL and Redis: "+
		"1,1r,2,2p,3,4,5,4i,4c,N,5i,5p,5t,4c0,4t0,4t,5h0,5w,5h; N needs nginx and is skipped without it)")
	flag.StringVar(&c.loads, "loads", "", "comma-separated loads to run (default all: small,large,streams)")
	flag.BoolVar(&c.keep, "keep", false, "keep the work folder (logs, ledgers, policies)")
	flag.IntVar(&c.repeat, "repeat", 1, "run every load this many times, each run with fresh processes, and report each cell's median (the machine is shared)")
	flag.StringVar(&c.reports, "reports", "", "time the month's reports (CLI, /admin/report, console Tenants page) on this ledger, "+
		"filled by go run ./bench/ledgergen (file:PATH or postgres://…), instead of the table")
	flag.StringVar(&c.reportsMonth, "reports-month", time.Now().UTC().Format("2006-01"), "the month -reports sums (YYYY-MM)")
	flag.Parse()
	if c.quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["duration"] {
			c.duration = time.Second
		}
		if !set["long-duration"] {
			c.longDur = 40 * time.Second
		}
	}
	md, err := run(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Print(md)
	if c.out != "" {
		if err := os.WriteFile(c.out, []byte(md), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
}

// Tenants of the run, one API key each.
const (
	keyOff     = "sk-ant-bench-policy-off"
	keyEnforce = "sk-ant-bench-enforce"
	keyMemory  = "sk-ant-bench-memory-proxy"
	keyLimited = "sk-ant-bench-limited"
	// keyNoHistory is row 5's memory proxy tenant with memory.history off.
	keyNoHistory = "sk-ant-bench-memory-no-history"
	// keyShadow is row 4's tenant with the policy lab measuring two candidates on 5% of its
	// requests (row 4s); keyShadowBounded the same with max_per_minute 1, so the lab makes
	// (almost) none of its calls: what the lab costs the request path alone (row 4s0).
	keyShadow        = "sk-ant-bench-shadow"
	keyShadowBounded = "sk-ant-bench-shadow-bounded"
)

// shadowPolicy is the policy lab of rows 4s and 4s0 at sample 0.05 (%d: max_per_minute).
const shadowPolicy = `shadow:
  sample: 0.05
  max_per_minute: %d
  candidates:
    - name: keep-5-at-80k
      context_management:
        mode: enforce
        clear_tool_uses: { trigger: { type: input_tokens, value: 80000 }, keep: { type: tool_uses, value: 5 } }
    - name: no-edits
      context_management: { mode: off }
`

// limitsPolicy gives row 4's tenant spend caps and per-minute limits far above what a run
// spends, so every request is checked, held and settled and none is refused.
const limitsPolicy = `limits:
  spend: [{ period: daily, usd: 1000000000 }, { period: monthly, usd: 1000000000 }]
  per_user_spend: [{ period: daily, usd: 1000000000 }]
  requests_per_minute: 1000000000
  input_tokens_per_minute: 1000000000
`

// benchPG and benchRedis are the stores of the opt-in rows 4cp and 4cr (CTXPROXY_BENCH_PG,
// CTXPROXY_BENCH_REDIS override them).
func benchPG() string {
	if u := os.Getenv("CTXPROXY_BENCH_PG"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

func benchRedis() string {
	if u := os.Getenv("CTXPROXY_BENCH_REDIS"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

const cmEdits = `context_management:
  mode: enforce
  clear_thinking:
    keep: all
  clear_tool_uses:
    trigger: { type: input_tokens, value: 100000 }
    keep: { type: tool_uses, value: 3 }
    clear_at_least: { type: input_tokens, value: 5000 }
`

// benchPolicies are the tenants of every ctxproxy row. No tenant has spend
// caps or rate limits here: those are in capsPolicies, the folder of the
// rows that measure them (a deployment with caps for no one is "off").
func benchPolicies() map[string]string {
	return map[string]string{
		"default.yaml": "tenant: default\ncontext_management:\n  mode: off\nmemory:\n  mode: off\n",
		"off.yaml": "tenant: off\napi_keys_sha256: [\"" + sha(keyOff) + "\"]\n" +
			"context_management:\n  mode: off\nmemory:\n  mode: off\n",
		"enforce.yaml": "tenant: enforce\napi_keys_sha256: [\"" + sha(keyEnforce) + "\"]\n" + cmEdits +
			"memory:\n  mode: inject\n",
		"memory.yaml": "tenant: memory\napi_keys_sha256: [\"" + sha(keyMemory) + "\"]\n" + cmEdits +
			"memory:\n  mode: proxy\n  max_iterations: 10\n",
		"memory-nohist.yaml": "tenant: memory-nohist\napi_keys_sha256: [\"" + sha(keyNoHistory) + "\"]\n" + cmEdits +
			"memory:\n  mode: proxy\n  max_iterations: 10\n  history:\n    keep_days: 0\n",
		"shadow.yaml": "tenant: shadow\napi_keys_sha256: [\"" + sha(keyShadow) + "\"]\n" + cmEdits +
			"memory:\n  mode: inject\n" + fmt.Sprintf(shadowPolicy, 1_000_000),
		"shadow-bounded.yaml": "tenant: shadow-bounded\napi_keys_sha256: [\"" + sha(keyShadowBounded) + "\"]\n" + cmEdits +
			"memory:\n  mode: inject\n" + fmt.Sprintf(shadowPolicy, 1),
	}
}

// capsPolicies are benchPolicies plus a tenant with caps and limits.
func capsPolicies() map[string]string {
	p := benchPolicies()
	p["limited.yaml"] = "tenant: limited\napi_keys_sha256: [\"" + sha(keyLimited) + "\"]\n" + cmEdits +
		"memory:\n  mode: inject\n" + limitsPolicy
	return p
}

type rowSpec struct {
	id, name string
	kind     string // direct | bare | nginx | ctxproxy
	pool     bool   // bare: with a BufferPool
	key      string
	memory   bool
	write    bool   // memory: each round writes (create + delete) instead of viewing
	caps     bool   // ctxproxy: the policies folder with a capped tenant (capsPolicies)
	sampler  string // ctxproxy: tracing on, exported to the bench's OTLP sink, with this OTEL_TRACES_SAMPLER
	logLevel string
	loads    []string // nil: all
	// rewritten: send the body and headers as row 4's policy rewrites them
	// (the upstream's own share of row 4's cost).
	rewritten bool
	// thinking: the load's body with extended thinking on and thinking blocks in its
	// transcript (thinkingBody).
	thinking bool
	args     []string // more ctxproxy flags
	optIn    bool     // run only when -rows names it (it needs a service)
}

var allRows = []rowSpec{
	{id: "1", name: "fake upstream, direct", kind: "direct", key: keyEnforce},
	{id: "1r", name: "fake direct, body as row 4 rewrites it", kind: "direct", key: keyEnforce, rewritten: true, loads: []string{"small", "large"}},
	{id: "2", name: "bare httputil.ReverseProxy, no BufferPool (the \"bare\" of earlier runs)", kind: "bare", key: keyEnforce},
	{id: "2p", name: "bare httputil.ReverseProxy + BufferPool", kind: "bare", pool: true, key: keyEnforce},
	{id: "3", name: "ctxproxy, policy off", kind: "ctxproxy", key: keyOff},
	{id: "4", name: "ctxproxy, enforce edits + inject memory tool", kind: "ctxproxy", key: keyEnforce},
	{id: "5", name: "ctxproxy, memory proxy (1 memory call/request)", kind: "ctxproxy", key: keyMemory, memory: true},
	{id: "4i", name: "ctxproxy as 4, --log-level=info", kind: "ctxproxy", key: keyEnforce, logLevel: "info", loads: []string{"small"}},
	// Enforcement cost: row 4 plus spend caps (tenant and per-user) and per-minute
	// limits on every request, with the counters in each store.
	{id: "4c", name: "ctxproxy as 4 + caps and rate limits, in memory", kind: "ctxproxy", key: keyLimited, loads: []string{"small"},
		caps: true, args: []string{"--limits-store", "memory"}},
	{id: "4cp", name: "ctxproxy as 4c, counters and limiter in PostgreSQL", kind: "ctxproxy", key: keyLimited, loads: []string{"small"},
		optIn: true, caps: true, args: []string{"--limits-store", "PG"}},
	{id: "4cr", name: "ctxproxy as 4cp, limiter in Redis", kind: "ctxproxy", key: keyLimited, loads: []string{"small"},
		optIn: true, caps: true, args: []string{"--limits-store", "PG", "--ratelimit-store", "REDIS"}},
	// The third proxy: nginx in front of the same fake (the name is
	// set at run time with its version and workers; skipped without nginx).
	{id: "N", name: "nginx proxy_pass, keepalive, buffering off", kind: "nginx", key: keyEnforce},
	// Row 4's comparisons: the bare proxy and nginx fed the body as row 4's
	// policy rewrites it, so the upstream behind them does the same work as
	// behind row 4 (a body with context_management costs the fake more, row
	// 1r / row 1, and it shares the machine).
	{id: "2pr", name: "bare httputil.ReverseProxy + BufferPool, body as row 4 rewrites it", kind: "bare", pool: true, key: keyEnforce,
		rewritten: true, loads: []string{"small", "large"}},
	{id: "Nr", name: "nginx as N, body as row 4 rewrites it", kind: "nginx", key: keyEnforce, rewritten: true, loads: []string{"small", "large"}},
	// The memory round target: row 5 with its request log, which
	// says how long each request waited on the upstream.
	{id: "5i", name: "ctxproxy as 5, --log-level=info (its own time per memory round, from the request log)", kind: "ctxproxy",
		key: keyMemory, memory: true, logLevel: "info", loads: []string{"small", "large"}},
	// Memory proxy mode's own cost on a long transcript: the tenant of row 5, the reply a
	// plain answer (no memory call), against the pooled bare proxy; row 5 on the large load
	// is the same with one memory call, 5i large its own time per round.
	{id: "5p", name: "ctxproxy, memory proxy, the reply a plain answer (no memory call)", kind: "ctxproxy", key: keyMemory,
		loads: []string{"small", "large"}},
	// Memory proxy mode with thinking on: row 5p's request with thinking enabled and every
	// assistant turn of the transcript thinking, every tenth shaped as a memory loop's merged
	// message (a thinking block after its first): the hidden rounds' lookup (hiddenrounds.go).
	{id: "5t", name: "ctxproxy as 5p, thinking on (the transcript's hidden rounds looked up)", kind: "ctxproxy", key: keyMemory,
		loads: []string{"small", "large"}, thinking: true},
	// Feature cost: each feature configured but not triggered,
	// then active, beside the row that has it off (4, or 5 for memory).
	// The conversation lookup: row 4 tracks each clearing conversation's previous call;
	// 4n is the same load with tracking off.
	{id: "4n", name: "ctxproxy as 4, --debug-no-cache-tracking (no conversation lookup)", kind: "ctxproxy", key: keyEnforce,
		loads: []string{"small", "large"}, args: []string{"--debug-no-cache-tracking"}},
	// The policy lab at sample 0.05: 4s makes its count_tokens calls (the lab's own work is
	// 4s − 4s0), 4s0 samples and copies the same requests but its max_per_minute of 1 drops
	// (nearly) every call: the client-facing cost, against row 4.
	{id: "4s", name: "ctxproxy as 4 + shadow: 2 candidates at sample 0.05 (the lab's calls made)", kind: "ctxproxy", key: keyShadow,
		loads: []string{"small", "large"}},
	{id: "4s0", name: "ctxproxy as 4s, max_per_minute 1: sampled and copied, (nearly) no lab call made (client-facing cost)", kind: "ctxproxy",
		key: keyShadowBounded, loads: []string{"small", "large"}},
	{id: "4c0", name: "ctxproxy as 4, caps and rate limits configured for another tenant only", kind: "ctxproxy", key: keyEnforce,
		loads: []string{"small"}, caps: true},
	{id: "4t0", name: "ctxproxy as 4, tracing configured (OTLP/HTTP), sampler always_off", kind: "ctxproxy", key: keyEnforce,
		loads: []string{"small"}, sampler: "always_off"},
	{id: "4t", name: "ctxproxy as 4, tracing on: every request sampled and exported (OTLP/HTTP)", kind: "ctxproxy", key: keyEnforce,
		loads: []string{"small"}, sampler: "always_on"},
	{id: "4f", name: "ctxproxy as 4, --forward-while-reading (a large body goes upstream while it arrives)", kind: "ctxproxy",
		key: keyEnforce, loads: []string{"large"}, args: []string{"--forward-while-reading"}},
	{id: "5h0", name: "ctxproxy as 5, memory.history off (keep_days: 0)", kind: "ctxproxy", key: keyNoHistory, memory: true,
		loads: []string{"small"}},
	{id: "5w", name: "ctxproxy as 5h0 (history off), each round writes: create + delete a file", kind: "ctxproxy", key: keyNoHistory,
		memory: true, write: true, loads: []string{"small"}},
	{id: "5h", name: "ctxproxy as 5 (history on, the default), each round writes: create + delete a file", kind: "ctxproxy",
		key: keyMemory, memory: true, write: true, loads: []string{"small"}},
}

// profiled: the row's server serves pprof and is profiled with -pprof (the
// fake and nginx are not).
func profiled(row rowSpec) bool { return row.kind == "bare" || row.kind == "ctxproxy" }

var allLoads = []string{"small", "large", "streams"}

// cell is one row under one load.
type cell struct {
	row  rowSpec
	load string
	err  error

	rps               float64
	n, errs           int
	loadP50, loadP99  time.Duration // at -concurrency
	p50, p99          time.Duration // unloaded (concurrency 1); streams: event delivery latency
	ttfb50, ttfb99    time.Duration
	hwm               int64
	cpu               time.Duration // the server's user+system time over the measured requests
	cpuN              int           // the requests (streams) that time served
	mach              machineTimes  // the whole machine's CPU over the throughput phase (n requests)
	fakeCPU           time.Duration // the fake upstream's CPU over the throughput phase (n requests)
	memPerStream      int64         // RSS growth per open stream
	heapPerStream     int64         // heap+stack growth per open stream
	goroutinesPerOpen float64
	eventsPer         int
	completed         int

	tag     string // the servers' name in the work folder (and the OTLP sink's path)
	workers int    // nginx: its worker processes
	// The proxy's own time (rows at --log-level=info, from the request
	// log): per memory round when perRound (the rounds' own work), else per
	// request; ownOneWhole per round as the runs before measured it (the
	// request's whole own time ÷ its rounds, one worker).
	perRound          bool
	ownLoaded, ownOne ownTime
	ownOneWhole       ownTime
	ownErr            error
}

type runner struct {
	c       config
	work    string
	polDir  string // benchPolicies
	capsDir string // capsPolicies
	bin     string // the ctxproxy binary
	nginx   string // the nginx binary ("" when there is none)
	skipped []string
	sink    *otlpSink // the tracing rows' collector (nil when none runs)
	bodies  map[string][]byte
	cells   []*cell
	started time.Time
}

func run(c config) (string, error) {
	r := &runner{c: c, started: time.Now()}
	var err error
	if r.work, err = os.MkdirTemp("", "ctxproxy-bench-"); err != nil {
		return "", err
	}
	if !c.keep {
		defer os.RemoveAll(r.work)
	} else {
		fmt.Fprintln(os.Stderr, "work folder:", r.work)
	}
	r.polDir, r.capsDir = filepath.Join(r.work, "policies"), filepath.Join(r.work, "policies-caps")
	if err := writePolicies(r.polDir, benchPolicies()); err != nil {
		return "", err
	}
	if err := writePolicies(r.capsDir, capsPolicies()); err != nil {
		return "", err
	}
	// The rows measure the real binary, built once for the run.
	r.bin = filepath.Join(r.work, "ctxproxy")
	fmt.Fprintln(os.Stderr, "building ctxproxy")
	if err := binaries.Build(context.Background(), r.bin, binaries.Ctxproxy, false); err != nil {
		return "", err
	}
	if c.pprofDir != "" {
		if err := os.MkdirAll(c.pprofDir, 0o755); err != nil {
			return "", err
		}
	}
	if c.long {
		return r.longRun()
	}
	if c.reports != "" {
		return r.reportsRun()
	}
	r.bodies = map[string][]byte{
		"small":   smallBody(c.smallSize, false),
		"large":   largeBody(c.largeSize, c.largeTurns, false),
		"streams": smallBody(c.smallSize, true),
	}
	rows, err := r.prepare(pick(allRows, c.rows))
	if err != nil {
		return "", err
	}
	if r.sink != nil {
		defer r.sink.close()
	}
	loads := allLoads
	if c.loads != "" {
		loads = strings.Split(c.loads, ",")
	}
	micro := r.microRewrite()
	for _, load := range loads {
		var lrows []rowSpec
		for _, row := range rows {
			if row.loads == nil || contains(row.loads, load) {
				lrows = append(lrows, row)
			}
		}
		if load != "streams" {
			// Each run starts every row's processes afresh: one process can sit 20 µs
			// from another of the same row at one connection, which interleaving in
			// time cannot even out.
			runs := make([][]*cell, len(lrows))
			for rep := range max(c.repeat, 1) {
				fmt.Fprintf(os.Stderr, "[%5.1fs] run %d of load %s\n", time.Since(r.started).Seconds(), rep+1, load)
				for i, cl := range r.interleaved(lrows, load) {
					runs[i] = append(runs[i], cl)
				}
			}
			for _, cs := range runs {
				r.cells = append(r.cells, medianOfRuns(cs))
			}
			continue
		}
		// Streams: whole waves, rows in turn, -repeat times; each cell's median.
		runs := map[string][]*cell{}
		for rep := range max(c.repeat, 1) {
			for _, row := range lrows {
				fmt.Fprintf(os.Stderr, "[%5.1fs] run %d: row %s (%s), load %s\n", time.Since(r.started).Seconds(), rep+1, row.id, row.name, load)
				cl := r.runCell(row, load)
				if cl.err != nil {
					fmt.Fprintf(os.Stderr, "  error: %v\n", cl.err)
				}
				runs[row.id] = append(runs[row.id], cl)
			}
		}
		for _, row := range lrows {
			if cs := runs[row.id]; len(cs) > 0 {
				r.cells = append(r.cells, median(cs))
			}
		}
	}
	return r.markdown(micro), nil
}

// median is the run whose main number is the median: req/s, or for
// streams the event p99. Failed runs count only when all failed.
func median(cs []*cell) *cell {
	ok := succeeded(cs)
	if len(ok) == 0 {
		return cs[0]
	}
	slices.SortFunc(ok, func(a, b *cell) int {
		if a.load == "streams" {
			return cmp.Compare(a.p99, b.p99)
		}
		return cmp.Compare(a.rps, b.rps)
	})
	return ok[len(ok)/2]
}

// succeeded is the runs of cs that did not fail, in a new slice.
func succeeded(cs []*cell) []*cell {
	var ok []*cell
	for _, c := range cs {
		if c.err == nil {
			ok = append(ok, c)
		}
	}
	return ok
}

// medianOfRuns merges one row's runs of an interleaved load: the run with the
// median req/s, with the median of the runs' unloaded p50 and p99 and CPU per
// request, each taken on its own.
func medianOfRuns(cs []*cell) *cell {
	m := *median(cs)
	ok := succeeded(cs)
	if len(ok) < 2 {
		return &m
	}
	mid := func(key func(*cell) time.Duration) *cell {
		slices.SortFunc(ok, func(a, b *cell) int { return cmp.Compare(key(a), key(b)) })
		return ok[len(ok)/2]
	}
	m.p50 = mid(func(c *cell) time.Duration { return c.p50 }).p50
	m.p99 = mid(func(c *cell) time.Duration { return c.p99 }).p99
	cpu := mid((*cell).cpuPer)
	m.cpu, m.cpuN = cpu.cpu, cpu.cpuN
	return &m
}

func writePolicies(dir string, files map[string]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("policies: %w", err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return fmt.Errorf("policies: %w", err)
		}
	}
	return nil
}

// prepare finds what the picked rows need: nginx (row N is skipped, with a
// line in the report, when it is not installed; its name says the version
// and workers that ran) and the OTLP sink of the tracing rows.
func (r *runner) prepare(rows []rowSpec) ([]rowSpec, error) {
	var out []rowSpec
	for _, row := range rows {
		switch {
		case row.kind == "nginx":
			if r.nginx = nginxBinary(); r.nginx == "" {
				r.skipped = append(r.skipped, "row "+row.id+" (nginx) skipped: nginx is not installed (looked for $CTXPROXY_BENCH_NGINX, /usr/sbin/nginx, nginx in PATH)")
				continue
			}
			if !row.rewritten {
				row.name = nginxRowName(nginxVersion(r.nginx), nginxWorkers())
			}
		case row.sampler != "" && r.sink == nil:
			var err error
			if r.sink, err = startOTLPSink(); err != nil {
				return nil, err
			}
		}
		out = append(out, row)
	}
	return out, nil
}

func pick(rows []rowSpec, ids string) []rowSpec {
	if ids == "" {
		var out []rowSpec
		for _, r := range rows {
			if !r.optIn {
				out = append(out, r)
			}
		}
		return out
	}
	var out []rowSpec
	for _, id := range strings.Split(ids, ",") {
		for _, r := range rows {
			if r.id == id {
				out = append(out, r)
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// traceEnv is the OTEL_* environment of a tracing row: its own path on the
// bench's sink, and its sampler.
func (r *runner) traceEnv(row rowSpec, tag string) []string {
	if row.sampler == "" || r.sink == nil {
		return nil
	}
	return []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + r.sink.endpoint(tag), "OTEL_TRACES_SAMPLER=" + row.sampler,
		"OTEL_SERVICE_NAME=ctxproxy-bench"}
}

// servers starts the fake and the row's server; srv is the process under
// test (the fake itself for the direct row).
func (r *runner) servers(row rowSpec, tag string) (fake, srv *child, err error) {
	fake, err = startChild(r.work, tag+"-fake", "fake", "-event-delay", r.c.eventDelay.String(), "-events", fmt.Sprint(r.c.events))
	if err != nil {
		return nil, nil, err
	}
	switch row.kind {
	case "direct":
		return fake, fake, nil
	case "bare":
		args := []string{"bare", "-upstream", fake.url()}
		if row.pool {
			args = append(args, "-pool")
		}
		srv, err = startChild(r.work, tag+"-bare", args...)
	case "nginx":
		srv, err = startNginx(r.work, tag+"-nginx", r.nginx, fake.addr)
	case "ctxproxy":
		dir := filepath.Join(r.work, tag)
		if err = os.MkdirAll(dir, 0o755); err != nil {
			break
		}
		lvl := row.logLevel
		if lvl == "" {
			lvl = "warn"
		}
		pols := r.polDir
		if row.caps {
			pols = r.capsDir
		}
		args := append([]string{"--upstream", fake.url(), "--policies", pols,
			"--memory-dir", filepath.Join(dir, "memories"), "--ledger", "file:" + filepath.Join(dir, "ledger.jsonl"),
			"--log-level", lvl, "--shutdown-grace", "3s"}, rowArgs(row.args)...)
		srv, err = startCtxproxy(r.work, tag+"-ctxproxy", r.bin, r.traceEnv(row, tag), args...)
	}
	if err != nil {
		fake.stop()
		return nil, nil, err
	}
	return fake, srv, nil
}

func (r *runner) runCell(row rowSpec, load string) *cell {
	tag := "row" + row.id + "-" + load
	cl := &cell{row: row, load: load, tag: tag}
	fake, srv, err := r.servers(row, tag)
	if err != nil {
		cl.err = err
		return cl
	}
	defer fake.stop()
	defer srv.stop()
	cl.workers = len(srv.pids()) - 1
	t := target{url: srv.url(), key: row.key, memory: row.memory, write: row.write}
	ctx := context.Background()
	body := r.bodies[load]
	if row.thinking {
		body = thinkingBody(body)
	}
	if row.rewritten {
		var err error
		if body, t.beta, err = r.rewritten(body); err != nil {
			cl.err = err
			return cl
		}
	}
	if load == "streams" {
		r.streamCell(ctx, cl, srv, t, body, tag)
		return cl
	}
	client := newClient(r.c.concurrency)
	defer client.CloseIdleConnections()
	if err := do(ctx, client, t, body); err != nil {
		cl.err = fmt.Errorf("first request: %w (%s)", err, srv.stderrTail())
		return cl
	}
	warm := r.c.duration / 8
	var prof sync.WaitGroup
	if r.c.pprofDir != "" && profiled(row) {
		secs := max(int((r.c.duration+warm)/time.Second)-1, 1)
		prof.Add(1)
		go func() {
			defer prof.Done()
			srv.saveProfile(ctx, fmt.Sprintf("profile?seconds=%d", secs), filepath.Join(r.c.pprofDir, tag+".cpu.pprof"))
		}()
	}
	conc := r.c.concurrency
	if load == "large" {
		conc = r.c.largeConc
	}
	cpu0 := srv.cpu()
	res := closedLoop(ctx, client, t, body, conc, warm, r.c.duration, 0)
	cl.cpu, cl.cpuN = srv.cpu()-cpu0, res.n // the warmup's requests are in the time: a slight overestimate
	prof.Wait()
	if r.c.pprofDir != "" && profiled(row) {
		srv.saveProfile(ctx, "allocs", filepath.Join(r.c.pprofDir, tag+".allocs.pprof"))
	}
	cl.rps, cl.n, cl.errs = res.rps(), res.n, res.errs
	cl.loadP50, cl.loadP99 = pct(res.lat, .5), pct(res.lat, .99)
	if res.errs > 0 {
		cl.err = fmt.Errorf("%d errors, first: %v", res.errs, res.firstErr)
	}
	un := closedLoop(ctx, client, t, body, 1, 0, r.c.duration/2, 0)
	cl.p50, cl.p99 = pct(un.lat, .5), pct(un.lat, .99)
	cl.hwm = srv.hwm()
	return cl
}

func (r *runner) streamCell(ctx context.Context, cl *cell, srv *child, t target, body []byte, tag string) {
	n := r.c.streams
	client := newClient(n)
	defer client.CloseIdleConnections()
	// Warm up: connections and code paths, then the idle baseline.
	wt := t
	wt.warmup = true
	if w := streams(ctx, client, wt, body, min(n, 50), time.Minute, nil); w.errs > 0 {
		cl.err = fmt.Errorf("warmup: %v (%s)", w.firstErr, srv.stderrTail())
		return
	}
	base, _ := srv.stats(true)
	baseRSS := srv.rss()
	var (
		openStats childStats
		openRSS   int64
		gotOpen   = make(chan struct{})
	)
	onOpen := func() {
		openStats, _ = srv.stats(false)
		openRSS = srv.rss()
		if r.c.pprofDir != "" && profiled(cl.row) {
			srv.saveProfile(ctx, "heap?gc=1", filepath.Join(r.c.pprofDir, tag+".open.heap.pprof"))
		}
		close(gotOpen)
	}
	var prof sync.WaitGroup
	if r.c.pprofDir != "" && profiled(cl.row) {
		secs := max(int(time.Duration(r.c.events)*r.c.eventDelay/time.Second), 1)
		prof.Add(1)
		go func() {
			defer prof.Done()
			srv.saveProfile(ctx, fmt.Sprintf("profile?seconds=%d", secs), filepath.Join(r.c.pprofDir, tag+".cpu.pprof"))
		}()
	}
	timeout := time.Duration(r.c.events)*r.c.eventDelay*4 + time.Minute
	cpu0 := srv.cpu()
	res := streams(ctx, client, t, body, n, timeout, onOpen)
	cl.cpu, cl.cpuN = srv.cpu()-cpu0, res.n
	prof.Wait()
	if r.c.pprofDir != "" && profiled(cl.row) {
		srv.saveProfile(ctx, "allocs", filepath.Join(r.c.pprofDir, tag+".allocs.pprof"))
	}
	select {
	case <-gotOpen:
		cl.memPerStream = max(openRSS-baseRSS, 0) / int64(n)
		cl.heapPerStream = max(int64(openStats.HeapInuse+openStats.StackInuse)-int64(base.HeapInuse+base.StackInuse), 0) / int64(n)
		cl.goroutinesPerOpen = float64(openStats.Goroutines-base.Goroutines) / float64(n)
	case <-time.After(5 * time.Second):
	}
	cl.completed, cl.errs = res.n, res.errs
	cl.eventsPer = res.eventsPer
	cl.ttfb50, cl.ttfb99 = pct(res.ttfb, .5), pct(res.ttfb, .99)
	cl.p50, cl.p99 = pct(res.events, .5), pct(res.events, .99)
	if res.elapsed > 0 {
		cl.rps = float64(res.n) / res.elapsed.Seconds()
	}
	cl.hwm = srv.hwm()
	if res.errs > 0 {
		cl.err = fmt.Errorf("%d of %d streams failed, first: %v", res.errs, n, res.firstErr)
	}
}

// machine describes the host for the results.
func machine() string {
	var b strings.Builder
	fmt.Fprintf(&b, "- nproc: %d (GOMAXPROCS %d)\n", runtime.NumCPU(), runtime.GOMAXPROCS(0))
	if out, err := exec.Command("lscpu").Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		for _, l := range lines[:min(len(lines), 10)] {
			fmt.Fprintf(&b, "  - `%s`\n", strings.Join(strings.Fields(l), " "))
		}
	}
	fmt.Fprintf(&b, "- go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(&b, "- date: %s\n", time.Now().UTC().Format(time.RFC3339))
	return b.String()
}

// interleaved measures every row under a non-streaming load with all the
// row's servers up at once and the load moving from row to row in short
// slices, round-robin: the machine is shared, and background load then
// falls on every row alike instead of on whichever row ran during a spike.
func (r *runner) interleaved(rows []rowSpec, load string) []*cell {
	type live struct {
		cl        *cell
		fake, srv *child
		t         target
		body      []byte
		client    *http.Client
		thr, lat  loadResult
		cpu       time.Duration // the server's, over the slices it was loaded
		mach      machineTimes  // the whole machine's, over the throughput phase's slices
		fakeCPU   time.Duration // the fake upstream's, over the throughput phase's slices
	}
	ctx := context.Background()
	conc := r.c.concurrency
	slice := 250 * time.Millisecond
	if load == "large" {
		conc = r.c.largeConc
		slice = 500 * time.Millisecond
	}
	var ls []*live
	defer func() {
		for _, l := range ls {
			if l.client != nil {
				l.client.CloseIdleConnections()
			}
			if l.srv != nil {
				l.srv.stop()
				l.fake.stop()
			}
		}
	}()
	var out []*cell
	for _, row := range rows {
		tag := "row" + row.id + "-" + load
		l := &live{cl: &cell{row: row, load: load, tag: tag}, body: r.bodies[load]}
		out = append(out, l.cl)
		fake, srv, err := r.servers(row, tag)
		if err != nil {
			l.cl.err = err
			continue
		}
		l.fake, l.srv = fake, srv
		l.cl.workers = len(srv.pids()) - 1
		l.t = target{url: srv.url(), key: row.key, memory: row.memory, write: row.write}
		if row.thinking {
			l.body = thinkingBody(l.body)
		}
		if row.rewritten {
			if l.body, l.t.beta, err = r.rewritten(l.body); err != nil {
				l.cl.err = err
				continue
			}
		}
		l.client = newClient(conc)
		if err := do(ctx, l.client, l.t, l.body); err != nil {
			l.cl.err = fmt.Errorf("first request: %w (%s)", err, srv.stderrTail())
			continue
		}
		ls = append(ls, l)
	}
	fmt.Fprintf(os.Stderr, "[%5.1fs] load %s: %d rows interleaved in %v slices\n", time.Since(r.started).Seconds(), load, len(ls), slice)
	for _, l := range ls { // warm up each row
		closedLoop(ctx, l.client, l.t, l.body, conc, 0, r.c.duration/8, 0)
	}
	var prof sync.WaitGroup
	if r.c.pprofDir != "" {
		secs := max(int(time.Duration(len(ls))*r.c.duration/time.Second), 1)
		for _, l := range ls {
			if !profiled(l.cl.row) {
				continue
			}
			prof.Add(1)
			go func() {
				defer prof.Done()
				tag := "row" + l.cl.row.id + "-" + load
				l.srv.saveProfile(ctx, fmt.Sprintf("profile?seconds=%d", secs), filepath.Join(r.c.pprofDir, tag+".cpu.pprof"))
			}()
		}
	}
	add := func(dst *loadResult, res loadResult) {
		dst.n += res.n
		dst.errs += res.errs
		dst.elapsed += res.elapsed
		dst.lat = append(dst.lat, res.lat...)
		if dst.firstErr == nil {
			dst.firstErr = res.firstErr
		}
	}
	phase := func(workers int, total time.Duration, pick func(*live) *loadResult) {
		n := max(int(total/slice), 1)
		for i := range n {
			for j := range ls {
				l := ls[(i+j)%len(ls)]
				cpu0, m0, f0 := l.srv.cpu(), readMachineTimes(), l.fake.cpu()
				add(pick(l), closedLoop(ctx, l.client, l.t, l.body, workers, 0, slice, 0))
				l.cpu += l.srv.cpu() - cpu0
				if workers > 1 {
					l.mach = l.mach.add(readMachineTimes().sub(m0))
					l.fakeCPU += l.fake.cpu() - f0
				}
			}
		}
	}
	var ph phaseTimes
	ph.loadStart = time.Now()
	phase(conc, r.c.duration, func(l *live) *loadResult { return &l.thr })
	prof.Wait()
	ph.oneStart = time.Now()
	phase(1, r.c.duration/2, func(l *live) *loadResult { return &l.lat })
	ph.oneEnd = time.Now()
	for _, l := range ls {
		if r.c.pprofDir != "" && profiled(l.cl.row) {
			l.srv.saveProfile(ctx, "allocs", filepath.Join(r.c.pprofDir, "row"+l.cl.row.id+"-"+load+".allocs.pprof"))
		}
		slices.Sort(l.thr.lat)
		slices.Sort(l.lat.lat)
		cl := l.cl
		cl.rps, cl.n, cl.errs = l.thr.rps(), l.thr.n, l.thr.errs
		cl.loadP50, cl.loadP99 = pct(l.thr.lat, .5), pct(l.thr.lat, .99)
		cl.p50, cl.p99 = pct(l.lat.lat, .5), pct(l.lat.lat, .99)
		cl.hwm = l.srv.hwm()
		cl.cpu, cl.cpuN = l.cpu, l.thr.n+l.lat.n
		cl.mach, cl.fakeCPU = l.mach, l.fakeCPU
		if l.thr.errs+l.lat.errs > 0 {
			cl.err = fmt.Errorf("%d errors, first: %v", l.thr.errs+l.lat.errs, cmp.Or(l.thr.firstErr, l.lat.firstErr))
		}
		if cl.row.kind == "ctxproxy" && cl.row.logLevel == "info" {
			l.srv.stop() // its log, flushed
			cl.ownErr = cl.ownFromLog(l.srv.errPath, ph)
		}
	}
	return out
}

// rewritten is body and its anthropic-beta as row 4's policy sends them.
func (r *runner) rewritten(body []byte) ([]byte, string, error) {
	set, err := policy.LoadDir(r.polDir)
	if err != nil {
		return nil, "", err
	}
	p, _ := set.Lookup(keyEnforce)
	h := http.Header{}
	out, _, err := p.Rewrite(body, h)
	if err != nil {
		return nil, "", err
	}
	return out, h.Get("Anthropic-Beta"), nil
}

// rowArgs puts the bench's store URLs in place of PG and REDIS.
func rowArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch a {
		case "PG":
			a = benchPG()
		case "REDIS":
			a = benchRedis()
		}
		out[i] = a
	}
	return out
}
