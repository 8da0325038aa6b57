package proxy

import (
	"strings"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/cachetrack"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// What a tenant's edits did to the prompt cache (package cachetrack has the rules). For a tenant
// whose policy writes clearing edits, each Messages request is matched to its conversation's
// previous call (a thread by its previous reply's id, a resent history by its last assistant
// turn's tool uses; tenants with shadow candidates too, for the policy lab); each upstream call's ledger line says what the cache missed and why, and
// the call becomes the conversation's previous one (attributeCache, in accounting.go where the
// line is built). With accounting.cache_diagnostics the API's diagnosis is asked
// (diagnostics.previous_message_id: added by the rewrite, askDiagnostics, and by the memory
// loop, nextBody), and the client still sees what it would have seen without it: its
// own diagnostics when it asked, else null in place (readPlain here, the stream's hooks in
// stream.go).

// conversation is the exchange's part in its conversation: opened by openConversation, fed
// by the reply (readPlain here, the stream's hooks in stream.go) and moved on by attributeCache.
type conversation struct {
	on    bool
	scope string // the tenant: a conversation is never another tenant's
	key   cachetrack.Key
	prev  cachetrack.Prev
	known bool // prev is the conversation's previous call
	// system and tools are the request's, hashed.
	system, tools uint64
	// asked: ctxproxy added diagnostics the client did not send; replies get null in its place.
	asked bool
	// seen is what the current round's reply said, read before it is accounted.
	seen seenReply
	// prevCached is P of the call attributeCache last accounted: its conversation's previous
	// call's cache read + creation, 0 when that was unknown.
	prevCached int64
}

// seenReply is what a reply says of its conversation: the key its turn leaves for the next call
// and the API's diagnosis, its diagnostics.cache_miss_reason.type as it came ("" for none, null
// or pending; attributeCache names it, missReason). It is copied (gjson's GetBytes copies what it
// returns; readPlain clones it), so it never points into a pooled buffer.
type seenReply struct {
	turn      cachetrack.Key
	diagnosis string
}

// readPlain reads a non-streamed reply for its accounting and, in the same pass, for its
// conversation, and gives back the reply the client gets: its diagnostics null in place when
// ctxproxy asked for them.
func (x *exchange) readPlain(reply []byte) (tokens.Reply, []byte) {
	v := &x.conv
	if !v.on {
		return tokens.ParseReply(reply), reply
	}
	var content, diag gjson.Result // views of reply: the turn is hashed, the diagnosis cloned
	r := tokens.ParseReplyAnd(reply, func(k string, val gjson.Result) {
		switch k {
		case "content":
			content = val
		case "diagnostics":
			diag = val
		}
	})
	v.seen = seenReply{turn: cachetrack.TurnKeyOf(v.scope, content), diagnosis: strings.Clone(diag.Get("cache_miss_reason.type").Str)}
	if v.asked && diag.Exists() && diag.Type != gjson.Null {
		return r, spliceNull(reply, diag)
	}
	return r, reply
}

// spliceNull is b with the JSON value r (found in b) replaced by null.
func spliceNull(b []byte, r gjson.Result) []byte {
	if r.Index <= 0 || r.Index+len(r.Raw) > len(b) {
		return b
	}
	out := make([]byte, 0, len(b)-len(r.Raw)+4)
	out = append(out, b[:r.Index]...)
	out = append(out, "null"...)
	return append(out, b[r.Index+len(r.Raw):]...)
}
