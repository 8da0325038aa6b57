package memoryhook

import (
	"context"
	"sync"
	"time"
)

// Gate checks a model's write before it persists (memory.gate): a text
// that holds a secret is refused, and so is a write past the user's
// writes per rolling minute. Refusals name the kind of secret, never the
// secret, and nothing of a refused write is stored (history included):
// the checks run before the store is touched, or inside the edit, before
// the write. Operators' writes carry no Gate.
type Gate struct {
	RefuseSecrets bool
	MaxPerMinute  int          // 0: no rate limit
	Rate          WriteCounter // shared by every request of the process, or by the replicas
	Who           string       // whose writes are counted: the tenant and user
}

// WriteCounter counts a user's writes over a rolling minute. WriteRate counts in this process;
// the proxy counts in its limits store when replicas share one.
type WriteCounter interface {
	// Allow counts one write of who and reports whether it is within max a rolling minute; a
	// refused write is not counted.
	Allow(ctx context.Context, who string, max int) bool
}

// admit checks a write of text (nil for delete and rename) and counts it.
func (g *Gate) admit(ctx context.Context, text []byte) error {
	if g == nil {
		return nil
	}
	if g.RefuseSecrets {
		if s, ok := FindSecret(text); ok {
			return secretRefusal(s.Kind)
		}
	}
	if g.MaxPerMinute > 0 && g.Rate != nil && !g.Rate.Allow(ctx, g.Who, g.MaxPerMinute) {
		return &Refusal{Reason: RefusedRate, Err: errorf("Memory write refused: this user's memory takes at most %d writes a minute; wait a minute, then write again.", g.MaxPerMinute)}
	}
	return nil
}

// spliced refuses an edit whose result holds a secret the file did not
// hold before (one assembled from pieces across edits).
func (g *Gate) spliced(old, out []byte) error {
	if g == nil || !g.RefuseSecrets {
		return nil
	}
	for _, s := range FindSecrets(out) {
		if !containsBytes(old, s.Text) {
			return secretRefusal(s.Kind)
		}
	}
	return nil
}

func secretRefusal(kind string) error {
	return &Refusal{Reason: RefusedSecret, Err: errorf("Memory write refused: the text holds what looks like %s. Secrets are not kept in memory; write it again without the secret.", kind)}
}

// WriteRate counts writes per user over a rolling minute, in this
// process (replicas count apart: limits.WindowStore counts across them).
type WriteRate struct {
	mu    sync.Mutex
	now   func() time.Time
	hits  map[string][]time.Time
	swept time.Time
}

// NewWriteRate makes a counter on clock now (nil: time.Now).
func NewWriteRate(now func() time.Time) *WriteRate {
	if now == nil {
		now = time.Now
	}
	return &WriteRate{now: now, hits: map[string][]time.Time{}}
}

// Allow counts one write of who and reports whether it is within max a
// rolling minute; a refused write is not counted.
func (r *WriteRate) Allow(_ context.Context, who string, max int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	since := now.Add(-time.Minute)
	if now.Sub(r.swept) > time.Minute { // forget users idle for a minute
		for k, h := range r.hits {
			if len(h) == 0 || !h[len(h)-1].After(since) {
				delete(r.hits, k)
			}
		}
		r.swept = now
	}
	h := r.hits[who]
	i := 0
	for i < len(h) && !h[i].After(since) {
		i++
	}
	h = h[i:]
	if len(h) >= max {
		r.hits[who] = h
		return false
	}
	r.hits[who] = append(h, now)
	return true
}
