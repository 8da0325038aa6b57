package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

// The proxy's own time comes from ctxproxy's request log (--log-level=info,
// one "request" line per client request): duration is the request's wall
// time in the proxy, upstream_duration the part of it spent waiting on the
// upstream (sending each call and reading its reply, over all calls).
// What is left is the proxy's own work: reading the client's body, the
// policy's rewrite, the memory commands, building each next request and
// the reply. A request with upstream_calls n made n-1 memory rounds (each
// round: run the reply's memory calls, call upstream again), so its time
// per round is (duration - upstream_duration) / (upstream_calls - 1).

// reqLine is a line of ctxproxy's log, the fields the bench reads.
type reqLine struct {
	Msg      string    `json:"msg"`
	Time     time.Time `json:"time"`
	Status   int       `json:"status"`
	Duration string    `json:"duration"`
	Upstream string    `json:"upstream_duration"`
	Calls    int       `json:"upstream_calls"`
	MemCmds  int       `json:"memory_commands"`
}

// reqRecord is one served request: when it began (the line's time, which
// is when it was logged at its end, less its duration: a request the
// client finished just before a phase's end may be logged just after it),
// the proxy's own time in it and its memory rounds.
type reqRecord struct {
	at     time.Time
	own    time.Duration
	rounds int
}

// parseRequestLog reads the request lines of a ctxproxy log (other lines
// and failed requests are skipped).
func parseRequestLog(r io.Reader) ([]reqRecord, error) {
	var out []reqRecord
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// The bench's copy of the log has each line prefixed with the
		// binary's name ("ctxproxy: {...}").
		line := sc.Bytes()
		if i := bytes.IndexByte(line, '{'); i > 0 {
			line = line[i:]
		}
		var l reqLine
		if json.Unmarshal(line, &l) != nil || l.Msg != "request" || l.Status != 200 {
			continue
		}
		d, err1 := time.ParseDuration(l.Duration)
		up, err2 := time.ParseDuration(l.Upstream)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("request log line at %s: duration %q, upstream_duration %q", l.Time, l.Duration, l.Upstream)
		}
		out = append(out, reqRecord{at: l.Time.Add(-d), own: d - up, rounds: max(l.Calls-1, 0)})
	}
	return out, sc.Err()
}

// ownTimes are the records logged in [from, to), sorted: the proxy's own
// time per memory round of the requests that made rounds when perRound
// (own / rounds), else per request.
func ownTimes(recs []reqRecord, from, to time.Time, perRound bool) []time.Duration {
	var out []time.Duration
	for _, r := range recs {
		if r.at.Before(from) || !r.at.Before(to) {
			continue
		}
		switch {
		case !perRound:
			out = append(out, r.own)
		case r.rounds > 0:
			out = append(out, r.own/time.Duration(r.rounds))
		}
	}
	slices.Sort(out)
	return out
}

// ownTime is the proxy's own time in one phase of a row.
type ownTime struct {
	n        int
	p50, p99 time.Duration
}

func newOwnTime(sorted []time.Duration) ownTime {
	return ownTime{n: len(sorted), p50: pct(sorted, .5), p99: pct(sorted, .99)}
}

// phaseTimes are the wall-clock bounds of a non-streaming load's two
// phases (the interleaved slices of every row fall inside them).
type phaseTimes struct {
	loadStart, oneStart, oneEnd time.Time
}

// ownFromLog reads a row's ctxproxy log and sets its own-time figures.
func (cl *cell) ownFromLog(path string, ph phaseTimes) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("request log: %w", err)
	}
	defer f.Close()
	recs, err := parseRequestLog(f)
	if err != nil {
		return fmt.Errorf("request log %s: %w", path, err)
	}
	cl.perRound = cl.row.memory
	cl.ownLoaded = newOwnTime(ownTimes(recs, ph.loadStart, ph.oneStart, cl.perRound))
	cl.ownOne = newOwnTime(ownTimes(recs, ph.oneStart, ph.oneEnd, cl.perRound))
	if cl.ownOne.n == 0 {
		return fmt.Errorf("request log %s: no request lines in the one-worker phase", path)
	}
	return nil
}
