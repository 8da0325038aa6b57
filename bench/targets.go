package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
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

// targets prints the bench's targets, each PASS or MISS, then the earlier
// issues' targets that still hold.
func (r *runner) targets(b *strings.Builder, micro []microResult) {
	b.WriteString("\n### Targets\n\n")
	r.bareTargets(b)
	r.nginxTarget(b)
	for _, m := range micro {
		if m.target && m.err == nil {
			ratio := m.bytesPerOp / float64(m.size)
			fmt.Fprintf(b, "- %s a %s rewrite < 0.5 ms with ≤ 1.1× the body allocated (%s): %s, %.2f×\n",
				check(m.nsPerOp < 5e5 && ratio <= 1.1), fmtBytes(int64(m.size)), m.name, fmtDur(time.Duration(m.nsPerOp)), ratio)
		}
	}
	if cl := r.find("5i", "small"); cl != nil && cl.ownErr == nil && cl.ownOne.n > 0 {
		// Held, as when it was set, to the request's whole own time ÷ its rounds (the stricter figure).
		fmt.Fprintf(b, "- %s memory proxy mode: the proxy's own time per memory round < 250 µs p50 on the file store "+
			"(row 5i's request log, one worker, the request's whole own time ÷ its rounds): p50 %s, p99 %s over %d rounds "+
			"(the round's own work alone: p50 %s, p99 %s; under load p50 %s, p99 %s)\n",
			check(cl.ownOneWhole.p50 < 250*time.Microsecond), fmtDur(cl.ownOneWhole.p50), fmtDur(cl.ownOneWhole.p99), cl.ownOneWhole.n,
			fmtDur(cl.ownOne.p50), fmtDur(cl.ownOne.p99), fmtDur(cl.ownLoaded.p50), fmtDur(cl.ownLoaded.p99))
	}
	r.memoryLargeTargets(b)
	r.lookupTarget(b)
	r.shadowTarget(b)
	b.WriteString("- feature cost (caps, history, tracing; off, configured, active): see the next section\n")
	r.upstreamShare(b)

	b.WriteString("\n### Earlier targets, still checked\n\n")
	r.streamTargets(b)
	b.WriteString("- growth over 5 minutes: see `go run ./bench -long`\n")
}

// bareFor4 is the bare proxy row 4 is held to: row 2pr (pooled, fed the
// body as row 4's policy rewrites it, so the upstream does the same work
// behind both) when it ran, else the pooled bare proxy.
func (r *runner) bareFor4(load string) *cell {
	if cl := r.find("2pr", load); cl != nil {
		return cl
	}
	return r.bare(load)
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
		cl, bare := r.find("4", t.load), r.bareFor4(t.load)
		if cl == nil || bare == nil || cl.cpuPer() == 0 || bare.cpuPer() == 0 {
			continue
		}
		v := float64(cl.cpuPer()) / float64(bare.cpuPer())
		fmt.Fprintf(b, "- %s CPU per request, enforcing + memory tool (row 4), ≤ %.2f× the pooled bare proxy's (row %s), %s: %s vs %s, %.2f×\n",
			check(v <= t.limit), t.limit, bare.row.id, t.what, fmtDur(cl.cpuPer()), fmtDur(bare.cpuPer()), v)
	}
	if cl, bare := r.find("4", "small"), r.bareFor4("small"); cl != nil && bare != nil && bare.rps > 0 {
		v := cl.rps / bare.rps
		fmt.Fprintf(b, "- %s enforcing + memory tool, 2 KiB bodies: ≥ 0.95× the pooled bare proxy's req/s at %d connections: %.2f× (%.0f vs %.0f, row %s)\n",
			check(v >= 0.95), r.c.concurrency, v, cl.rps, bare.rps, bare.row.id)
		d := cl.p50 - bare.p50
		fmt.Fprintf(b, "- %s enforcing + memory tool, 2 KiB bodies: ≤ 15 µs added p50 at one connection over row %s: %s (%s vs %s)\n",
			check(d <= 15*time.Microsecond), bare.row.id, fmtDelta(d), fmtDur(cl.p50), fmtDur(bare.p50))
	}
	if cl, bare := r.find("4", "large"), r.bareFor4("large"); cl != nil && bare != nil && bare.rps > 0 {
		v := cl.rps / bare.rps
		fmt.Fprintf(b, "- %s 1 MiB tool transcripts: ≥ 0.95× the pooled bare proxy's req/s (%d connections): %.2f× (%.0f vs %.0f, row %s)\n",
			check(v >= 0.95), r.c.largeConc, v, cl.rps, bare.rps, bare.row.id)
	}
}

// memoryLargeTargets: memory proxy mode on 1 MiB transcripts. A plain answer (row 5p) costs
// ≤ 1.15× the pooled bare proxy's CPU per request and reaches ≥ 0.92× its req/s; with one
// memory call (rows 5 and 5i), the proxy's own time per memory round is ≤ 2× its figure on
// 2 KiB bodies (row 5i, one worker, p50).
func (r *runner) memoryLargeTargets(b *strings.Builder) {
	if cl, bare := r.find("5p", "large"), r.bareFor4("large"); cl != nil && bare != nil && cl.cpuPer() > 0 && bare.cpuPer() > 0 && bare.rps > 0 {
		v, w := float64(cl.cpuPer())/float64(bare.cpuPer()), cl.rps/bare.rps
		fmt.Fprintf(b, "- %s memory proxy mode, a plain answer, 1 MiB tool transcripts (row 5p): CPU per request ≤ 1.15× the pooled bare proxy's (row %s): %s vs %s, %.2f×\n",
			check(v <= 1.15), bare.row.id, fmtDur(cl.cpuPer()), fmtDur(bare.cpuPer()), v)
		fmt.Fprintf(b, "- %s memory proxy mode, a plain answer, 1 MiB tool transcripts (row 5p): ≥ 0.92× the pooled bare proxy's req/s (%d connections): %.2f× (%.0f vs %.0f)\n",
			check(w >= 0.92), r.c.largeConc, w, cl.rps, bare.rps)
	}
	if cl, off := r.find("5t", "large"), r.find("5p", "large"); cl != nil && off != nil && off.cpuPer() > 0 && off.rps > 0 {
		fmt.Fprintf(b, "- (shown) memory proxy mode with thinking on, 1 MiB tool transcripts (row 5t, the hidden rounds looked up) against row 5p: "+
			"CPU/req %s vs %s (%.2f×), req/s %.0f vs %.0f (%.2f×)\n",
			fmtDur(cl.cpuPer()), fmtDur(off.cpuPer()), float64(cl.cpuPer())/float64(off.cpuPer()), cl.rps, off.rps, cl.rps/off.rps)
	}
	large, small := r.find("5i", "large"), r.find("5i", "small")
	if large != nil && small != nil && large.ownErr == nil && small.ownErr == nil && large.ownOne.n > 0 && small.ownOne.p50 > 0 {
		v := float64(large.ownOne.p50) / float64(small.ownOne.p50)
		fmt.Fprintf(b, "- %s memory proxy mode, one memory call on a 1 MiB tool transcript: the proxy's own time per memory round ≤ 2× its 2 KiB figure "+
			"(row 5i, one worker, p50 of memory_rounds_duration ÷ rounds: from the reply to the next call begun): %s vs %s, %.2f× (p99 %s; under load p50 %s; "+
			"the request's whole own time ÷ its rounds: %s vs %s, %.2f×)\n",
			check(v <= 2), fmtDur(large.ownOne.p50), fmtDur(small.ownOne.p50), v, fmtDur(large.ownOne.p99), fmtDur(large.ownLoaded.p50),
			fmtDur(large.ownOneWhole.p50), fmtDur(small.ownOneWhole.p50), float64(large.ownOneWhole.p50)/float64(max(small.ownOneWhole.p50, 1)))
	}
}

// lookupTarget: the conversation lookup (row 4 tracks every clearing conversation) costs
// within 2% of row 4's CPU per request, against row 4n (the same load, tracking off).
func (r *runner) lookupTarget(b *strings.Builder) {
	for _, load := range []string{"small", "large"} {
		cl, off := r.find("4", load), r.find("4n", load)
		if cl == nil || off == nil || cl.cpuPer() == 0 || off.cpuPer() == 0 {
			continue
		}
		d := float64(cl.cpuPer()-off.cpuPer()) / float64(cl.cpuPer())
		fmt.Fprintf(b, "- %s %s: the conversation lookup (row 4 − row 4n) within 2%% of row 4's CPU per request: %s vs %s, %+.1f%%\n",
			check(d <= 0.02), load, fmtDur(cl.cpuPer()), fmtDur(off.cpuPer()), 100*d)
	}
}

// shadowTarget: the policy lab at sample 0.05 costs the request path (row 4s0: sampled and
// copied, its calls dropped) within 3% of row 4's CPU per request; the lab's own work (its
// count_tokens calls, row 4s − row 4s0) is reported beside it, not in the target.
func (r *runner) shadowTarget(b *strings.Builder) {
	for _, load := range []string{"small", "large"} {
		cl, client, all := r.find("4", load), r.find("4s0", load), r.find("4s", load)
		if cl == nil || client == nil || cl.cpuPer() == 0 || client.cpuPer() == 0 {
			continue
		}
		d := float64(client.cpuPer()-cl.cpuPer()) / float64(cl.cpuPer())
		fmt.Fprintf(b, "- %s %s: shadow at sample 0.05, the client-facing CPU per request (row 4s0) within 3%% of row 4's: %s vs %s, %+.1f%%",
			check(d <= 0.03), load, fmtDur(client.cpuPer()), fmtDur(cl.cpuPer()), 100*d)
		if all != nil && all.cpuPer() > 0 {
			fmt.Fprintf(b, "; the lab's own work (row 4s − row 4s0, its count_tokens calls): %s per request, %+.1f%% of row 4",
				fmtDur(all.cpuPer()-client.cpuPer()), 100*float64(all.cpuPer()-client.cpuPer())/float64(cl.cpuPer()))
		}
		b.WriteString("\n")
	}
}

func (r *runner) nginxTarget(b *strings.Builder) {
	const what = "1 MiB transcripts: ctxproxy enforcing (row 4) ahead of nginx (row Nr, fed the rewritten body; else N) in req/s"
	cl, ng := r.find("4", "large"), r.find("Nr", "large")
	if ng == nil {
		ng = r.find("N", "large")
	}
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

// featureCost prints each feature's rows against the row that has it off
// (the targets: configured but not triggered, and active, each its own row).
func (r *runner) featureCost(b *strings.Builder) {
	pairs := []struct{ what, row, off string }{
		{"spend caps + rate limits configured for another tenant, none for this one", "4c0", "4"},
		{"spend caps + rate limits active (in memory)", "4c", "4"},
		{"tracing configured, sampler always_off", "4t0", "4"},
		{"tracing on, every request sampled and exported", "4t", "4"},
		{"memory history on (the default) but not triggered (view rounds), against history off", "5", "5h0"},
		{"memory history on against off, a write round (create + delete) per request", "5h", "5w"},
		{"a write round instead of a view round (history off)", "5w", "5h0"},
		{"request log at --log-level=info", "4i", "4"},
		{"request log at --log-level=info, memory proxy", "5i", "5"},
		{"thinking on in memory proxy mode (the hidden rounds' lookup), a plain answer", "5t", "5p"},
	}
	var lines []string
	for _, p := range pairs {
		cl, off := r.find(p.row, "small"), r.find(p.off, "small")
		if cl == nil || off == nil || off.rps == 0 || off.cpuPer() == 0 {
			continue
		}
		lines = append(lines, fmt.Sprintf("- %s: row %s vs row %s: CPU/req %s vs %s (%.2f×), req/s %.0f vs %.0f (%.2f×), p50 at one worker %s",
			p.what, p.row, p.off, fmtDur(cl.cpuPer()), fmtDur(off.cpuPer()), float64(cl.cpuPer())/float64(off.cpuPer()),
			cl.rps, off.rps, cl.rps/off.rps, fmtDelta(cl.p50-off.p50)))
	}
	if len(lines) == 0 {
		return
	}
	b.WriteString("\n### Feature cost, 2 KiB bodies\n\n")
	b.WriteString("Each feature's row against the same proxy with the feature off, in the same interleaved run. " +
		"Off is a row without it: caps in no tenant's policy, no OTEL_* endpoint, memory.history keep_days: 0.\n\n")
	b.WriteString(strings.Join(lines, "\n") + "\n")
}

// rowNotes says what the rows that need it measured: nginx's processes,
// the spans the tracing rows exported, the proxy's own time from the
// request log, and the memory rows' history logs.
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
	case row.sampler != "" && r.sink != nil:
		ex, spans, bad := r.sink.received(cl.tag)
		s := fmt.Sprintf("OTEL_TRACES_SAMPLER=%s; the bench's OTLP/HTTP sink received %d exports with %d spans", row.sampler, ex, spans)
		if cl.cpuN > 0 {
			s += fmt.Sprintf(" (%.1f per measured request)", float64(spans)/float64(cl.cpuN))
		}
		if bad > 0 {
			s += fmt.Sprintf(", %d undecodable", bad)
		}
		return s
	case row.logLevel == "info":
		return ownNote(cl)
	case row.memory && cl.load == "small":
		return r.historyNote(cl)
	case row.caps:
		return "policies folder with a capped tenant (limited.yaml: daily and monthly tenant caps, a per-user cap, requests and input tokens per minute)"
	}
	return ""
}

func ownNote(cl *cell) string {
	if cl.ownErr != nil {
		return "proxy's own time: " + cl.ownErr.Error()
	}
	what := "the proxy's own time per request: duration − upstream_duration of its request log lines"
	if cl.perRound {
		what = "the proxy's own time per memory round: memory_rounds_duration ÷ (upstream_calls − 1) of its request log lines " +
			"(the round's own work: from its reply read to the next call begun; sending that call, its body included, is upstream time) " +
			"[the request's whole own time ÷ its rounds, (duration − upstream_duration) ÷ (upstream_calls − 1), one worker: p50 " +
			fmtDur(cl.ownOneWhole.p50) + ", p99 " + fmtDur(cl.ownOneWhole.p99) + "]"
	}
	return fmt.Sprintf("%s: one worker p50 %s, p99 %s (%d); under load p50 %s, p99 %s (%d)", what,
		fmtDur(cl.ownOne.p50), fmtDur(cl.ownOne.p99), cl.ownOne.n, fmtDur(cl.ownLoaded.p50), fmtDur(cl.ownLoaded.p99), cl.ownLoaded.n)
}

// historyNote: what the memory row's rounds did and the history log the
// file store kept for them.
func (r *runner) historyNote(cl *cell) string {
	what := "a view round per request (history not triggered)"
	if cl.row.write {
		what = "a write round per request: create a file, then delete it"
	}
	lines, size, err := historyLog(filepath.Join(r.work, cl.tag, "memories", ".history"))
	if err != nil {
		return what + "; history log: " + err.Error()
	}
	return fmt.Sprintf("%s; the file store's history log: %d records, %s", what, lines, fmtBytes(size))
}

// historyLog counts the records (lines) and bytes of a file store's
// history logs (one per tenant) in dir.
func historyLog(dir string) (lines int, size int64, err error) {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".jsonl") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return 0, 0, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			lines++
			size += int64(len(sc.Bytes())) + 1
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return 0, 0, err
		}
	}
	return lines, size, nil
}
