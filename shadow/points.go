package shadow

import "sync"

// capacityPoints bounds the conversations whose candidates' clearing the lab remembers.
const capacityPoints = 100_000

// points remembers, per tenant, conversation and candidate, cleared′ at the candidate's latest
// measurement: a measurement that clears more is a new clearing point. Two generations of a
// map, the older dropped whole when the newer fills, as cachetrack's Tracker.
type points struct {
	mu       sync.Mutex
	cur, old map[pointKey]int64
}

type pointKey struct{ tenant, conversation, candidate string }

func newPoints() points { return points{cur: map[pointKey]int64{}} }

// next records cleared as the candidate's latest in the conversation and reports whether it
// is a new clearing point: more than at its latest earlier measurement (none: no new point).
// An unknown conversation ("") has no earlier measurement.
func (p *points) next(tenant, conversation, candidate string, cleared int64) bool {
	if conversation == "" {
		return false
	}
	k := pointKey{tenant, conversation, candidate}
	p.mu.Lock()
	defer p.mu.Unlock()
	prev, ok := p.cur[k]
	if !ok {
		prev, ok = p.old[k]
	}
	if len(p.cur) >= capacityPoints/2 {
		p.old, p.cur = p.cur, make(map[pointKey]int64, len(p.cur))
	}
	p.cur[k] = cleared
	return ok && cleared > prev
}
