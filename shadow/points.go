package shadow

import (
	"context"
	"sync"
)

// capacityPoints bounds the conversations whose candidates' clearing the lab remembers.
const capacityPoints = 100_000

// points orders each candidate's measurements within a conversation, so that a measurement
// whose cleared′ (original − input tokens) exceeds that of the candidate's latest earlier
// measurement in the conversation is a new clearing point, whatever order their count_tokens
// calls come back in. A place is taken (open) in the order of the conversation's calls, when
// the lab is handed each; the measurement then waits for the earlier one to settle before it
// settles. Per tenant, conversation and candidate only the latest place is kept: two
// generations of a map, the older dropped whole when the newer fills, as cachetrack's Tracker.
type points struct {
	mu       sync.Mutex
	cur, old map[pointKey]*point
}

type pointKey struct{ tenant, conversation, candidate string }

// point is one measurement's place. cleared and known are written before done is closed and
// read only after.
type point struct {
	done    chan struct{}
	prev    *point // the candidate's earlier place in the conversation; nil when none
	cleared int64
	known   bool // cleared is a measurement's: this one's, or carried from an earlier one
}

func newPoints() points { return points{cur: map[pointKey]*point{}} }

// open takes the next place of candidate's measurements in conversation ("": not tracked, no
// earlier measurement).
func (p *points) open(tenant, conversation, candidate string) *point {
	pt := &point{done: make(chan struct{})}
	if conversation == "" {
		return pt
	}
	k := pointKey{tenant, conversation, candidate}
	p.mu.Lock()
	defer p.mu.Unlock()
	prev, ok := p.cur[k]
	if !ok {
		prev = p.old[k]
	}
	pt.prev = prev
	if len(p.cur) >= capacityPoints/2 {
		p.old, p.cur = p.cur, make(map[pointKey]*point, len(p.cur))
	}
	p.cur[k] = pt
	return pt
}

// settle records the place's outcome, cleared′ when measured (false: the call failed, and the
// earlier measurement's value stands for it), once the earlier place has settled (or ctx is
// done: then there is no earlier measurement to compare with). It reports whether the
// measurement is a new clearing point. Each place settles once.
func (pt *point) settle(ctx context.Context, cleared int64, measured bool) bool {
	defer close(pt.done)
	var prevCleared int64
	var prevKnown bool
	if pr := pt.prev; pr != nil {
		select {
		case <-pr.done:
			prevCleared, prevKnown = pr.cleared, pr.known
		case <-ctx.Done():
		}
	}
	pt.prev = nil // no chain of places outlives its settling
	if !measured {
		pt.cleared, pt.known = prevCleared, prevKnown
		return false
	}
	pt.cleared, pt.known = cleared, true
	return prevKnown && cleared > prevCleared
}
