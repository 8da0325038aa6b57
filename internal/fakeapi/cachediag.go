package fakeapi

import (
	"crypto/sha256"
	"strconv"
	"time"
)

// Cache diagnostics (shared spec: cache diagnostics). A request with a
// diagnostics object leaves a fingerprint of its structure under its reply's
// id; a later request naming that id as previous_message_id is compared
// with it and told the earliest divergence. Fingerprints hold hashes and
// token estimates only, per credential, for FingerprintTTL.

// fingerprintKey scopes a fingerprint to the credential that made it.
type fingerprintKey struct{ scope, id string }

// fingerprint is the structure of one request.
type fingerprint struct {
	expires             time.Time
	model               string // model and speed
	params              [32]byte
	tools, system, msgs []promptEntry
}

func sumTokens(es []promptEntry) int64 {
	var n int64
	for _, e := range es {
		n += e.tokens
	}
	return n
}

func (f *fingerprint) total() int64 {
	return sumTokens(f.tools) + sumTokens(f.system) + sumTokens(f.msgs)
}

// firstDiff is the index of the first entry of old that new does not repeat
// (-1 when new starts with all of old); equal reports lists of the same
// length as well.
func firstDiff(old, new []promptEntry, equal bool) int {
	for i, e := range old {
		if i >= len(new) || new[i].hash != e.hash {
			return i
		}
	}
	if equal && len(new) != len(old) {
		return len(old)
	}
	return -1
}

func entryOf(canon []byte) promptEntry {
	h := sha256.Sum256(canon)
	var e promptEntry
	copy(e.hash[:], h[:])
	e.tokens = Tokens(len(canon))
	return e
}

// buildFingerprint takes the request's structure; msgs is the prompt view's
// message list, used when DiagnosticsView is "prompt".
func buildFingerprint(p *parsed, o *CacheOptions, promptMsgs []promptEntry) *fingerprint {
	c := &p.cache
	f := &fingerprint{model: p.model + "\x00" + compactString(c.speed)}
	var buf []byte
	eachTopBlock(p.tools, func(_ int, raw string) bool {
		buf = appendCanon(buf[:0], raw, canonEdit{})
		f.tools = append(f.tools, entryOf(buf))
		return true
	})
	eachTopBlock(p.system, func(_ int, raw string) bool {
		buf = appendCanon(buf[:0], raw, canonEdit{})
		f.system = append(f.system, entryOf(buf))
		return true
	})
	h := newChainHash()
	for _, v := range []string{c.toolChoice, c.thinking, c.cm, c.outputConfig, c.outputFormat} {
		h.str(compactString(v))
	}
	for _, b := range sortedSet(p.betas) {
		h.str(b)
	}
	h.Sum(f.params[:0])
	if o.is("diagnostics_view", "prompt") {
		f.msgs = promptMsgs
		return f
	}
	f.msgs = make([]promptEntry, 0, len(p.turns))
	for i := range p.turns {
		t := &p.turns[i]
		buf = append(appendRole(buf[:0], t.role), ':')
		if isArray(t.content) {
			for _, b := range t.blocks {
				buf = appendCanon(buf, b.raw, canonEdit{nested: true})
				buf = append(buf, ',')
			}
		} else {
			buf = appendCompact(buf, t.content)
		}
		f.msgs = append(f.msgs, entryOf(buf))
	}
	return f
}

func appendRole(b []byte, role string) []byte { return append(append(b, role...), '\x00') }

// diagnose compares f with the fingerprint stored under (scope, prevID) and
// returns the reply's cache_miss_reason value ("null" for no divergence).
// The checks run in prompt order: model (or speed), tools, system, the other
// prompt-affecting parameters, messages; only the earliest divergence is
// told. cache_missed_input_tokens is the previous request's estimate after
// the common part (a fake convention; the API's is a byte-length estimate).
func (s *cacheStore) diagnose(scope, prevID string, f *fingerprint, o *CacheOptions, t0 time.Time) []byte {
	s.mu.Lock()
	prev := s.prints[fingerprintKey{scope, prevID}]
	s.mu.Unlock()
	if prev == nil || !t0.Before(prev.expires) {
		return []byte(`{"type":"previous_message_not_found"}`)
	}
	changed := func(typ string, common int64) []byte {
		b := append([]byte(`{"type":"`), typ...)
		b = append(b, `","cache_missed_input_tokens":`...)
		b = strconv.AppendInt(b, max(0, prev.total()-common), 10)
		return append(b, '}')
	}
	if prev.model != f.model {
		return changed("model_changed", 0)
	}
	if k := firstDiff(prev.tools, f.tools, true); k >= 0 {
		return changed("tools_changed", sumTokens(prev.tools[:k]))
	}
	if k := firstDiff(prev.system, f.system, true); k >= 0 {
		return changed("system_changed", sumTokens(prev.tools)+sumTokens(prev.system[:k]))
	}
	if prev.params != f.params {
		return []byte(`{"type":"unavailable"}`)
	}
	if k := firstDiff(prev.msgs, f.msgs, false); k >= 0 {
		if h := o.DiagnosticsHorizon; h > 0 && len(f.msgs)-k > h {
			return []byte(`{"type":"unavailable"}`)
		}
		return changed("messages_changed", sumTokens(prev.tools)+sumTokens(prev.system)+sumTokens(prev.msgs[:k]))
	}
	return []byte("null")
}

// storePrint keeps f under the reply's id.
func (s *cacheStore) storePrint(scope, id string, f *fingerprint, expires time.Time) {
	f.expires = expires
	s.mu.Lock()
	s.prints[fingerprintKey{scope, id}] = f
	s.mu.Unlock()
}

// diagnostics is the reply's diagnostics value (nil: no field).
func diagnosticsValue(reason []byte, asked bool, o *CacheOptions, stream bool) []byte {
	if !asked {
		if o.is("diagnostics_absent", "omit") {
			return nil
		}
		return []byte("null")
	}
	if reason == nil {
		return []byte("null") // previous_message_id null: nothing to compare
	}
	if o.is("diagnostics_pending", "always") || (stream && o.is("diagnostics_pending", "streams")) {
		return []byte(`{"cache_miss_reason":null}`)
	}
	if string(reason) == "null" {
		return reason
	}
	return append(append([]byte(`{"cache_miss_reason":`), reason...), '}')
}
