package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/policy"
)

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "—"
	case d < 0:
		return "-" + fmtDur(-d)
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func fmtDelta(d time.Duration) string {
	if d == 0 {
		return "+0µs" // fmtDur's "—" is for a figure that is missing
	}
	if d >= 0 {
		return "+" + strings.TrimPrefix(fmtDur(d), "—")
	}
	return fmtDur(d)
}

func fmtBytes(n int64) string {
	switch {
	case n <= 0:
		return "—"
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func (r *runner) find(rowID, load string) *cell {
	for _, c := range r.cells {
		if c.row.id == rowID && c.load == load && c.err == nil {
			return c
		}
	}
	return nil
}

// microResult is an in-process measurement of one hot function.
type microResult struct {
	name        string
	size        int
	nsPerOp     float64
	bytesPerOp  float64
	allocsPerOp float64
	err         error
	target      bool // the rewrite target is checked on this one
}

// measure runs f for about d and reports time and allocations per call.
func measure(name string, size int, d time.Duration, f func() error) microResult {
	res := microResult{name: name, size: size}
	for range 3 {
		if err := f(); err != nil {
			res.err = err
			return res
		}
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	n := 0
	for time.Since(start) < d || n < 10 {
		f()
		n++
	}
	el := time.Since(start)
	runtime.ReadMemStats(&m1)
	res.nsPerOp = float64(el.Nanoseconds()) / float64(n)
	res.bytesPerOp = float64(m1.TotalAlloc-m0.TotalAlloc) / float64(n)
	res.allocsPerOp = float64(m1.Mallocs-m0.Mallocs) / float64(n)
	return res
}

// microRewrite times the enforce tenant's policy.Rewrite on the run's
// bodies, in this process (the same numbers as go test -bench in policy/).
func (r *runner) microRewrite() []microResult {
	set, err := policy.LoadDir(r.polDir)
	if err != nil {
		return []microResult{{name: "policy.Rewrite", err: err}}
	}
	p, _ := set.Lookup(keyEnforce)
	d := time.Second
	if r.c.quick {
		d = 300 * time.Millisecond
	}
	h0 := http.Header{"Anthropic-Version": {"2023-06-01"}, "Content-Type": {"application/json"}}
	var out []microResult
	for _, load := range []string{"small", "large"} {
		body := r.bodies[load]
		out = append(out, measure("policy.Rewrite (enforce + inject), builds a new body, "+load, len(body), d, func() error {
			_, _, err := p.Rewrite(body, h0.Clone())
			return err
		}))
	}
	// What the proxy runs on a large body: the rewrite as pieces that alias
	// the body, which go upstream as they are (one writev).
	body := r.bodies["large"]
	m := measure("policy.RewriteParts (enforce + inject), the proxy's large-body path, large", len(body), d, func() error {
		_, _, err := p.RewriteParts(body, h0.Clone())
		return err
	})
	m.target = true
	out = append(out, m)
	out = append(out, measure("policy.MergeBeta", 0, d, func() error {
		h := http.Header{"Anthropic-Beta": {"interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14"}}
		policy.MergeBeta(h, policy.BetaContextManagement)
		return nil
	}))
	return out
}

// bare is the bare proxy's cell the others compare with: the pooled one
// (row 2p) when it ran, else row 2.
func (r *runner) bare(load string) *cell {
	if cl := r.find("2p", load); cl != nil {
		return cl
	}
	return r.find("2", load)
}

func (r *runner) markdown(micro []microResult) string {
	c := r.c
	var b strings.Builder
	fmt.Fprintf(&b, "## ctxproxy bench\n\n")
	fmt.Fprintf(&b, "Command: `go run ./bench%s`; took %.0fs.\n\n", cmdFlags(), time.Since(r.started).Seconds())
	b.WriteString(machine())
	fmt.Fprintf(&b, "- load: %d workers (large bodies: %d) for %v per row (after %v warmup), then 1 worker for %v per row (the latency columns); "+
		"small and large run with every row's servers up and the load moving from row to row in 250 ms (large: 500 ms) slices, round-robin, "+
		"so the shared machine's background load falls on all rows alike; streams run row after row; every load runs %d time(s), each with fresh processes: "+
		"the median run by req/s shown, with the median of the runs' p50, p99 and CPU/req (small, large); "+
		"small body %d B, large body %d B (%d-message tool transcript); streams: %d concurrent × %d events, %v apart\n\n",
		c.concurrency, c.largeConc, c.duration, c.duration/8, c.duration/2, max(c.repeat, 1), len(r.bodies["small"]), len(r.bodies["large"]), c.largeTurns+1,
		c.streams, c.events, c.eventDelay)

	b.WriteString("| row | server | load | req/s | × bare | CPU/req | CPU × bare | p50 | p99 | +p50 vs direct | +p99 vs direct | TTFB p50 / p99 | peak RSS | RSS × bare | mem/stream |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	var errs []string
	for _, cl := range r.cells {
		if cl.err != nil {
			errs = append(errs, fmt.Sprintf("- row %s %s: %v", cl.row.id, cl.load, cl.err))
		}
		direct, bare := r.find("1", cl.load), r.bare(cl.load)
		cpu, cpuRatio := "—", "—"
		if cl.cpuN > 0 {
			cpu = fmtDur(cl.cpu / time.Duration(cl.cpuN))
			if bare != nil && bare.cpuN > 0 && bare.cpu > 0 {
				cpuRatio = fmt.Sprintf("%.2f×", (float64(cl.cpu)/float64(cl.cpuN))/(float64(bare.cpu)/float64(bare.cpuN)))
			}
		}
		rps, ratio, dp50, dp99, ttfb, rssRatio, perStream := "—", "—", "—", "—", "—", "—", "—"
		if cl.load != "streams" {
			rps = fmt.Sprintf("%.0f", cl.rps)
			if bare != nil && bare.rps > 0 {
				ratio = fmt.Sprintf("%.2f×", cl.rps/bare.rps)
			}
		} else {
			rps = fmt.Sprintf("%d/%d streams", cl.completed, c.streams)
			ttfb = fmtDur(cl.ttfb50) + " / " + fmtDur(cl.ttfb99)
			perStream = fmtBytes(cl.memPerStream)
			if bare != nil && cl.row.id != bare.row.id {
				ratio = "p99 " + fmtDelta(cl.p99-bare.p99)
			}
		}
		if direct != nil && cl.row.id != "1" {
			dp50, dp99 = fmtDelta(cl.p50-direct.p50), fmtDelta(cl.p99-direct.p99)
		}
		if bare != nil && bare.hwm > 0 {
			rssRatio = fmt.Sprintf("%.2f×", float64(cl.hwm)/float64(bare.hwm))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			cl.row.id, cl.row.name, cl.load, rps, ratio, cpu, cpuRatio, fmtDur(cl.p50), fmtDur(cl.p99), dp50, dp99, ttfb,
			fmtBytes(cl.hwm), rssRatio, perStream)
	}
	b.WriteString("\n× bare compares with row 2p (the pooled bare proxy) when it ran, else row 2. CPU/req is the server process's " +
		"user+system time (/proc/PID/stat, 10 ms ticks) over the slices it was loaded, divided by the requests it served then " +
		"(streams: per stream, over the wave); it is the steadiest figure on a shared machine.\n")
	b.WriteString("\nLatency columns: small and large are request latency with one worker (no queueing; the throughput phase's own " +
		"p50/p99 are in the details below); streams are per-event delivery latency, from the fake writing the event " +
		"(a send timestamp in the text delta) to the client reading it. × bare for streams is the event p99 minus the bare proxy's. " +
		"mem/stream is the server's RSS growth with all streams open, divided by their number (the target is checked on live heap+stacks, below, which does not depend on GC headroom). Row 5 makes two upstream calls per request " +
		"(one memory round), so its latency includes a second upstream round trip.\n")
	for _, l := range r.skipped {
		b.WriteString("\n" + l + "\n")
	}
	if len(errs) > 0 {
		b.WriteString("\nErrors:\n\n" + strings.Join(errs, "\n") + "\n")
	}

	r.rowNotes(&b)
	r.machineNotes(&b)

	b.WriteString("\n### Hot functions (in-process)\n\n| function | body | ns/op | B/op | allocs/op | B/op ÷ body |\n|---|--:|--:|--:|--:|--:|\n")
	for _, m := range micro {
		if m.err != nil {
			fmt.Fprintf(&b, "| %s | | error: %v | | | |\n", m.name, m.err)
			continue
		}
		ratio := "—"
		if m.size > 0 {
			ratio = fmt.Sprintf("%.2f×", m.bytesPerOp/float64(m.size))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.1f | %s |\n", m.name, fmtBytes(int64(m.size)),
			fmtDur(time.Duration(m.nsPerOp)), m.bytesPerOp, m.allocsPerOp, ratio)
	}

	r.targets(&b, micro)
	r.featureCost(&b)

	b.WriteString("\n<details><summary>Throughput-phase latency (at the run's concurrency)</summary>\n\n| row | load | requests | p50 | p99 |\n|---|---|--:|--:|--:|\n")
	for _, cl := range r.cells {
		if cl.load != "streams" {
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %s |\n", cl.row.id, cl.load, cl.n, fmtDur(cl.loadP50), fmtDur(cl.loadP99))
		}
	}
	b.WriteString("\n</details>\n")
	return b.String()
}

func cmdFlags() string {
	var parts []string
	for _, a := range os.Args[1:] {
		parts = append(parts, a)
	}
	if len(parts) == 0 {
		return ""
	}
	return " " + strings.Join(parts, " ")
}

// longRun drives ctxproxy with a mix of every tenant and load for
// -long-duration and checks that goroutines and live heap do not grow; then
// the after-burst check (burst.go).
func (r *runner) longRun() (string, error) {
	c := r.c
	// The memory proxy row's server: the path with the most state (the
	// requests below use every tenant by key).
	var row rowSpec
	for _, rs := range allRows {
		if rs.id == "5" {
			row = rs
		}
	}
	fake, srv, err := r.servers(row, "long")
	if err != nil {
		return "", err
	}
	defer fake.stop()
	defer srv.stop()
	small, large, stream := smallBody(c.smallSize, false), largeBody(c.largeSize, c.largeTurns, false), smallBody(c.smallSize, true)
	targets := []target{
		{url: srv.url(), key: keyOff}, {url: srv.url(), key: keyEnforce}, {url: srv.url(), key: keyMemory, memory: true},
	}
	nStreams := min(c.streams, 50)
	client := newClient(c.concurrency + nStreams)
	ctx := context.Background()

	idle := func() childStats {
		client.CloseIdleConnections()
		fake.closeIdle()
		time.Sleep(time.Second)
		s, _ := srv.stats(true)
		return s
	}
	load := func(ctx context.Context) (int, int) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		total, errs := 0, 0
		add := func(n, e int) { mu.Lock(); total += n; errs += e; mu.Unlock() }
		for w := range max(c.concurrency/2, 2) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, e := 0, 0
				for i := 0; ctx.Err() == nil; i++ {
					body := small
					if w == 0 && i%4 == 0 {
						body = large
					}
					if err := do(ctx, client, targets[(w+i)%3], body); err != nil && ctx.Err() == nil {
						e++
					} else {
						n++
					}
				}
				add(n, e)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				res := streams(ctx, client, targets[i%3], stream, nStreams, time.Minute, nil)
				add(res.n, 0)
				if ctx.Err() == nil {
					add(0, res.errs)
				}
			}
		}()
		wg.Wait()
		return total, errs
	}

	// Warm up, then the idle baseline.
	wctx, cancel := context.WithTimeout(ctx, min(c.longDur/10, 20*time.Second))
	load(wctx)
	cancel()
	base := idle()
	baseRSS := srv.rss()

	type sample struct {
		at         time.Duration
		s          childStats
		rss        int64
		goroutines int
	}
	var samples []sample
	lctx, cancel := context.WithTimeout(ctx, c.longDur)
	defer cancel()
	done := make(chan [2]int, 1)
	start := time.Now()
	go func() { n, e := load(lctx); done <- [2]int{n, e} }()
	every := max(c.longDur/20, 5*time.Second)
	tick := time.NewTicker(every)
	var counts [2]int
loop:
	for {
		select {
		case <-tick.C:
			s, _ := srv.stats(true)
			samples = append(samples, sample{at: time.Since(start), s: s, rss: srv.rss()})
			fmt.Fprintf(os.Stderr, "[%5.0fs] goroutines %d heap %s rss %s\n", time.Since(start).Seconds(), s.Goroutines, fmtBytes(int64(s.HeapAlloc)), fmtBytes(srv.rss()))
		case counts = <-done:
			break loop
		}
	}
	tick.Stop()
	end := idle()
	endRSS := srv.rss()

	var b strings.Builder
	fmt.Fprintf(&b, "## ctxproxy growth run (-long)\n\nCommand: `go run ./bench%s`\n\n", cmdFlags())
	b.WriteString(machine())
	fmt.Fprintf(&b, "- ctxproxy (all three tenants in turn) under %d small/large workers and waves of %d streams for %v: %d requests/streams, %d errors\n\n",
		max(c.concurrency/2, 2), nStreams, c.longDur, counts[0], counts[1])
	b.WriteString("| t | goroutines (under load) | live heap after GC | RSS |\n|--:|--:|--:|--:|\n")
	fmt.Fprintf(&b, "| idle before | %d | %s | %s |\n", base.Goroutines, fmtBytes(int64(base.HeapAlloc)), fmtBytes(baseRSS))
	for _, s := range samples {
		fmt.Fprintf(&b, "| %.0fs | %d | %s | %s |\n", s.at.Seconds(), s.s.Goroutines, fmtBytes(int64(s.s.HeapAlloc)), fmtBytes(s.rss))
	}
	fmt.Fprintf(&b, "| idle after | %d | %s | %s |\n\n", end.Goroutines, fmtBytes(int64(end.HeapAlloc)), fmtBytes(endRSS))
	gOK := end.Goroutines <= base.Goroutines+5
	// Live heap: the last third of the run against the first third.
	hOK := true
	if n := len(samples); n >= 6 {
		avg := func(ss []sample) float64 {
			t := 0.0
			for _, s := range ss {
				t += float64(s.s.HeapAlloc)
			}
			return t / float64(len(ss))
		}
		first, last := avg(samples[:n/3]), avg(samples[n-n/3:])
		hOK = last <= first*1.10+(1<<20)
		fmt.Fprintf(&b, "- live heap, first third %s, last third %s\n", fmtBytes(int64(first)), fmtBytes(int64(last)))
	}
	hOK = hOK && end.HeapAlloc <= base.HeapAlloc+base.HeapAlloc/5+(2<<20)
	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	fmt.Fprintf(&b, "- %s goroutines back to the idle baseline after the load: %d before, %d after\n", verdict(gOK), base.Goroutines, end.Goroutines)
	fmt.Fprintf(&b, "- %s no live-heap growth: %s idle before, %s idle after\n", verdict(hOK), fmtBytes(int64(base.HeapAlloc)), fmtBytes(int64(end.HeapAlloc)))
	if counts[1] > 0 {
		fmt.Fprintf(&b, "- note: %d errors (see %s)\n", counts[1], filepath.Join(r.work, "long-ctxproxy.stderr"))
	}
	// The burst check starts its own servers; these would only sit idle.
	srv.stop()
	fake.stop()
	burst, err := r.burstRun()
	if err != nil {
		return "", err
	}
	return b.String() + "\n" + burst, nil
}
