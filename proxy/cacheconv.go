package proxy

import (
	"bytes"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/ctxproxy/ctxproxy/cachetrack"
	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// What a tenant's edits did to the prompt cache (package cachetrack has the rules). For a tenant
// whose policy writes clearing edits, each Messages request is matched to its conversation's
// previous call (a thread by its previous reply's id, a resent history by its last assistant
// turn's tool uses); each upstream call's ledger line says what the cache missed and why, and
// the call becomes the conversation's previous one. With accounting.cache_diagnostics the API's
// diagnosis is asked (diagnostics.previous_message_id), and the client still sees what it
// would have seen without it: its own diagnostics when it asked, else null in place.

// conversation is the exchange's part in its conversation; only this file changes it.
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
}

// seenReply is what a reply says of its conversation: the key its turn leaves for the next call
// and the API's diagnosis ("" for none, null or pending).
type seenReply struct {
	turn      cachetrack.Key
	diagnosis string
}

// openConversation matches a Messages request to its conversation, before the policy rewrites
// body. Only tenants whose policy clears (or asks diagnostics) are tracked: for the others a
// call's cache effect is none or unknown whatever came before.
func (x *exchange) openConversation(body []byte) {
	pol, t := x.who.pol, x.s.cfg.CacheTracker
	if t == nil || x.ep != epMessages || !(pol.WritesClearingEdits() || pol.CacheDiagnostics()) {
		return
	}
	r := cachetrack.ReadRequest(pol.Tenant, body)
	v := &x.conv
	*v = conversation{on: true, scope: pol.Tenant, key: r.Turn, system: r.System, tools: r.Tools}
	v.prev, v.known = t.Lookup(r.Turn)
	v.asked = pol.CacheDiagnostics() && !r.HasDiagnostics
}

// askDiagnostics adds diagnostics.previous_message_id (the conversation's previous reply, null
// when unknown) to the upstream request q, before its closing brace.
func (x *exchange) askDiagnostics(q *request) {
	if x.conv.asked {
		q.parts = x.withDiagnostics(q.parts)
	}
}

// diagValueWidth is the bytes previous_message_id's value takes, padded with spaces: a body
// forwarded while it arrives is sent with the length the tenant's last one had (lead.go), so
// the field is as long whether it names a reply or is null.
const diagValueWidth = 64

// withDiagnostics is parts (a body in pieces that may alias the client's) with the diagnostics
// field before the last closing brace; parts itself when there is none to ask or no brace.
func (x *exchange) withDiagnostics(parts [][]byte) [][]byte {
	v := &x.conv
	if !v.asked || len(parts) == 0 {
		return parts
	}
	last := parts[len(parts)-1]
	end := bytes.LastIndexByte(last, '}')
	if end < 0 {
		return parts
	}
	field := make([]byte, 0, 48+diagValueWidth+len(last)-end)
	field = append(field, `,"diagnostics":{"previous_message_id":`...)
	at := len(field)
	if v.known && v.prev.MessageID != "" {
		field = jsonstr.Append(field, v.prev.MessageID)
	} else {
		field = append(field, "null"...)
	}
	for len(field)-at < diagValueWidth {
		field = append(field, ' ')
	}
	field = append(append(field, '}'), last[end:]...)
	out := make([][]byte, 0, len(parts)+1)
	out = append(out, parts[:len(parts)-1]...)
	return append(out, last[:end], field)
}

// diagnosticsForRound points the memory loop's next request at the reply it continues from.
func (x *exchange) diagnosticsForRound(body []byte, replyID string) []byte {
	if !x.conv.asked {
		return body
	}
	if out, err := sjson.SetBytes(body, "diagnostics.previous_message_id", replyID); err == nil {
		return out
	}
	return body
}

// seePlain reads what a non-streamed reply says of its conversation and gives back the reply
// the client gets: its diagnostics null in place when ctxproxy asked for them.
func (x *exchange) seePlain(reply []byte) []byte {
	v := &x.conv
	if !v.on {
		return reply
	}
	var content, diag gjson.Result
	gjson.ParseBytes(reply).ForEach(func(k, r gjson.Result) bool {
		switch k.Str {
		case "content":
			content = r
		case "diagnostics":
			diag = r
		}
		return true
	})
	v.seen = seenReply{turn: cachetrack.TurnKeyOf(v.scope, content), diagnosis: missReason(diag)}
	if v.asked && diag.Exists() && diag.Type != gjson.Null {
		return spliceNull(reply, diag)
	}
	return reply
}

// missReason is a diagnostics object's cache_miss_reason.type, copied.
func missReason(diag gjson.Result) string {
	switch t := diag.Get("cache_miss_reason.type").Str; t {
	case "":
		return ""
	case "messages_changed", "system_changed", "tools_changed", "model_changed", "previous_message_not_found", "unavailable":
		return t
	default:
		return "other"
	}
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

// streamStart reads a stream's message_start for its conversation and gives back the event the
// client gets: its message.diagnostics null in place when ctxproxy asked for them.
func (v *conversation) streamStart(rd *round, ev sseEvent) []byte {
	diag := gjson.GetBytes(ev.Data, "message.diagnostics")
	rd.seen.diagnosis = missReason(diag)
	if !v.asked || !diag.Exists() || diag.Type == gjson.Null {
		return ev.Raw
	}
	at := dataOffset(ev)
	if at < 0 {
		return ev.Raw
	}
	diag.Index += at
	return spliceNull(ev.Raw, diag)
}

// dataOffset is where ev.Data starts within ev.Raw, -1 when it is not a part of it.
func dataOffset(ev sseEvent) int {
	if len(ev.Data) == 0 {
		return -1
	}
	i := bytes.Index(ev.Raw, ev.Data)
	return i
}

// trackedStream is the conversation a stream's rounds feed, nil when it is not tracked.
func (x *exchange) trackedStream() *conversation {
	if !x.conv.on {
		return nil
	}
	return &x.conv
}

// seeStream takes what a relayed round said of its conversation, before it is accounted.
func (x *exchange) seeStream(rd *round) {
	if x.conv.on {
		x.conv.seen = seenReply{turn: rd.turn.Key(), diagnosis: rd.seen.diagnosis}
	}
}

// streamBlock feeds a content_block_start to the round's turn key.
func (v *conversation) streamBlock(rd *round, data []byte) {
	cb := gjson.GetBytes(data, "content_block")
	r := cb.Get("type")
	switch r.Str {
	case "tool_use", "server_tool_use", "mcp_tool_use":
		rd.turn.Block(v.scope, r.Str, cb.Get("name").Str, cb.Get("id").Str)
	}
}

// attributeCache fills c's cache fields from the conversation's previous call, and makes this
// call the previous one: the next round of a memory loop, or the client's next request.
func (x *exchange) attributeCache(c *tokens.Call, r *tokens.Reply) {
	v, t := &x.conv, x.s.cfg.CacheTracker
	if !v.on || c.Status != 200 {
		return
	}
	call := cachetrack.Call{At: t.Now(), Model: x.req.info.Model, System: v.system, Tools: v.tools,
		CacheRead: r.Usage.CacheReadInputTokens, CacheCreation: r.Usage.CacheCreationInputTokens,
		CacheCreation1h: r.Usage.CacheCreation1hInputTokens, MessageID: r.ID, Diagnosis: v.seen.diagnosis}
	for _, e := range r.Edits {
		call.ClearedToolUses += e.ClearedToolUses
		call.ClearedThinkingTurns += e.ClearedThinkingTurns
	}
	var prev *cachetrack.Prev
	if v.known {
		prev = &v.prev
	}
	verdict := cachetrack.Attribute(prev, &call)
	c.CacheMissedInputTokens, c.CacheMissCause = verdict.Missed, verdict.Cause
	c.CacheEffect = tokens.CacheUnknown
	if verdict.Known {
		c.CacheEffect = tokens.CacheMeasured
	}
	v.prev, v.known = cachetrack.Next(prev, &call), true
	t.Store(v.seen.turn, v.prev)
	t.Store(cachetrack.MessageKey(v.scope, r.ID), v.prev)
	v.seen = seenReply{}
}
