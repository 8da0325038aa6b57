package cachetrack

import (
	"hash/maphash"
	"unsafe"

	"github.com/tidwall/gjson"
)

// Request is what a conversation's calls are compared by, read from a request body in one pass
// over its top-level keys: no string of it is kept, and of the messages only the last
// assistant turn's tool_use ids are read.
type Request struct {
	Model         string // a view into the body: copy it to keep it
	System, Tools uint64
	// Turn is the key of the conversation whose previous reply is the request's last assistant
	// turn (zero when that turn made no tool use, or there is none).
	Turn Key
	// HasDiagnostics: the client sent a diagnostics field of its own.
	HasDiagnostics bool
}

// ReadRequest reads r from body for conversations of scope (tenant and key id). body is not
// retained; Model points into it.
func ReadRequest(scope string, body []byte) Request {
	var r Request
	s := unsafe.String(unsafe.SliceData(body), len(body))
	var messages gjson.Result
	var thread string
	gjson.Parse(s).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "model":
			r.Model = v.Str
		case "system":
			r.System = hashString(v.Raw)
		case "tools":
			r.Tools = hashString(v.Raw)
		case "messages":
			messages = v
		case "diagnostics":
			r.HasDiagnostics = v.Type != gjson.Null
		case "thread":
			if v.Get("type").Str == "continue" {
				thread = v.Get("previous_message_id").Str
			}
		}
		return true
	})
	if thread != "" { // the API holds the history: the thread goes on from its previous reply
		r.Turn = MessageKey(scope, thread)
		return r
	}
	var last gjson.Result
	messages.ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").Str == "assistant" {
			last = m
		}
		return true
	})
	if last.Exists() {
		r.Turn = TurnKeyOf(scope, last.Get("content"))
	}
	return r
}

func hashString(s string) uint64 { return maphash.String(seed, s) }

// TurnKeyOf is the key of the tool_use ids (tool_use, server_tool_use and mcp_tool_use blocks,
// but the memory tool's) in a message's content array, as a reply carries them and a client
// resends them.
func TurnKeyOf(scope string, content gjson.Result) Key {
	var t Turn
	content.ForEach(func(_, b gjson.Result) bool {
		t.Block(scope, b.Get("type").Str, b.Get("name").Str, b.Get("id").Str)
		return true
	})
	return t.Key()
}

// Turn accumulates the key of a turn from its content blocks (a streamed reply's
// content_block_start events). The zero value is ready.
type Turn struct {
	h maphash.Hash
	n int
}

// Block feeds one content block's type, name and id (content_block_start's content_block).
// Calls of the memory tool are left out: in memory proxy mode the client never sees them, so
// the turn it resends has only the others.
func (t *Turn) Block(scope, typ, name, id string) {
	switch typ {
	case "tool_use", "server_tool_use", "mcp_tool_use":
	default:
		return
	}
	if name == "memory" {
		return
	}
	if t.n == 0 {
		t.h.SetSeed(seed)
		t.h.WriteString(scope)
		t.h.WriteByte(0)
		t.h.WriteString("turn")
	}
	t.n++
	t.h.WriteByte(0)
	t.h.WriteString(id)
}

// Key is the turn's key, zero when it made no tool use.
func (t *Turn) Key() Key {
	if t.n == 0 {
		return 0
	}
	k := Key(t.h.Sum64())
	if k == 0 {
		k = 1
	}
	return k
}
