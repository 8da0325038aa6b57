package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/cachetrack"
)

// manualClock is the clock ctxproxy measures its conversations' cache by (how long since a
// conversation's previous call) under --debug-manual-clock: the wall clock at start, then
// moved only by POST /debug/clock {"advance":"6m"} on the debug listener, so a test can pause a
// conversation past a cache TTL without waiting, as the fake upstream's clock does.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Advance string `json:"advance"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1024)).Decode(&req); err != nil {
		http.Error(w, "want {\"advance\": \"6m\"}: "+err.Error(), http.StatusBadRequest)
		return
	}
	d, err := time.ParseDuration(req.Advance)
	if err != nil || d < 0 {
		http.Error(w, fmt.Sprintf("advance: %q is not a non-negative Go duration", req.Advance), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"now": now.UTC().Format(time.RFC3339Nano)})
}

// cacheTracker is the tracker of the conversations' previous calls, on the manual clock when
// the flag asks (the clock's handler is returned for the debug listener), else the wall clock.
func cacheTracker(cfg *Settings) (*cachetrack.Tracker, http.Handler) {
	if !cfg.DebugManualClock {
		return cachetrack.New(nil, 0), nil
	}
	c := &manualClock{now: time.Now()}
	return cachetrack.New(c.Now, 0), c
}
