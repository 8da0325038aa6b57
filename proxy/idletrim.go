package proxy

import (
	"sync"
	"sync/atomic"
	"time"
)

// After a burst (say 500 streams at once over an HTTP/1.1 upstream), the
// upstream transport keeps every connection the burst opened, up to
// MaxIdleConnsPerHost, until each has been idle for IdleConnTimeout (90 s).
// Each holds two goroutines and two 4 KiB buffers: 500 of them doubled the
// live heap and the goroutines every collection scans, and the proxy's GC
// work per request with them, for a minute and a half after the burst. A
// busy pool is reused most-recently-first, so the connections past what the
// load needs just sit there. idleTrim empties the idle pool once demand has
// fallen well below what it grew to: connections in use are not touched, and
// the next requests dial the few they need. Over HTTP/2 (the API itself) a
// burst opens few connections, and emptying the pool closes only those with
// no stream open.

const (
	// trimWindow is how often demand is compared with the pool.
	trimWindow = 10 * time.Second
	// A pool is trimmed when the most requests in flight since it was last
	// emptied exceed trimFactor × the last window's most, plus trimSlack: a
	// small pool, or a load that merely wavers, is left alone.
	trimFactor = 2
	trimSlack  = 16
)

// trimEpoch is the origin of idleTrim's monotonic clock.
var trimEpoch = time.Now()

// idleTrim counts the requests that may use the upstream transport and
// closes its idle connections when the pool outgrew the load. Its checks run
// at the end of a request, so an idle proxy does no work for it (and the
// transport's own timeout closes what it holds then).
type idleTrim struct {
	pool     interface{ CloseIdleConnections() } // nil: nothing to trim
	now      func() time.Duration                // monotonic; tests set it
	inflight atomic.Int64
	peak     atomic.Int64 // most in flight in the current window
	high     atomic.Int64 // most in flight since the pool was last emptied
	next     atomic.Int64 // the time of the next check, ns
	mu       sync.Mutex   // one check at a time
	trims    atomic.Int64 // times the pool was emptied (for tests and debugging)
}

// newIdleTrim trims rt's idle pool when rt has one (an *http.Transport has).
func newIdleTrim(rt any) *idleTrim {
	t := &idleTrim{now: func() time.Duration { return time.Since(trimEpoch) }}
	t.pool, _ = rt.(interface{ CloseIdleConnections() })
	t.next.Store(int64(trimWindow))
	return t
}

// begin counts a request that may go upstream; end must follow.
func (t *idleTrim) begin() {
	n := t.inflight.Add(1)
	for {
		p := t.peak.Load()
		if n <= p || t.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

// end counts the request done and, once a window has passed, checks the pool.
func (t *idleTrim) end() {
	t.inflight.Add(-1)
	if t.pool == nil {
		return
	}
	if now := t.now(); int64(now) >= t.next.Load() {
		t.check(now)
	}
}

// check closes the idle connections if the pool outgrew the last window's
// load, and starts the next window.
func (t *idleTrim) check(now time.Duration) {
	if !t.mu.TryLock() {
		return // another request is checking
	}
	defer t.mu.Unlock()
	if int64(now) < t.next.Load() {
		return
	}
	t.next.Store(int64(now + trimWindow))
	peak := t.peak.Swap(t.inflight.Load())
	high := max(t.high.Load(), peak)
	if high > trimFactor*peak+trimSlack {
		t.pool.CloseIdleConnections()
		t.trims.Add(1)
		high = peak
	}
	t.high.Store(high)
}
