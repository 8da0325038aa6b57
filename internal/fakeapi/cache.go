package fakeapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// The prompt cache and cache diagnostics (shared spec: prompt caching).
//
// With Options.Cache "on" the fake keeps a cache per upstream credential and
// model, looks each request's breakpoints up in it after applying the
// request's context edits, reports the hit and the writes in usage, and
// answers diagnostics. Its time is a clock the tests move (AdvanceClock,
// POST /_fake/clock): nothing here ever sleeps or reads the wall clock unless
// WithClock says so. With "off" (the default) none of it runs and replies
// keep the numbers and shape they always had; the request's cache_control
// and diagnostics fields are validated either way, as the API does.

// Switch is an on/off option whose zero value means the option's default.
// In JSON it is "on" or "off" (true and false are accepted too).
type Switch string

// Switch values.
const (
	On  Switch = "on"
	Off Switch = "off"
)

// is reports the switch's value, def when unset.
func (s Switch) is(def bool) bool {
	switch s {
	case On:
		return true
	case Off:
		return false
	}
	return def
}

// UnmarshalJSON takes "on", "off", true, false or null (unset).
func (s *Switch) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true", `"on"`:
		*s = On
	case "false", `"off"`:
		*s = Off
	case "null", `""`:
		*s = ""
	default:
		return fmt.Errorf("want \"on\" or \"off\", got %s", b)
	}
	return nil
}

// CacheOptions are the prompt cache's switches, one per rule the spec marks
// unverified or that tests want to move. Every zero value is the default, so
// Options{} is the cache off and Options{CacheOptions: CacheOptions{Cache:
// On}} the cache as the spec's defaults describe it. In /_fake/options they
// sit beside the other options under the same names.
type CacheOptions struct {
	// Cache turns the prompt cache model on (default off: usage and reply
	// shapes as they have always been).
	Cache Switch `json:"cache"`
	// Lookback is how many positions a breakpoint searches back for an
	// earlier write, the breakpoint itself counted (default 20).
	Lookback int `json:"lookback,omitempty"`
	// ToolRunsOnePosition counts a run of adjacent tool_use blocks (or of
	// tool_result blocks) as one position (default on).
	ToolRunsOnePosition Switch `json:"tool_runs_one_position,omitempty"`
	// MinTokens is the minimum cacheable prefix by model: an exact model id,
	// else the longest key the model starts with, else the spec's table by
	// family and version, else MinTokensDefault (default 1024).
	MinTokens        map[string]int64 `json:"min_tokens,omitempty"`
	MinTokensDefault int64            `json:"min_tokens_default,omitempty"`
	// AutoInTTLOrder includes the automatic (top-level) breakpoint in the
	// check that no 1h breakpoint follows a 5m one (default on).
	AutoInTTLOrder Switch `json:"auto_in_ttl_order,omitempty"`
	// RefreshScope is what a hit refreshes: "chain" (every live entry at or
	// before the hit, default) or "hit" (the hit entry only).
	RefreshScope string `json:"refresh_scope,omitempty"`
	// RefreshTTL is the lifetime a refresh gives: "entry" (the entry's own
	// TTL, default) or "breakpoint" (the TTL of the breakpoint that read it).
	RefreshTTL string `json:"refresh_ttl,omitempty"`
	// TTLInKey makes a position's marker TTL part of the key: a 5m marker
	// does not read a 1h entry (default off).
	TTLInKey Switch `json:"ttl_in_key,omitempty"`
	// SpeedLevel is where speed enters the key: "system" (invalidates the
	// system and messages caches, default) or "none".
	SpeedLevel string `json:"speed_level,omitempty"`
	// ThinkingLevel is where the thinking configuration enters the key:
	// "messages" (default) or "tools" (invalidates the system cache too).
	ThinkingLevel string `json:"thinking_level,omitempty"`
	// ContextManagementInKey makes the context_management configuration
	// part of the messages key (default off).
	ContextManagementInKey Switch `json:"context_management_in_key,omitempty"`
	// BetasInKey puts anthropic-beta names in the messages key: "none"
	// (default), "fast_mode" (only fast-mode betas) or "all".
	BetasInKey string `json:"betas_in_key,omitempty"`
	// StripPriorThinking: "by_model" (default: on models that keep only the
	// last turn's thinking, a request without clear_thinking loses the
	// thinking of turns before its last non-tool-result user message) or
	// "never".
	StripPriorThinking string `json:"strip_prior_thinking,omitempty"`
	// ClearAtHides leaves role "system" messages with clear_at
	// "next_user_message" that a later user message follows out of the
	// prompt the cache sees (default on).
	ClearAtHides Switch `json:"clear_at_hides,omitempty"`
	// DiagnosticsView is what a diagnostics fingerprint holds of messages:
	// "request" (as sent, default) or "prompt" (after the edits, so a
	// server-side clearing shows as messages_changed).
	DiagnosticsView string `json:"diagnostics_view,omitempty"`
	// DiagnosticsPending answers {"cache_miss_reason":null} (the API's
	// "still comparing") instead of the computed diagnosis: "never"
	// (default), "always", or "streams" (streamed replies only).
	DiagnosticsPending string `json:"diagnostics_pending,omitempty"`
	// FingerprintTTL is how long a fingerprint can be compared with, as a
	// Go duration ("1h", the default).
	FingerprintTTL string `json:"fingerprint_ttl,omitempty"`
	// DiagnosticsHorizon > 0 answers unavailable instead of
	// messages_changed when the first changed message lies more than this
	// many messages before the end (default 0: no horizon).
	DiagnosticsHorizon int `json:"diagnostics_horizon,omitempty"`
	// DiagnosticsAbsent is what a reply to a request without diagnostics
	// carries: "null" ("diagnostics": null, GA, default) or "omit" (no
	// field, the beta-era shape).
	DiagnosticsAbsent string `json:"diagnostics_absent,omitempty"`
	// CountTokensDiagnostics is what count_tokens does with a diagnostics
	// field: "reject" (400 Extra inputs, default) or "ignore".
	CountTokensDiagnostics string `json:"count_tokens_diagnostics,omitempty"`
}

// cacheEnums lists the values each string switch takes, the default first.
var cacheEnums = []struct {
	name string
	get  func(*CacheOptions) string
	vals []string
}{
	{"refresh_scope", func(o *CacheOptions) string { return o.RefreshScope }, []string{"chain", "hit"}},
	{"refresh_ttl", func(o *CacheOptions) string { return o.RefreshTTL }, []string{"entry", "breakpoint"}},
	{"speed_level", func(o *CacheOptions) string { return o.SpeedLevel }, []string{"system", "none"}},
	{"thinking_level", func(o *CacheOptions) string { return o.ThinkingLevel }, []string{"messages", "tools"}},
	{"betas_in_key", func(o *CacheOptions) string { return o.BetasInKey }, []string{"none", "fast_mode", "all"}},
	{"strip_prior_thinking", func(o *CacheOptions) string { return o.StripPriorThinking }, []string{"by_model", "never"}},
	{"diagnostics_view", func(o *CacheOptions) string { return o.DiagnosticsView }, []string{"request", "prompt"}},
	{"diagnostics_pending", func(o *CacheOptions) string { return o.DiagnosticsPending }, []string{"never", "always", "streams"}},
	{"diagnostics_absent", func(o *CacheOptions) string { return o.DiagnosticsAbsent }, []string{"null", "omit"}},
	{"count_tokens_diagnostics", func(o *CacheOptions) string { return o.CountTokensDiagnostics }, []string{"reject", "ignore"}},
}

// Check reports a switch set to a value it does not take. POST
// /_fake/options refuses such options; in Go, an unknown value acts as the
// default.
func (o *CacheOptions) Check() error {
	for _, e := range cacheEnums {
		if v := e.get(o); v != "" && !slices.Contains(e.vals, v) {
			return fmt.Errorf("%s: %q is not one of %s", e.name, v, strings.Join(e.vals, ", "))
		}
	}
	if o.Lookback < 0 || o.MinTokensDefault < 0 || o.DiagnosticsHorizon < 0 {
		return fmt.Errorf("lookback, min_tokens_default and diagnostics_horizon cannot be negative")
	}
	if o.FingerprintTTL != "" {
		if d, err := time.ParseDuration(o.FingerprintTTL); err != nil || d <= 0 {
			return fmt.Errorf("fingerprint_ttl: %q is not a positive Go duration", o.FingerprintTTL)
		}
	}
	return nil
}

func (o *CacheOptions) on() bool { return o.Cache.is(false) }

func (o *CacheOptions) lookback() int {
	if o.Lookback > 0 {
		return o.Lookback
	}
	return 20
}

func (o *CacheOptions) fingerprintTTL() time.Duration {
	if d, err := time.ParseDuration(o.FingerprintTTL); err == nil && d > 0 {
		return d
	}
	return time.Hour
}

// is reports whether the string switch name is set to val, unset or unknown
// values reading as the default.
func (o *CacheOptions) is(name, val string) bool {
	for _, e := range cacheEnums {
		if e.name == name {
			v := e.get(o)
			if !slices.Contains(e.vals, v) {
				v = e.vals[0]
			}
			return v == val
		}
	}
	panic("fakeapi: unknown cache switch " + name)
}

// minTokensTable is the minimum cacheable length by model family and
// version (prompt caching spec, minimum cacheable length).
var minTokensTable = map[string]int64{
	"fable-5-1": 512, "mythos-5-1": 512, "opus-5-5": 512, "opus-5": 512, "fable-5": 512, "mythos-5": 512,
	"sonnet-5-5": 512, // unverified: a later version of the page, quoted by third parties
	"opus-4-8":   1024, "sonnet-5": 1024, "sonnet-4-6": 1024, "sonnet-4-5": 1024, "opus-4-1": 1024, "opus-4": 1024, "sonnet-4": 1024,
	"mythos-preview": 2048, "opus-4-7": 2048, "haiku-3-5": 2048,
	"opus-4-6": 4096, "opus-4-5": 4096, "haiku-4-5": 4096,
}

// modelFamily reads claude-opus-4-5-20251101 as opus-4-5, claude-opus-4 as
// opus-4, claude-3-5-haiku-20241022 as haiku-3-5, claude-mythos-preview as
// mythos-preview ("" when the id has none of these shapes). A minor version
// has one or two digits; longer digit runs are dates.
var (
	modelNew = regexp.MustCompile(`claude-(opus|sonnet|haiku|fable|mythos)-(\d+|preview)(?:-(\d{1,2}))?(?:\D|$)`)
	modelOld = regexp.MustCompile(`claude-(\d+)(?:-(\d{1,2}))?-(opus|sonnet|haiku)`)
)

func modelFamily(model string) string {
	if m := modelNew.FindStringSubmatch(model); m != nil {
		if m[3] != "" {
			return m[1] + "-" + m[2] + "-" + m[3]
		}
		return m[1] + "-" + m[2]
	}
	if m := modelOld.FindStringSubmatch(model); m != nil {
		if m[2] != "" {
			return m[3] + "-" + m[1] + "-" + m[2]
		}
		return m[3] + "-" + m[1]
	}
	return ""
}

func (o *CacheOptions) minTokens(model string) int64 {
	if n, ok := o.MinTokens[model]; ok {
		return n
	}
	best, n := -1, int64(0)
	for k, v := range o.MinTokens {
		if strings.HasPrefix(model, k) && len(k) > best {
			best, n = len(k), v
		}
	}
	if best >= 0 {
		return n
	}
	if n, ok := minTokensTable[modelFamily(model)]; ok {
		return n
	}
	if o.MinTokensDefault > 0 {
		return o.MinTokensDefault
	}
	return 1024
}

// The TTLs a breakpoint can ask for.
const (
	ttl5m = 5 * time.Minute
	ttl1h = time.Hour
)

func ttlName(d time.Duration) string {
	if d == ttl1h {
		return "1h"
	}
	return "5m"
}

// cacheEpoch is where the fake's own clock starts.
var cacheEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// WithClock makes now the base of the fake's cache clock (TTLs,
// fingerprints); AdvanceClock still adds to it. The default base is a fixed
// instant, so time moves only when a test moves it. WithClock(time.Now)
// gives wall-clock expiry.
func WithClock(now func() time.Time) Option {
	return func(a *API) {
		a.cache.mu.Lock()
		a.cache.base = now
		a.cache.mu.Unlock()
	}
}

// Now is the fake's cache clock.
func (a *API) Now() time.Time {
	a.cache.mu.Lock()
	defer a.cache.mu.Unlock()
	return a.cache.now()
}

// AdvanceClock moves the fake's cache clock forward by d (a negative d is
// refused with a panic: the API's time never goes back) and returns the new
// time.
func (a *API) AdvanceClock(d time.Duration) time.Time {
	if d < 0 {
		panic("fakeapi: AdvanceClock with a negative duration")
	}
	a.cache.mu.Lock()
	defer a.cache.mu.Unlock()
	a.cache.offset += d
	return a.cache.now()
}

// maxCacheEntries bounds the store (and the fingerprints) in long runs; past
// it the entries that expire first go.
const maxCacheEntries = 200000

// cacheKey is the prefix hash at a position: it covers the credential, the
// model and every position up to and including this one (the chain of
// cacheprompt.go).
type cacheKey [32]byte

// cacheEntry is one written prefix.
type cacheEntry struct {
	ttl     time.Duration
	expires time.Time
	tokens  int64 // the prefix's tokens, T(position)
	// For CacheEntries: who wrote it and where its breakpoint was.
	credential, model, path string
	written                 time.Time
}

// cacheStore holds the entries and the diagnostics fingerprints.
type cacheStore struct {
	mu      sync.Mutex
	base    func() time.Time
	offset  time.Duration
	entries map[cacheKey]*cacheEntry
	prints  map[fingerprintKey]*fingerprint
}

func (s *cacheStore) init() {
	if s.base == nil {
		s.base = func() time.Time { return cacheEpoch }
	}
	s.entries = make(map[cacheKey]*cacheEntry)
	s.prints = make(map[fingerprintKey]*fingerprint)
}

func (s *cacheStore) reset() {
	s.mu.Lock()
	s.entries = make(map[cacheKey]*cacheEntry)
	s.prints = make(map[fingerprintKey]*fingerprint)
	s.mu.Unlock()
}

// now is the clock; s.mu must be held.
func (s *cacheStore) now() time.Time { return s.base().Add(s.offset) }

// live is the entry at k if it has not expired at t; s.mu must be held.
func (s *cacheStore) live(k cacheKey, t time.Time) *cacheEntry {
	e := s.entries[k]
	if e == nil || !t.Before(e.expires) {
		return nil
	}
	return e
}

// sweep drops expired entries and fingerprints, then, past the bound, those
// that expire first; s.mu must be held.
func (s *cacheStore) sweep(t time.Time) {
	if len(s.entries) < maxCacheEntries && len(s.prints) < maxCacheEntries {
		return
	}
	for k, e := range s.entries {
		if !t.Before(e.expires) {
			delete(s.entries, k)
		}
	}
	for k, f := range s.prints {
		if !t.Before(f.expires) {
			delete(s.prints, k)
		}
	}
	if n := len(s.entries) - maxCacheEntries/2; n > 0 {
		keys := make([]cacheKey, 0, len(s.entries))
		for k := range s.entries {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return s.entries[keys[i]].expires.Before(s.entries[keys[j]].expires) })
		for _, k := range keys[:n] {
			delete(s.entries, k)
		}
	}
	if len(s.prints) >= maxCacheEntries {
		s.prints = make(map[fingerprintKey]*fingerprint)
	}
}

// CacheEntry is one live cache entry (CacheEntries, GET /_fake/cache).
type CacheEntry struct {
	Credential string    `json:"credential"`
	Model      string    `json:"model"`
	Path       string    `json:"path"` // the breakpoint's block in the request that wrote it, e.g. "messages.3.content.0"
	Tokens     int64     `json:"tokens"`
	TTL        string    `json:"ttl"` // "5m" or "1h"
	Written    time.Time `json:"written"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// CacheEntries lists the live entries at the fake's clock, ordered by
// credential, model and tokens.
func (a *API) CacheEntries() []CacheEntry {
	s := &a.cache
	s.mu.Lock()
	t := s.now()
	out := []CacheEntry{}
	for _, e := range s.entries {
		if t.Before(e.expires) {
			out = append(out, CacheEntry{Credential: e.credential, Model: e.model, Path: e.path, Tokens: e.tokens,
				TTL: ttlName(e.ttl), Written: e.written, ExpiresAt: e.expires})
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		x, y := out[i], out[j]
		if x.Credential != y.Credential {
			return x.Credential < y.Credential
		}
		if x.Model != y.Model {
			return x.Model < y.Model
		}
		if x.Tokens != y.Tokens {
			return x.Tokens < y.Tokens
		}
		return x.Path < y.Path
	})
	return out
}

// ResetCache forgets every cache entry and fingerprint (the clock stays).
func (a *API) ResetCache() { a.cache.reset() }

// serveCacheControl answers the cache's control endpoints; false when the
// route is not one of them.
//
//	GET  /_fake/clock        → {"now":T}
//	POST /_fake/clock        {"advance":"6m"} or {"advance_ms":360000} → {"now":T}
//	GET  /_fake/cache        → {"now":T,"entries":[CacheEntry...],"fingerprints":N}
//	POST /_fake/cache/reset  → {"ok":true}
func (a *API) serveCacheControl(w http.ResponseWriter, req *http.Request) bool {
	switch req.Method + " " + req.URL.Path {
	case "GET /_fake/clock":
		writeJSON(w, 200, map[string]any{"now": a.Now()})
	case "POST /_fake/clock":
		var body struct {
			Advance   string   `json:"advance"`
			AdvanceMS *float64 `json:"advance_ms"`
		}
		if err := json.NewDecoder(io.LimitReader(req.Body, 1<<16)).Decode(&body); err != nil {
			writeError(w, 400, &APIError{Type: "invalid_request_error", Message: "clock: " + err.Error()}, "")
			return true
		}
		d := time.Duration(0)
		switch {
		case body.Advance != "" && body.AdvanceMS != nil:
			writeError(w, 400, &APIError{Type: "invalid_request_error", Message: "clock: give advance or advance_ms, not both"}, "")
			return true
		case body.Advance != "":
			var err error
			if d, err = time.ParseDuration(body.Advance); err != nil {
				writeError(w, 400, &APIError{Type: "invalid_request_error", Message: "clock: advance: " + err.Error()}, "")
				return true
			}
		case body.AdvanceMS != nil:
			d = fromMS(*body.AdvanceMS)
		}
		if d < 0 {
			writeError(w, 400, &APIError{Type: "invalid_request_error", Message: "clock: the clock only moves forward"}, "")
			return true
		}
		writeJSON(w, 200, map[string]any{"now": a.AdvanceClock(d)})
	case "GET /_fake/cache":
		a.cache.mu.Lock()
		n := len(a.cache.prints)
		a.cache.mu.Unlock()
		writeJSON(w, 200, map[string]any{"now": a.Now(), "entries": a.CacheEntries(), "fingerprints": n})
	case "POST /_fake/cache/reset":
		a.ResetCache()
		writeJSON(w, 200, map[string]any{"ok": true})
	default:
		return false
	}
	return true
}
