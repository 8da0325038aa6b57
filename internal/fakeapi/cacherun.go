package fakeapi

import (
	"encoding/json"
	"time"
)

// CacheCreation is usage.cache_creation: the tokens written, by TTL.
type CacheCreation struct {
	Ephemeral5m int64 `json:"ephemeral_5m_input_tokens"`
	Ephemeral1h int64 `json:"ephemeral_1h_input_tokens"`
}

// cacheCall is what the prompt cache did for one request: the input side of
// its usage, its diagnostics, and what the reply's id must be stored with.
type cacheCall struct {
	store *cacheStore
	opts  CacheOptions
	p     *parsed
	scope string
	t0    time.Time
	usage Usage  // input side, CacheCreation set
	diag  []byte // the reply's diagnostics value; nil: no field
	print *fingerprint
}

// runCache looks the request up in the cache and commits its writes (the
// response is about to begin: a request answered with an error before that
// commits nothing), and diagnoses it. scope is the upstream credential.
func (a *API) runCache(r *Request, p *parsed, o *CacheOptions, t0 time.Time, stream bool) *cacheCall {
	cc := &cacheCall{store: &a.cache, opts: *o, p: p, scope: r.Credential, t0: t0}
	res := applyEdits(p)
	pr := renderPrompt(p, &res, o, cc.scope)
	cc.usage = a.cache.lookup(pr, p.model, p.cache.autoTTL, o, cc.scope, t0)
	if p.cache.diag {
		cc.print = buildFingerprint(p, o, pr.msgs)
		var reason []byte
		if p.cache.prevID != "" {
			reason = a.cache.diagnose(cc.scope, p.cache.prevID, cc.print, o, t0)
		}
		cc.diag = diagnosticsValue(reason, true, o, stream)
	} else {
		cc.diag = diagnosticsValue(nil, false, o, stream)
	}
	return cc
}

// stored keeps the request's fingerprint under its reply's id, before the
// reply's first byte.
func (cc *cacheCall) stored(replyID string) {
	if cc != nil && cc.print != nil {
		cc.store.storePrint(cc.scope, replyID, cc.print, cc.t0.Add(cc.opts.fingerprintTTL()))
	}
}

// afterCompaction is the cache's part of the message iteration of a request
// that compacted: the model then reads tools, system, the new compaction
// block and the latest turn, with the breakpoints still on them and the
// automatic one (the compaction iteration read the prompt before it; how
// the API caches around a compaction is unverified).
func (cc *cacheCall) afterCompaction(block json.RawMessage) Usage {
	p := *cc.p
	last := p.messages[len(p.messages)-1]
	p.messages = []json.RawMessage{append(append([]byte(`{"role":"assistant","content":[`), block...), "]}"...), last}
	p.turns = nil
	var buf []blockFacts
	for _, m := range p.messages {
		var t turnFacts
		t, buf = scanTurn(view(m), buf)
		p.turns = append(p.turns, t)
	}
	pr := renderPrompt(&p, &editResult{}, &cc.opts, cc.scope)
	return cc.store.lookup(pr, p.model, p.cache.autoTTL, &cc.opts, cc.scope, cc.t0)
}

// breakpoint is a position that carries a cache_control.
type breakpoint struct {
	pos int
	ttl time.Duration
}

// breakpoints places the automatic breakpoint (the last position that can
// take one) and lists every breakpoint, first to last.
func (pr *prompt) breakpoints(autoTTL time.Duration) []breakpoint {
	if autoTTL != 0 {
		for i := len(pr.pos) - 1; i >= 0; i-- {
			if pr.pos[i].eligible {
				pr.pos[i].ttl = max(pr.pos[i].ttl, autoTTL)
				break
			}
		}
	}
	var bps []breakpoint
	for i := range pr.pos {
		if pr.pos[i].ttl != 0 {
			bps = append(bps, breakpoint{i, pr.pos[i].ttl})
		}
	}
	return bps
}

// lookup finds the longest cached prefix of pr, commits the writes and
// refreshes, and returns the input side of usage:
//
//	A = the highest position with a live entry, searched from each
//	    breakpoint (last first) back through Lookback positions;
//	W = the writable breakpoints after A (prefix ≥ the model's minimum);
//	C = the last of W, B = the last 1h breakpoint of W (else A);
//	read = T(A), 1h writes = T(B) − T(A), 5m writes = T(C) − T(B),
//	input = T(total) − T(C).
func (s *cacheStore) lookup(pr *prompt, model string, autoTTL time.Duration, o *CacheOptions, scope string, t0 time.Time) Usage {
	bps := pr.breakpoints(autoTTL)
	total := Tokens(pr.total)
	if len(bps) == 0 {
		// No cache_control anywhere: nothing is read or written.
		return Usage{InputTokens: total, CacheCreation: &CacheCreation{}}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	hit, via := -1, breakpoint{}
	ttlInKey := o.TTLInKey.is(false)
search:
	for j := len(bps) - 1; j >= 0; j-- {
		bp := bps[j]
		for k := 0; k < o.lookback() && bp.pos-k >= 0; k++ {
			q := bp.pos - k
			e := s.live(pr.pos[q].key, t0)
			if e != nil && (!ttlInKey || pr.pos[q].ttl == 0 || e.ttl == pr.pos[q].ttl) {
				hit, via = q, bp
				break search
			}
		}
	}
	minTokens := o.minTokens(model)
	b, c := hit, hit
	for _, bp := range bps {
		if bp.pos > hit && pr.tokensAt(bp.pos) >= minTokens {
			c = bp.pos
			if bp.ttl == ttl1h {
				b = bp.pos
			}
			s.entries[pr.pos[bp.pos].key] = &cacheEntry{ttl: bp.ttl, expires: t0.Add(bp.ttl), tokens: pr.tokensAt(bp.pos),
				credential: scope, model: model, path: pr.pos[bp.pos].at.String(), written: t0}
		}
	}
	if hit >= 0 {
		from := 0
		if o.is("refresh_scope", "hit") {
			from = hit
		}
		for q := from; q <= hit; q++ {
			if e := s.live(pr.pos[q].key, t0); e != nil {
				ttl := e.ttl
				if o.is("refresh_ttl", "breakpoint") {
					ttl = via.ttl
				}
				if t := t0.Add(ttl); t.After(e.expires) {
					e.expires = t
				}
			}
		}
	}
	s.sweep(t0)
	read, tb, tc := pr.tokensAt(hit), pr.tokensAt(b), pr.tokensAt(c)
	return Usage{InputTokens: total - tc, CacheReadInputTokens: read, CacheCreationInputTokens: tc - read,
		CacheCreation: &CacheCreation{Ephemeral1h: tb - read, Ephemeral5m: tc - tb}}
}

// withOutput is u with the reply's output tokens.
func (u Usage) withOutput(out int64) Usage {
	u.OutputTokens = out
	return u
}

// appendDiagnostics appends the reply's diagnostics member, if it has one
// (the JSON body and message_start only: no later event carries it).
func (m *message) appendDiagnostics(b []byte) []byte {
	if m.diag == nil {
		return b
	}
	return append(append(b, `,"diagnostics":`...), m.diag...)
}

// appendDeltaUsage is message_delta's usage: the body's, without
// cache_creation (message_delta never sends the TTL split again).
func (m *message) appendDeltaUsage(b []byte) []byte {
	d := *m
	d.usage.CacheCreation = nil
	return d.appendUsage(b, true)
}
