// Package cachetrack remembers, per conversation, the previous upstream call, and decides what a
// call's cache misses are charged to (the net-savings rules).
//
// The API applies context edits on its side, so its cache diagnostics compare requests as sent
// and will most likely not see a miss an edit caused (the API reference's prompt-caching
// section, cache diagnostics). The damage shows in usage instead, and the proxy is the one party that sees every
// call of a conversation: a call that cleared more than the previous call of its conversation
// (a new clearing point) and read less than that call cached missed the difference because of
// the edits, unless the miss has another cause this package can tell.
//
// A conversation is found without hashing the whole body: a thread names it (its previous reply's id); a client that
// resends its history is recognised by the tool uses of its last assistant turn, which are the
// previous reply's (tool_use ids are unique). A conversation a replica has not seen (the first
// call, another replica's, state lost in a restart) is unknown.
//
// The pieces: ReadRequest reads what a request says about its conversation (its keys, whether
// the client asked for cache diagnostics itself); a Tracker remembers each conversation's
// previous call (Prev) in bounded memory; Attribute gives a call's Verdict, the missed tokens and
// their cause (a change ctxproxy sees in model, tools or system first, then the API's own
// diagnosis when the proxy asked for it, then expiry, and only then the edits), which package
// tokens prices as the edits' cache penalty.
package cachetrack

import (
	"hash/maphash"
	"sync"
	"time"
)

// Key names a conversation within a tracker; the zero Key names none.
type Key uint64

var seed = maphash.MakeSeed()

// Hash is a process-local hash of b (system prompts and tool lists are compared by it).
func Hash(b []byte) uint64 { return maphash.Bytes(seed, b) }

// keyOf mixes a scope (tenant and key id) with what names the conversation in it.
func keyOf(scope, kind, id string) Key {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(scope)
	h.WriteByte(0)
	h.WriteString(kind)
	h.WriteByte(0)
	h.WriteString(id)
	k := Key(h.Sum64())
	if k == 0 {
		k = 1
	}
	return k
}

// MessageKey names the conversation whose last reply was message id (a thread continues from
// it); zero for no id.
func MessageKey(scope, id string) Key {
	if id == "" {
		return 0
	}
	return keyOf(scope, "message", id)
}

// TurnKey names the conversation whose last reply made the tool uses ids (in order); zero when
// there are none.
func TurnKey(scope string, ids []string) Key {
	var t Turn
	for _, id := range ids {
		t.Block(scope, "tool_use", "", id)
	}
	return t.Key()
}

// TTLs a call can write.
const (
	TTL5m = 5 * time.Minute
	TTL1h = time.Hour
)

// Prev is what a conversation's previous call left.
type Prev struct {
	At time.Time // when the call was sent
	// Cached is P: what the call read from and wrote to the cache (read + creation).
	Cached int64
	// TTL is the longest TTL the conversation's cache was written with, up to this call.
	TTL                  time.Duration
	Model                string
	System, Tools        uint64 // Hash of the request's system and tools
	ClearedToolUses      int64
	ClearedThinkingTurns int64
	MessageID            string
	// Conversation names the conversation in the ledger: the message id of its first call this
	// tracker saw, carried from call to call.
	Conversation string
}

// Call is what this package needs of one call: its request, its usage and its edits.
type Call struct {
	At                                        time.Time
	Model                                     string
	System, Tools                             uint64
	ClearedToolUses, ClearedThinkingTurns     int64
	CacheRead, CacheCreation, CacheCreation1h int64
	MessageID                                 string
	// Diagnosis is the API's cache_miss_reason.type when the request asked for diagnostics
	// ("" for none, null or pending).
	Diagnosis string
}

// Causes, as the ledger's cache_miss_cause names them.
const (
	CauseEdits  = "edits"
	CauseExpiry = "expiry"
	CauseModel  = "model"
	CauseSystem = "system"
	CauseTools  = "tools"
	CauseClient = "client"
)

// Verdict is what a call's cache misses are charged to.
type Verdict struct {
	Known  bool   // the conversation's previous call was known
	Missed int64  // max(0, P_previous − cache read)
	Cause  string // "" when there was no miss or no known cause
}

// Attribute decides the verdict of c given its conversation's previous call (nil: unknown). A
// change ctxproxy sees itself (model, tools, system) comes first, then the API's diagnosis, then
// expiry (more time since the previous call than the longest TTL it wrote); only a miss none of
// these explain, on a call that cleared more tool uses or thinking turns than the previous one,
// is the edits'. A miss with no known cause and no new clearing point has no cause.
func Attribute(prev *Prev, c *Call) Verdict {
	if prev == nil {
		return Verdict{}
	}
	v := Verdict{Known: true, Missed: max(0, prev.Cached-c.CacheRead)}
	if v.Missed == 0 {
		return v
	}
	switch {
	case c.Model != prev.Model:
		v.Cause = CauseModel
	case c.Tools != prev.Tools:
		v.Cause = CauseTools
	case c.System != prev.System:
		v.Cause = CauseSystem
	case c.Diagnosis == "model_changed":
		v.Cause = CauseModel
	case c.Diagnosis == "tools_changed":
		v.Cause = CauseTools
	case c.Diagnosis == "system_changed":
		v.Cause = CauseSystem
	case c.Diagnosis == "messages_changed":
		v.Cause = CauseClient
	case c.At.Sub(prev.At) > prev.TTL:
		v.Cause = CauseExpiry
	case c.ClearedToolUses > prev.ClearedToolUses || c.ClearedThinkingTurns > prev.ClearedThinkingTurns:
		v.Cause = CauseEdits
	}
	return v
}

// Next is what c leaves for its conversation's next call.
func Next(prev *Prev, c *Call) Prev {
	ttl := TTL5m
	if prev != nil && c.CacheCreation == 0 {
		ttl = prev.TTL // it wrote nothing: what it read keeps its TTL
	}
	if c.CacheCreation1h > 0 {
		ttl = TTL1h
	}
	conv := c.MessageID
	if prev != nil && prev.Conversation != "" {
		conv = prev.Conversation
	}
	return Prev{At: c.At, Cached: c.CacheRead + c.CacheCreation, TTL: ttl, Model: c.Model,
		System: c.System, Tools: c.Tools, ClearedToolUses: c.ClearedToolUses,
		ClearedThinkingTurns: c.ClearedThinkingTurns, MessageID: c.MessageID, Conversation: conv}
}

// DefaultCapacity bounds the conversations a Tracker remembers.
const DefaultCapacity = 100_000

// Tracker remembers the previous call of up to about capacity conversations: two generations
// of a map, the older dropped whole when the newer fills, so memory stays bounded without a
// list to maintain on every call and a conversation seen within the last capacity calls is
// kept. Safe for concurrent use.
type Tracker struct {
	now      func() time.Time
	capacity int

	mu       sync.Mutex
	cur, old map[Key]Prev
}

// New is a tracker reading time from now (time.Now when nil) remembering about capacity
// conversations (DefaultCapacity when ≤ 0).
func New(now func() time.Time, capacity int) *Tracker {
	if now == nil {
		now = time.Now
	}
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	return &Tracker{now: now, capacity: capacity, cur: map[Key]Prev{}}
}

// Now is the tracker's clock (tests inject it).
func (t *Tracker) Now() time.Time { return t.now() }

// Lookup is the previous call of conversation k, if remembered.
func (t *Tracker) Lookup(k Key) (Prev, bool) {
	if k == 0 {
		return Prev{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.cur[k]; ok {
		return p, true
	}
	p, ok := t.old[k]
	return p, ok
}

// Store remembers p as the previous call of conversation k (a zero k is ignored).
func (t *Tracker) Store(k Key, p Prev) {
	if k == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.cur) >= (t.capacity+1)/2 {
		t.old, t.cur = t.cur, make(map[Key]Prev, len(t.cur))
	}
	t.cur[k] = p
}

// Len is how many conversations are remembered (both generations; a key in both counts twice).
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.cur) + len(t.old)
}
