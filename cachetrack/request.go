package cachetrack

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"unsafe"

	"github.com/tidwall/gjson"
)

// Request is what a conversation's calls are compared by. No byte of the body is kept.
type Request struct {
	System, Tools uint64
	// Turn is the key of the conversation whose previous reply is the request's last assistant
	// turn (zero when that turn made no tool use, or there is none).
	Turn Key
	// HasDiagnostics: the client sent a diagnostics field of its own.
	HasDiagnostics bool
}

// Members are the raw values of the top-level members of a request body that name its
// conversation (nil when absent): what a validating pass over the body found, so that reading
// them costs no pass of its own (FindMembers finds them for a caller without one).
type Members struct {
	System, Tools, Messages, Thread, Diagnostics []byte
	// recent are the last objects of Messages, when FindMembers walked it: no walk back.
	recent recentObjects
}

// recentObjects are where the last few objects of an array lie, as a forward walk over it found
// them (offsets into the array, newest last in a ring).
type recentObjects struct {
	walked bool
	n      int // objects seen
	at     [8][2]int
}

func (r *recentObjects) add(start, end int) {
	r.at[r.n%len(r.at)] = [2]int{start, end}
	r.n++
}

// last is the last object of arr whose role is "assistant", from the ring; ok is false when the
// ring cannot tell (the assistant turn, if any, is older than the ring holds).
func (r *recentObjects) last(arr []byte) (msg []byte, ok bool) {
	for k := 1; k <= min(r.n, len(r.at)); k++ {
		at := r.at[(r.n-k)%len(r.at)]
		if el := arr[at[0]:at[1]]; gjson.Get(view(el), "role").Str == "assistant" {
			return el, true
		}
	}
	return nil, r.n <= len(r.at)
}

// ReadRequest reads r from body for conversations of scope (tenant and key id), in one pass
// (FindMembers). body is not retained.
func ReadRequest(scope string, body []byte) Request {
	return Read(scope, FindMembers(body))
}

// Read reads r from m, for conversations of scope. Of the messages only the last assistant
// turn is read, found from the end of the array: on a long transcript the work is the last
// turns', not the transcript's.
func Read(scope string, m Members) Request {
	var r Request
	if m.System != nil {
		r.System = Hash(m.System)
	}
	if m.Tools != nil {
		r.Tools = Hash(m.Tools)
	}
	r.HasDiagnostics = m.Diagnostics != nil && string(m.Diagnostics) != "null"
	if m.Thread != nil {
		th := gjson.Parse(view(m.Thread))
		if th.Get("type").Str == "continue" {
			// The API holds the history: the thread goes on from its previous reply.
			if id := th.Get("previous_message_id").Str; id != "" {
				r.Turn = MessageKey(scope, id)
				return r
			}
		}
	}
	var msg []byte
	ok := false
	if m.recent.walked {
		msg, ok = m.recent.last(m.Messages)
	}
	if !ok {
		msg = lastAssistant(m.Messages)
	}
	if msg != nil {
		r.Turn = TurnKeyOf(scope, gjson.Get(view(msg), "content"))
	}
	return r
}

// view is b as a string, without a copy; only for reading within the call.
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// FindMembers finds m's members in body, a JSON object, in one pass that skips over their
// values. body is not validated: a malformed one gives what could be found (the request is
// refused anyway), never a read out of bounds. Keys given twice: the first counts, as the proxy
// reads it.
func FindMembers(body []byte) Members {
	var m Members
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return m
	}
	i = skipSpace(body, i+1)
	for i < len(body) && body[i] == '"' {
		kEnd := skipString(body, i)
		if kEnd < 0 {
			return m
		}
		key := body[i+1 : kEnd-1]
		if bytes.IndexByte(key, '\\') >= 0 { // an escaped key means what it decodes to
			key = []byte(gjson.Parse(view(body[i:kEnd])).Str)
		}
		i = skipSpace(body, kEnd)
		if i >= len(body) || body[i] != ':' {
			return m
		}
		i = skipSpace(body, i+1)
		var vEnd int
		if string(key) == "messages" && m.Messages == nil && i < len(body) && body[i] == '[' {
			vEnd = skipArray(body, i, &m.recent)
		} else {
			vEnd = skipValue(body, i)
		}
		if vEnd < 0 {
			return m
		}
		var at *[]byte
		switch string(key) {
		case "system":
			at = &m.System
		case "tools":
			at = &m.Tools
		case "messages":
			at = &m.Messages
		case "thread":
			at = &m.Thread
		case "diagnostics":
			at = &m.Diagnostics
		}
		if at != nil && *at == nil {
			*at = body[i:vEnd:vEnd]
		}
		i = skipSpace(body, vEnd)
		if i >= len(body) || body[i] != ',' {
			return m
		}
		i = skipSpace(body, i+1)
	}
	return m
}

// lastAssistant is the last element of the JSON array arr whose role is "assistant", nil when
// there is none (or arr is not an array). It walks the elements from the end.
func lastAssistant(arr []byte) []byte {
	i := skipSpaceBack(arr, len(arr)-1)
	if i <= 0 || arr[i] != ']' {
		return nil
	}
	for i = skipSpaceBack(arr, i-1); i > 0; {
		start := valueStartBack(arr, i)
		if start <= 0 {
			return nil
		}
		el := arr[start : i+1]
		if el[0] == '{' && gjson.Get(view(el), "role").Str == "assistant" {
			return el
		}
		i = skipSpaceBack(arr, start-1)
		if i <= 0 || arr[i] != ',' {
			return nil // the array's '[' (no element left), or not an array
		}
		i = skipSpaceBack(arr, i-1)
	}
	return nil
}

// Scanning JSON from either end. In valid JSON a quote inside a string is always escaped: the
// run of backslashes before it is odd, while before a string's own quotes it is even (escaped
// backslashes only). So a string can be skipped from either of its quotes.

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipSpaceBack is the last index at or before i that is not white space (-1 when none).
func skipSpaceBack(b []byte, i int) int {
	for i >= 0 && isSpace(b[i]) {
		i--
	}
	return i
}

// escaped reports whether the quote at b[i] is escaped: an odd run of backslashes before it.
func escaped(b []byte, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// skipString is the index after the string whose opening quote is b[i], -1 when it is not closed.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		if !escaped(b, j) {
			return j + 1
		}
	}
	return -1
}

// stringStartBack is the index of the opening quote of the string whose closing quote is b[i],
// -1 when there is none.
func stringStartBack(b []byte, i int) int {
	for j := i - 1; j >= 0; j-- {
		j = lastQuote(b, j)
		if j < 0 {
			return -1
		}
		if !escaped(b, j) {
			return j
		}
	}
	return -1
}

// skipValue is the index after the JSON value starting at b[i], -1 when it does not end.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				if j = skipString(b, j); j < 0 {
					return -1
				}
				j-- // the loop's j++ steps past the closing quote
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && !isDelim(b[j]) {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// skipArray is skipValue for the array starting at b[i], noting where its last objects lie
// (offsets from i) in r.
func skipArray(b []byte, i int, r *recentObjects) int {
	depth, start := 0, 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			if j = skipString(b, j); j < 0 {
				return -1
			}
			j--
		case '{', '[':
			if depth == 1 {
				start = j
			}
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				r.walked = true
				return j + 1
			}
			if depth == 1 && b[j] == '}' && b[start] == '{' {
				r.add(start-i, j+1-i)
			}
		}
	}
	return -1
}

// valueStartBack is the index where the JSON value ending at b[i] starts, -1 when it does not.
func valueStartBack(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringStartBack(b, i)
	case '}', ']':
		depth := 0
		for j := i; j >= 0; j-- {
			switch b[j] {
			case '"':
				if j = stringStartBack(b, j); j < 0 {
					return -1
				}
			case '}', ']':
				depth++
			case '{', '[':
				if depth--; depth == 0 {
					return j
				}
			}
		}
		return -1
	}
	j := i
	for j >= 0 && !isDelim(b[j]) {
		j--
	}
	if j == i {
		return -1
	}
	return j + 1
}

func isDelim(c byte) bool {
	return isSpace(c) || c == ',' || c == ':' || c == '[' || c == ']' || c == '{' || c == '}' || c == '"'
}

// lastQuote is the last index at or before i where b has a quote, -1 when none. It reads eight
// bytes at a time: the last turns of a transcript are long tool results.
func lastQuote(b []byte, i int) int {
	const (
		ones   = 0x0101010101010101
		highs  = 0x80 * ones
		quotes = '"' * ones
	)
	for ; i >= 7; i -= 8 {
		x := binary.LittleEndian.Uint64(b[i-7:i+1]) ^ quotes // a zero byte where b has a quote
		// Exact zero-byte test (no borrow across bytes): the high bit of each zero byte.
		z := ^(((x &^ highs) + (highs - ones)) | x) & highs
		if z != 0 {
			return i - 7 + (63-bits.LeadingZeros64(z))/8
		}
	}
	for ; i >= 0; i-- {
		if b[i] == '"' {
			return i
		}
	}
	return -1
}

// TurnKeyOf is the key of the tool_use ids (tool_use, server_tool_use and mcp_tool_use blocks,
// but the memory tool's) in a message's content array, as a reply carries them and a client
// resends them.
func TurnKeyOf(scope string, content gjson.Result) Key {
	var t Turn
	content.ForEach(func(_, b gjson.Result) bool {
		// One pass over the block (a tool_use's input may be long); the first of a key counts.
		var typ, name, id gjson.Result
		b.ForEach(func(k, v gjson.Result) bool {
			switch {
			case k.Str == "type" && !typ.Exists():
				typ = v
			case k.Str == "name" && !name.Exists():
				name = v
			case k.Str == "id" && !id.Exists():
				id = v
			}
			return true
		})
		t.Block(scope, typ.Str, name.Str, id.Str)
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
