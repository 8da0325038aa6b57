package main

import (
	"fmt"
	"strings"
	"time"
)

func check(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// cpuPer is a cell's CPU per request (0 when it has none).
func (cl *cell) cpuPer() time.Duration {
	if cl == nil || cl.cpuN == 0 {
		return 0
	}
	return cl.cpu / time.Duration(cl.cpuN)
}

// targets prints issue 20's targets, each PASS or MISS, then the earlier
// issues' targets that still hold.
func (r *runner) targets(b *strings.Builder, micro []microResult) {
	b.WriteString("\n### Targets (issue 20)\n\n")
	r.bareTargets(b)
	r.nginxTarget(b)
	for _, m := range micro {
		if strings.HasSuffix(m.name, "large") && m.err == nil {
			ratio := m.bytesPerOp / float64(m.size)
			fmt.Fprintf(b, "- %s a %s rewrite < 0.5 ms with ≤ 1.1× the body allocated: %s, %.2f×\n",
				check(m.nsPerOp < 5e5 && ratio <= 1.1), fmtBytes(int64(m.size)), fmtDur(time.Duration(m.nsPerOp)), ratio)
		}
	}
	if cl := r.find("5i", "small"); cl != nil && cl.ownErr == nil && cl.ownOne.n > 0 {
		fmt.Fprintf(b, "- %s memory proxy mode: the proxy's own time per memory round < 250 µs p50 on the file store "+
			"(row 5i's request log, one worker): p50 %s, p99 %s over %d rounds (under load: p50 %s, p99 %s)\n",
			check(cl.ownOne.p50 < 250*time.Microsecond), fmtDur(cl.ownOne.p50), fmtDur(cl.ownOne.p99), cl.ownOne.n,
			fmtDur(cl.ownLoaded.p50), fmtDur(cl.ownLoaded.p99))
	}
	r.upstreamShare(b)

	b.WriteString("\n### Earlier targets (issue 6), still checked\n\n")
	r.streamTargets(b)
	b.WriteString("- growth over 5 minutes: see `go run ./bench -long`\n")
}

// bareTargets: row 4 (enforcing a policy, the memory tool injected) beside
// the pooled bare proxy.
func (r *runner) bareTargets(b *strings.Builder) {
	for _, t := range []struct {
		load  string
		limit float64
		what  string
	}{
		{"small", 1.10, "2 KiB bodies"},
		{"large", 1.25, "1 MiB tool transcripts"},
	} {
		cl, bare := r.find("4", t.load), r.bare(t.load)
		if cl == nil || bare == nil || cl.cpuPer() == 0 || bare.cpuPer() == 0 {
			continue
		}
		v := float64(cl.cpuPer()) / float64(bare.cpuPer())
		fmt.Fprintf(b, "- %s CPU per request, enforcing + memory tool (row 4), ≤ %.2f× the pooled bare proxy's (row %s), %s: %s vs %s, %.2f×\n",
			check(v <= t.limit), t.limit, bare.row.id, t.what, fmtDur(cl.cpuPer()), fmtDur(bare.cpuPer()), v)
	}
	if cl, bare := r.find("4", "small"), r.bare("small"); cl != nil && bare != nil && bare.rps > 0 {
		v := cl.rps / bare.rps
		fmt.Fprintf(b, "- %s enforcing + memory tool, 2 KiB bodies: ≥ 0.95× the pooled bare proxy's req/s at %d connections: %.2f× (%.0f vs %.0f, row %s)\n",
			check(v >= 0.95), r.c.concurrency, v, cl.rps, bare.rps, bare.row.id)
		d := cl.p50 - bare.p50
		fmt.Fprintf(b, "- %s enforcing + memory tool, 2 KiB bodies: ≤ 15 µs added p50 at one connection over row %s: %s (%s vs %s)\n",
			check(d <= 15*time.Microsecond), bare.row.id, fmtDelta(d), fmtDur(cl.p50), fmtDur(bare.p50))
	}
	if cl, bare := r.find("4", "large"), r.bare("large"); cl != nil && bare != nil && bare.rps > 0 {
		v := cl.rps / bare.rps
		fmt.Fprintf(b, "- %s 1 MiB tool transcripts: ≥ 0.95× the pooled bare proxy's req/s (%d connections): %.2f× (%.0f vs %.0f, row %s)\n",
			check(v >= 0.95), r.c.largeConc, v, cl.rps, bare.rps, bare.row.id)
	}
}

func (r *runner) nginxTarget(b *strings.Builder) {
	const what = "1 MiB transcripts: ctxproxy enforcing (row 4) ahead of nginx (row N) in req/s"
	cl, ng := r.find("4", "large"), r.find("N", "large")
	switch {
	case r.nginx == "" && len(r.skipped) > 0 && cl != nil:
		fmt.Fprintf(b, "- — %s: not measured, nginx is not installed\n", what)
	case cl != nil && ng != nil && ng.rps > 0:
		fmt.Fprintf(b, "- %s %s: %.0f vs %.0f (%.2f×)\n", check(cl.rps > ng.rps), what, cl.rps, ng.rps, cl.rps/ng.rps)
	}
}

// upstreamShare: the fake shares the machine, and a body with
// context_management costs it more (it applies the edits): row 1r / row 1
// is that share. Dividing it out leaves what the proxy itself costs.
func (r *runner) upstreamShare(b *strings.Builder) {
	for _, load := range []string{"small", "large"} {
		cl, bare := r.find("4", load), r.bare(load)
		d, dr := r.find("1", load), r.find("1r", load)
		if cl == nil || bare == nil || bare.rps == 0 || d == nil || dr == nil || d.rps == 0 {
			continue
		}
		v, up := cl.rps/bare.rps, dr.rps/d.rps
		fmt.Fprintf(b, "- (%s: the upstream alone serves the rewritten body at %.2f× its rate for the original (row 1r / row 1); "+
			"row 4 ÷ that = %.2f× bare: the proxy's own share)\n", load, up, v/up)
	}
}

func (r *runner) streamTargets(b *strings.Builder) {
	bare := r.bare("streams")
	for _, id := range []string{"3", "4", "5"} {
		if cl := r.find(id, "streams"); cl != nil && bare != nil {
			d := cl.p99 - bare.p99
			fmt.Fprintf(b, "- %s row %s: event p99 ≤ bare + 200µs: %s vs %s (%s)\n", check(d <= 200*time.Microsecond), id,
				fmtDur(cl.p99), fmtDur(bare.p99), fmtDelta(d))
		}
	}
	for _, id := range []string{"4", "5"} {
		if cl := r.find(id, "streams"); cl != nil {
			fmt.Fprintf(b, "- %s row %s: memory per open stream < 64 KiB: live heap+stacks %s (RSS growth %s, %.1f goroutines per stream)\n",
				check(cl.heapPerStream > 0 && cl.heapPerStream < 64<<10), id, fmtBytes(cl.heapPerStream), fmtBytes(cl.memPerStream), cl.goroutinesPerOpen)
		}
	}
	if bare != nil {
		fmt.Fprintf(b, "- (bare proxy per open stream, for scale: live heap+stacks %s, RSS growth %s, %.1f goroutines)\n",
			fmtBytes(bare.heapPerStream), fmtBytes(bare.memPerStream), bare.goroutinesPerOpen)
	}
}

// rowNotes says what the rows that need it measured: nginx's processes and
// the proxy's own time from the request log.
func (r *runner) rowNotes(b *strings.Builder) {
	var lines []string
	nginxSaid := false
	for _, cl := range r.cells {
		if cl.row.kind == "nginx" && nginxSaid {
			lines = append(lines, fmt.Sprintf("- row N, %s: master and %d workers, as above", cl.load, cl.workers))
			continue
		}
		nginxSaid = nginxSaid || cl.row.kind == "nginx"
		if n := r.rowNote(cl); n != "" {
			lines = append(lines, fmt.Sprintf("- row %s, %s: %s", cl.row.id, cl.load, n))
		}
	}
	if len(lines) == 0 {
		return
	}
	b.WriteString("\n### Row notes\n\n" + strings.Join(lines, "\n") + "\n")
}

func (r *runner) rowNote(cl *cell) string {
	row := cl.row
	switch {
	case row.kind == "nginx":
		return fmt.Sprintf("nginx's master and %d workers (worker_processes = GOMAXPROCS), config in the work folder; "+
			"CPU/req sums utime+stime of the master, its workers and what it reaped (/proc/PID/stat); "+
			"peak RSS sums each process's VmHWM, so pages they share count once per process", cl.workers)
	case row.logLevel == "info" && cl.load == "small":
		return ownNote(cl)
	}
	return ""
}

func ownNote(cl *cell) string {
	if cl.ownErr != nil {
		return "proxy's own time: " + cl.ownErr.Error()
	}
	what := "the proxy's own time per request: duration − upstream_duration of its request log lines"
	if cl.perRound {
		what = "the proxy's own time per memory round: (duration − upstream_duration) ÷ (upstream_calls − 1) of its request log lines " +
			"(2 upstream calls, 1 round per request here: the request's whole own time, its rewrite included, counts against its one round)"
	}
	return fmt.Sprintf("%s: one worker p50 %s, p99 %s (%d); under load p50 %s, p99 %s (%d)", what,
		fmtDur(cl.ownOne.p50), fmtDur(cl.ownOne.p99), cl.ownOne.n, fmtDur(cl.ownLoaded.p50), fmtDur(cl.ownLoaded.p99), cl.ownLoaded.n)
}
