package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The after-burst check of the -long run. A long-running ctxproxy
// was seen 60–90 µs slower at one connection than a fresh copy of the same
// binary after a burst of 500 streams, and recovered slowly. burstRun
// measures it: one-connection latency of row 4's tenant on a fresh binary,
// then a burst of -streams concurrent streams through it, then the same
// latency right after and at intervals, each time interleaved with a fresh
// copy started after the burst with the same flags (the shared machine's
// background load then falls on both alike), with each process's state
// beside it: heap, goroutines, RSS, GCs, page faults and the connections it
// holds to the upstream.

// burstSample is one server's numbers at one point of the burst run.
type burstSample struct {
	when, server string
	p50, p99     time.Duration
	n            int
	cpu          time.Duration // the process's CPU over the measured requests
	gcCPU        time.Duration // the collector's (the runtime's estimate) over the point
	faults       int64         // minor page faults over the measured requests
	stats        childStats    // read without forcing a GC
	rss          int64
	upstream     int // TCP connections it holds to the fake
}

// perReq is d per request of the sample.
func (s burstSample) perReq(d time.Duration) time.Duration {
	if s.n == 0 {
		return 0
	}
	return d / time.Duration(s.n)
}

// faultsPer100 is minor page faults per 100 requests.
func (s burstSample) faultsPer100() float64 {
	if s.n == 0 {
		return 0
	}
	return 100 * float64(s.faults) / float64(s.n)
}

// burstServer is one ctxproxy of the burst run and its one-connection client.
type burstServer struct {
	name   string
	srv    *child
	client *http.Client
	t      target
	// The current measurement: its requests, and the CPU and page faults
	// of the slices they ran in.
	res    loadResult
	cpu    time.Duration
	faults int64
}

// burstTimes is how long the burst run measures: each server's
// one-connection phase at each point, and the window after the burst and
// the spacing of the points in it.
func (c config) burstTimes() (measure, window, every time.Duration) {
	measure = 4 * time.Second
	if c.quick {
		measure = 2 * time.Second
	}
	window = min(max(c.longDur/2, 30*time.Second), 150*time.Second)
	every = max(window/5, 10*time.Second)
	return measure, window, every
}

// burstRun is the after-burst check; it returns its markdown section.
func (r *runner) burstRun() (string, error) {
	ctx := context.Background()
	fake, err := startChild(r.work, "burst-fake", "fake", "-event-delay", r.c.eventDelay.String(), "-events", fmt.Sprint(r.c.events))
	if err != nil {
		return "", fmt.Errorf("burst run: %w", err)
	}
	defer fake.stop()
	long, err := r.startBurstServer(fake, "long-running")
	if err != nil {
		return "", err
	}
	defer long.srv.stop()
	measure, window, every := r.c.burstTimes()
	small := smallBody(r.c.smallSize, false)
	if err := r.warmBurst(ctx, long, small); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "[burst] fresh binary, one connection, %v\n", measure)
	rows := r.measureBurst(ctx, fake, []*burstServer{long}, small, measure, "before the burst")

	fmt.Fprintf(os.Stderr, "[burst] %d concurrent streams\n", r.c.streams)
	if err := r.streamBurst(ctx, long); err != nil {
		return "", err
	}
	burstEnd := time.Now()
	rows = append(rows, r.snapshot(fake, long, "just after the burst (idle)"))

	fresh, err := r.startBurstServer(fake, "fresh copy")
	if err != nil {
		return "", err
	}
	defer fresh.srv.stop()
	if err := r.warmBurst(ctx, fresh, small); err != nil {
		return "", err
	}
	for i := 0; ; i++ {
		when := fmt.Sprintf("+%.0fs", time.Since(burstEnd).Seconds())
		fmt.Fprintf(os.Stderr, "[burst] %s: long-running and fresh copy interleaved\n", when)
		// Alternate which goes first, so neither always follows the other.
		pair := []*burstServer{long, fresh}
		if i%2 == 1 {
			pair = []*burstServer{fresh, long}
		}
		rows = append(rows, r.measureBurst(ctx, fake, pair, small, measure, when)...)
		next := time.Duration(i+1) * every
		if next > window {
			break
		}
		time.Sleep(time.Until(burstEnd.Add(next)))
	}
	r.burstProfiles(ctx, long, fresh)
	return burstMarkdown(r.c, rows, measure, window, every), nil
}

// burstProfiles, with -pprof, saves both servers' heap (after a GC) and
// goroutine profiles at the end: what the long-running one still holds.
func (r *runner) burstProfiles(ctx context.Context, ss ...*burstServer) {
	if r.c.pprofDir == "" {
		return
	}
	for _, s := range ss {
		tag := "burst-" + strings.ReplaceAll(s.name, " ", "-")
		for what, file := range map[string]string{"heap?gc=1": ".heap.pprof", "goroutine": ".goroutine.pprof"} {
			if err := s.srv.saveProfile(ctx, what, filepath.Join(r.c.pprofDir, tag+file)); err != nil {
				fmt.Fprintf(os.Stderr, "[burst] %s profile of %s: %v\n", what, s.name, err)
			}
		}
	}
}

// startBurstServer starts a ctxproxy with row 4's flags on fake.
func (r *runner) startBurstServer(fake *child, name string) (*burstServer, error) {
	tag := "burst-" + strings.ReplaceAll(name, " ", "-")
	dir := filepath.Join(r.work, tag)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("burst run: %w", err)
	}
	args := []string{"--upstream", fake.url(), "--policies", r.polDir,
		"--memory-dir", filepath.Join(dir, "memories"), "--ledger", "file:" + filepath.Join(dir, "ledger.jsonl"),
		"--log-level", "warn", "--shutdown-grace", "3s"}
	srv, err := startCtxproxy(r.work, tag+"-ctxproxy", r.bin, nil, args...)
	if err != nil {
		return nil, fmt.Errorf("burst run: %w", err)
	}
	return &burstServer{name: name, srv: srv, client: newClient(1), t: target{url: srv.url(), key: keyEnforce}}, nil
}

// warmBurst gives a server its warm-up, the same for both: a first request,
// a wave of 50 streams without delay, a second of one-connection requests.
func (r *runner) warmBurst(ctx context.Context, s *burstServer, small []byte) error {
	if err := do(ctx, s.client, s.t, small); err != nil {
		return fmt.Errorf("burst run: %s first request: %w (%s)", s.name, err, s.srv.stderrTail())
	}
	wc := newClient(50)
	defer wc.CloseIdleConnections()
	wt := s.t
	wt.warmup = true
	if w := streams(ctx, wc, wt, smallBody(r.c.smallSize, true), 50, time.Minute, nil); w.errs > 0 {
		return fmt.Errorf("burst run: %s warm-up streams: %v", s.name, w.firstErr)
	}
	closedLoop(ctx, s.client, s.t, small, 1, 0, time.Second, 0)
	return nil
}

// streamBurst opens -streams streams at once on s and reads them to the
// end, then closes the client's connections, as clients that are done do.
func (r *runner) streamBurst(ctx context.Context, s *burstServer) error {
	c := newClient(r.c.streams)
	defer c.CloseIdleConnections()
	timeout := time.Duration(r.c.events)*r.c.eventDelay*4 + time.Minute
	res := streams(ctx, c, s.t, smallBody(r.c.smallSize, true), r.c.streams, timeout, nil)
	if res.errs > 0 {
		return fmt.Errorf("burst run: %d of %d streams failed, first: %v", res.errs, r.c.streams, res.firstErr)
	}
	return nil
}

// measureBurst measures the servers' one-connection latency for measure
// each, in 250 ms slices taken in turn, and reads their state after. The
// long-running server's row comes first.
func (r *runner) measureBurst(ctx context.Context, fake *child, ss []*burstServer, body []byte, measure time.Duration, when string) []burstSample {
	const slice = 250 * time.Millisecond
	gc0 := make([]float64, len(ss))
	for i, s := range ss {
		s.res, s.cpu, s.faults = loadResult{}, 0, 0
		// Read once per point, not per slice: /debug/stats stops the world.
		st, _ := s.srv.stats(false)
		gc0[i] = st.GCCPUSeconds
	}
	for range max(int(measure/slice), 1) {
		for _, s := range ss {
			cpu0, f0 := s.srv.cpu(), s.srv.minorFaults()
			res := closedLoop(ctx, s.client, s.t, body, 1, 0, slice, 0)
			s.cpu += s.srv.cpu() - cpu0
			s.faults += s.srv.minorFaults() - f0
			s.res.n += res.n
			s.res.lat = append(s.res.lat, res.lat...)
		}
	}
	var out []burstSample
	for i, s := range ss {
		slices.Sort(s.res.lat)
		smp := r.snapshot(fake, s, when)
		smp.p50, smp.p99, smp.n = pct(s.res.lat, .5), pct(s.res.lat, .99), s.res.n
		smp.cpu, smp.faults = s.cpu, s.faults
		smp.gcCPU = time.Duration((smp.stats.GCCPUSeconds - gc0[i]) * float64(time.Second))
		out = append(out, smp)
	}
	slices.SortStableFunc(out, func(a, b burstSample) int { return strings.Compare(b.server, a.server) })
	return out
}

// snapshot reads a server's state without disturbing its collector.
func (r *runner) snapshot(fake *child, s *burstServer, when string) burstSample {
	st, _ := s.srv.stats(false)
	return burstSample{when: when, server: s.name, stats: st, rss: s.srv.rss(), upstream: tcpConns(s.srv.pid, portOf(fake.addr))}
}

func portOf(hostport string) int {
	i := strings.LastIndexByte(hostport, ':')
	p, _ := strconv.Atoi(hostport[i+1:])
	return p
}

// tcpConns counts the established TCP connections of process pid to remote
// port: its sockets' inodes matched against its /proc/PID/net/tcp. -1 when
// /proc cannot tell.
func tcpConns(pid, port int) int {
	inodes, err := socketInodes(pid)
	if err != nil {
		return -1
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || fs[3] != "01" || !inodes[fs[9]] {
			continue
		}
		if i := strings.IndexByte(fs[2], ':'); i >= 0 {
			if p, err := strconv.ParseInt(fs[2][i+1:], 16, 32); err == nil && int(p) == port {
				n++
			}
		}
	}
	return n
}

// socketInodes is the set of socket inodes among pid's open files.
func socketInodes(pid int) (map[string]bool, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			out[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	return out, nil
}

// fmtDurDec is fmtDur with one decimal below 10 µs.
func fmtDurDec(d time.Duration) string {
	if d > 0 && d < 10*time.Microsecond {
		return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
	}
	return fmtDur(d)
}

func burstMarkdown(c config, rows []burstSample, measure, window, every time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### After a burst of %d streams\n\n", c.streams)
	fmt.Fprintf(&b, "- row 4's flags and tenant (enforce + inject memory tool), %d B body, one connection, %v per server at each point "+
		"in 250 ms slices taken in turn; the long-running ctxproxy serves %d concurrent streams (%d events, %v apart), "+
		"then is measured every %v for %v beside a fresh copy: the same binary and flags, started after the burst and warmed up alike\n",
		c.smallSize, measure, c.streams, c.events, c.eventDelay, every, window)
	b.WriteString("- CPU/req: the process's user+system time over its slices ÷ requests (10 ms ticks); GC CPU/req: the runtime's own " +
		"estimate of the collector's CPU (/cpu/classes/gc/total) over the point ÷ requests; faults: minor page faults (/proc/PID/stat); " +
		"live heap: what the last GC marked, heap goal: the next GC's target, released: heap given back to the OS (runtime/metrics, " +
		"read without forcing a GC); upstream conns: established TCP connections to the fake (/proc)\n\n")
	b.WriteString("| when | server | requests | p50 | p99 | CPU/req | GC CPU/req | faults/100 req | live heap | heap goal | released | goroutines | RSS | upstream conns | GCs |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %.1f | %s | %s | %s | %d | %s | %d | %d |\n", s.when, s.server, s.n,
			fmtDur(s.p50), fmtDur(s.p99), fmtDur(s.perReq(s.cpu)), fmtDurDec(s.perReq(s.gcCPU)), s.faultsPer100(),
			fmtBytes(int64(s.stats.HeapLive)), fmtBytes(int64(s.stats.HeapGoal)), fmtBytes(int64(s.stats.HeapReleased)),
			s.stats.Goroutines, fmtBytes(s.rss), s.upstream, s.stats.NumGC)
	}
	b.WriteString("\n" + burstVerdict(rows) + "\n")
	return b.String()
}

// burstPairs are the points where both servers were measured: long-running, fresh.
func burstPairs(rows []burstSample) [][2]burstSample {
	var pairs [][2]burstSample
	for i := 0; i+1 < len(rows); i++ {
		a, f := rows[i], rows[i+1]
		if a.when == f.when && a.server == "long-running" && f.server == "fresh copy" && a.n > 0 && f.n > 0 {
			pairs = append(pairs, [2]burstSample{a, f})
		}
	}
	return pairs
}

// burstVerdict says how far the long-running server is from the fresh copy:
// wall-clock differences at each point (noise on a shared machine), and a
// check on the state it keeps, which does not depend on the machine's load.
func burstVerdict(rows []burstSample) string {
	pairs := burstPairs(rows)
	if len(pairs) == 0 {
		return "- no point measured both servers"
	}
	var b strings.Builder
	b.WriteString("- long-running minus fresh copy, p50 / CPU per request / GC CPU per request:")
	for _, p := range pairs {
		a, f := p[0], p[1]
		fmt.Fprintf(&b, " %s %s / %s / %s;", a.when, fmtDelta(a.p50-f.p50), fmtDelta(a.perReq(a.cpu)-f.perReq(f.cpu)),
			fmtDelta(a.perReq(a.gcCPU)-f.perReq(f.gcCPU)))
	}
	b.WriteString("\n")
	// The state a burst leaves should be gone a little over two trim windows
	// (proxy/idletrim.go) after it; the pool's own idle timeout is 90 s.
	last := pairs[len(pairs)-1]
	a, f := last[0], last[1]
	ok := a.upstream <= f.upstream+2 && a.stats.Goroutines <= f.stats.Goroutines+10 &&
		a.stats.HeapLive <= f.stats.HeapLive+f.stats.HeapLive/4+(1<<20)
	verdict := "MISS"
	if ok {
		verdict = "PASS"
	}
	fmt.Fprintf(&b, "- %s at %s the long-running server holds what the fresh copy does: upstream conns %d vs %d, goroutines %d vs %d, "+
		"live heap %s vs %s (within 25%% + 1 MiB)\n", verdict, a.when, a.upstream, f.upstream, a.stats.Goroutines, f.stats.Goroutines,
		fmtBytes(int64(a.stats.HeapLive)), fmtBytes(int64(f.stats.HeapLive)))
	return b.String()
}
