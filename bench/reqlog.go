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
// upstream (sending each call, its body included, and reading its reply,
// over all calls). What is left is the proxy's own work: reading the
// client's body, the policy's rewrite, the memory commands, building each
// next request and the reply. A request with upstream_calls n made n-1
// memory rounds (each round: run the reply's memory calls, call upstream
// again).
//
// Its own time per round is the round's work alone: memory_rounds_duration
// (from each round's reply read to the next call begun: the memory commands,
// the reply's accounting, the next request built) ÷ (upstream_calls − 1).
// The request's whole own time ÷ its rounds, (duration − upstream_duration)
// ÷ (upstream_calls − 1), the figure of the runs before, is kept beside it:
// with one round a request it counts the client's body read and its rewrite
// (on 1 MiB, most of it) against the round.

// reqLine is a line of ctxproxy's log, the fields the bench reads.
type reqLine struct {
	Msg      string    `json:"msg"`
	Time     time.Time `json:"time"`
	Status   int       `json:"status"`
	Duration string    `json:"duration"`
	Upstream string    `json:"upstream_duration"`
	Calls    int       `json:"upstream_calls"`
	Rounds   string    `json:"memory_rounds_duration"`
	MemCmds  int       `json:"memory_commands"`
}

// reqRecord is one served request: when it began (the line's time, which
// is when it was logged at its end, less its duration: a request the
// client finished just before a phase's end may be logged just after it),
// the proxy's own time in it, its memory rounds and their own time.
type reqRecord struct {
	at       time.Time
	own      time.Duration
	rounds   int
	roundOwn time.Duration // memory_rounds_duration: the rounds' own work
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
		rec := reqRecord{at: l.Time.Add(-d), own: d - up, rounds: max(l.Calls-1, 0)}
		if rec.rounds > 0 {
			if rec.roundOwn, err1 = time.ParseDuration(l.Rounds); err1 != nil {
				return nil, fmt.Errorf("request log line at %s: memory_rounds_duration %q", l.Time, l.Rounds)
			}
		}
		out = append(out, rec)
	}
	return out, sc.Err()
}

// ownMeasure is what ownTimes reads of a request.
type ownMeasure int

const (
	perRequest    ownMeasure = iota // the request's own time
	perRound                        // its rounds' own work ÷ its rounds
	perRoundWhole                   // its whole own time ÷ its rounds (the runs before)
)

// ownTimes are the records logged in [from, to), sorted: the proxy's own
// time per request, or per memory round (of the requests that made rounds).
func ownTimes(recs []reqRecord, from, to time.Time, m ownMeasure) []time.Duration {
	var out []time.Duration
	for _, r := range recs {
		if r.at.Before(from) || !r.at.Before(to) {
			continue
		}
		switch {
		case m == perRequest:
			out = append(out, r.own)
		case r.rounds == 0:
		case m == perRound:
			out = append(out, r.roundOwn/time.Duration(r.rounds))
		default:
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
	m := perRequest
	if cl.perRound {
		m = perRound
		cl.ownOneWhole = newOwnTime(ownTimes(recs, ph.oneStart, ph.oneEnd, perRoundWhole))
	}
	cl.ownLoaded = newOwnTime(ownTimes(recs, ph.loadStart, ph.oneStart, m))
	cl.ownOne = newOwnTime(ownTimes(recs, ph.oneStart, ph.oneEnd, m))
	if cl.ownOne.n == 0 {
		return fmt.Errorf("request log %s: no request lines in the one-worker phase", path)
	}
	return nil
}
