package fakeapi

import (
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// Fault kinds for Faults.Kinds.
const (
	Fault429        = "429"         // rate_limit_error with retry-after: 1
	Fault529        = "529"         // overloaded_error
	Fault500        = "500"         // api_error
	Fault503        = "503"         // api_error, 503
	FaultDrop       = "drop"        // connection closed before any byte
	FaultCut        = "cut"         // connection cut after 1-3 events (non-stream: mid-body)
	FaultErrorEvent = "error_event" // event: error overloaded_error after 1-3 events (non-stream: 529)
	FaultDelay      = "delay"       // up to MaxDelay before the headers
)

// AllFaults lists every fault kind.
var AllFaults = []string{Fault429, Fault529, Fault500, Fault503, FaultDrop, FaultCut, FaultErrorEvent, FaultDelay}

// Faults injects random faults into POST /v1/messages (not count_tokens or
// other paths), reproducibly for a given Seed and request order.
// Status and drop faults are answered without taking a scripted reply, so
// with a Script responder a retry gets the same turn; cut, error_event and
// delay faults alter the reply that was picked (a queued one is used up).
type Faults struct {
	Rate     float64       `json:"rate"`  // probability per request, 0..1
	Seed     uint64        `json:"seed"`  // PCG seed
	Kinds    []string      `json:"kinds"` // empty: AllFaults
	MaxDelay time.Duration `json:"-"`     // default 200ms
}

type faultState struct {
	mu  sync.Mutex
	f   Faults
	rng *rand.Rand
}

func (a *API) setFaults(f *Faults) {
	var fs *faultState
	if f != nil && f.Rate > 0 {
		ff := *f
		if len(ff.Kinds) == 0 {
			ff.Kinds = AllFaults
		}
		if ff.MaxDelay <= 0 {
			ff.MaxDelay = 200 * time.Millisecond
		}
		fs = &faultState{f: ff, rng: rand.New(rand.NewPCG(ff.Seed, ff.Seed^0x9e3779b97f4a7c15))}
	}
	a.mu.Lock()
	a.faults = fs
	a.mu.Unlock()
}

// roll picks a fault kind ("" for none) and a small number 1..3.
func (fs *faultState) roll() (string, int, time.Duration) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.rng.Float64() >= fs.f.Rate {
		return "", 0, 0
	}
	kind := fs.f.Kinds[fs.rng.IntN(len(fs.f.Kinds))]
	return kind, 1 + fs.rng.IntN(3), time.Duration(fs.rng.Int64N(int64(fs.f.MaxDelay) + 1))
}

// pickReply returns the reply for r, with a random fault applied if one is due.
func (a *API) pickReply(r *Request, stream bool) Reply {
	a.mu.Lock()
	fs := a.faults
	a.mu.Unlock()
	kind, n, d := "", 0, time.Duration(0)
	if fs != nil {
		kind, n, d = fs.roll()
	}
	switch kind {
	case Fault429:
		return RateLimited("1")
	case Fault529:
		return Overloaded()
	case Fault500:
		return ErrorReply(500, "api_error", "Internal server error")
	case Fault503:
		rep := ErrorReply(503, "api_error", "Service unavailable")
		rep.Header = http.Header{"Retry-After": {"1"}}
		return rep
	case FaultDrop:
		return Reply{Drop: true}
	case FaultErrorEvent:
		if !stream {
			return Overloaded()
		}
	}
	rep := a.next(r)
	switch kind {
	case FaultCut:
		rep.CutAfter = n
	case FaultErrorEvent:
		rep.ErrorEvent, rep.ErrorAfter = &APIError{Type: "overloaded_error", Message: "Overloaded"}, n
	case FaultDelay:
		rep.Delay += d
	}
	return rep
}
