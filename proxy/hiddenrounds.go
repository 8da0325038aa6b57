package proxy

import (
	"bytes"
	"context"
	"strconv"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/policy"
)

// Thinking across the memory splice (the December 2026 API reference's thinking-binding
// section). The client gets one merged message without the memory turns, but a thinking block
// the model wrote in a later round is bound to the conversation before it, memory turns
// included: sent back merged, it fails the API's prefix check (a 400 by default, the reasoning
// dropped under drop_block). So, for a full-history request whose loop ran memory rounds,
// the proxy keeps the rounds the client did not see, keyed by the first thinking block of a
// later round (its signature is unique), in the memory store beside the thread continuations
// (every replica finds them). When a request of the tenant carries that merged message back,
// the proxy sends the API the conversation it bound the blocks to: the hidden rounds, then the
// last round's blocks as the client has them.

// hiddenKeyPrefix names a kept expansion among the store's continuations.
const hiddenKeyPrefix = "thinking-splice:"

// hiddenRounds is what a loop hid from the client, for the expansion.
type hiddenRounds struct {
	turns   []byte // the hidden assistant and user turns, comma-separated message objects
	visible int    // blocks of those assistant turns the client sees (all but the memory calls)
	key     string // signature of the first thinking block of a round after the first
}

// hide records a round the loop continues after: its assistant turn (memory calls included),
// with calls memory calls, and the user turn of their results.
func (h *hiddenRounds) hide(round int, assistant, results []byte, calls int) {
	if len(h.turns) > 0 {
		h.turns = append(h.turns, ',')
	}
	h.turns = append(h.turns, `{"role":"assistant","content":`...)
	h.turns = append(h.turns, assistant...)
	h.turns = append(h.turns, `},{"role":"user","content":`...)
	h.turns = append(h.turns, results...)
	h.turns = append(h.turns, '}')
	h.visible += int(gjson.GetBytes(assistant, "#").Int()) - calls
	if round > 0 {
		h.see(assistant)
	}
}

// see takes the key from a later round's content, if it has none yet.
func (h *hiddenRounds) see(content []byte) {
	if h.key == "" {
		h.key = firstThinkingKey(gjson.ParseBytes(content), 0)
	}
}

// firstThinkingKey is the signature (the data of a redacted block) of the first thinking block
// of content at index from or later; "" when there is none.
func firstThinkingKey(content gjson.Result, from int) string {
	key := ""
	i := 0
	content.ForEach(func(_, b gjson.Result) bool {
		if i >= from {
			switch b.Get("type").Str {
			case "thinking":
				key = b.Get("signature").Str
			case "redacted_thinking":
				key = b.Get("data").Str
			}
		}
		i++
		return key == ""
	})
	return key
}

// keepHiddenRounds stores what the loop hid, at its end, when a later round wrote thinking: the
// rounds the client did not see and how many blocks of its merged message they gave.
func (x *exchange) keepHiddenRounds(ctx context.Context, last func() []byte) {
	h := &x.loop.hidden
	if x.req.info.Threaded || x.loop.round == 0 || len(h.turns) == 0 {
		return
	}
	if h.key == "" && last != nil {
		h.see(last())
	}
	c := x.continuations()
	sc, ok := x.scope()
	if h.key == "" || c == nil || !ok {
		return
	}
	data := make([]byte, 0, len(h.turns)+48)
	data = append(data, `{"visible":`...)
	data = strconv.AppendInt(data, int64(h.visible), 10)
	data = append(data, `,"turns":[`...)
	data = append(data, h.turns...)
	data = append(data, "]}"...)
	if err := c.PutContinuation(ctx, sc.Tenant, hiddenKeyPrefix+h.key, data, continuationTTL); err != nil {
		x.s.log.Error("keep the memory loop's hidden rounds", zap.String("tenant", x.who.tenant), zap.Error(err))
	}
}

// restoreHiddenRounds gives the API back the rounds a loop hid from the client: each assistant
// message of the request that a kept expansion names (by a thinking block after its first
// block) is replaced by the hidden turns and the blocks of the last round; changed is false
// when none is. The messages are read where the rewrite left them (no copy of the request),
// and the expansions they may name are looked up in one read of the store; only a request
// that names one is built anew. An error only when the store fails.
func (x *exchange) restoreHiddenRounds(ctx context.Context) (_ []byte, changed bool, _ error) {
	c := x.continuations()
	sc, ok := x.scope()
	if c == nil || !ok {
		return nil, false, nil
	}
	msgs := x.req.msgs
	if !x.req.msgsRead { // a body rewritten in place: small, one piece unless diagnostics were added
		msgs = []byte(gjson.GetBytes(joinParts(x.req.parts), "messages").Raw)
	}
	at, keys := hiddenCandidates(msgs)
	if len(keys) == 0 {
		return nil, false, nil
	}
	kept, err := c.GetContinuations(ctx, sc.Tenant, keys)
	if err != nil {
		return nil, false, err
	}
	var restored map[int][]byte
	for j, data := range kept {
		if msg := restoredMessage(at[j].content, data); msg != nil {
			if restored == nil {
				restored = map[int][]byte{}
			}
			restored[at[j].index] = msg
		}
	}
	if len(restored) == 0 {
		return nil, false, nil
	}
	body := joinParts(x.req.parts)
	all := gjson.GetBytes(body, "messages").Array()
	out := make([][]byte, 0, len(all))
	for i, m := range all {
		if msg, ok := restored[i]; ok {
			out = append(out, msg)
			continue
		}
		out = append(out, []byte(m.Raw))
	}
	body, err = sjson.SetRawBytes(body, "messages", joinArray(out))
	return body, err == nil, err
}

// hiddenCandidate is an assistant message that may stand for hidden rounds: its index among the
// messages and its content.
type hiddenCandidate struct {
	index   int
	content gjson.Result
}

// hiddenCandidates are the assistant messages of msgs (a messages array the rewrite accepted)
// with a thinking block after their first block, and the keys a kept expansion of each would
// have. The messages are walked member by member in one pass, each value's end found by the
// rewrite's skim (policy.ValueEnd), which passes over a long tool result 64 bytes at a time;
// only an assistant message's content is parsed. The results point into msgs. A transcript
// without a thinking block is not walked.
func hiddenCandidates(msgs []byte) (at []hiddenCandidate, keys []string) {
	if !bytes.Contains(msgs, []byte(`thinking"`)) { // "thinking" and "redacted_thinking" both end so
		return nil, nil
	}
	walkArray(msgs, func(n, i int) (int, bool) {
		if msgs[i] != '{' {
			return valueEnd(msgs, i)
		}
		var role, content []byte
		escaped := false
		end, ok := walkObject(msgs, i, func(key, v []byte) {
			switch string(key) {
			case "role":
				role = v
			case "content":
				content = v
			}
			escaped = escaped || bytes.IndexByte(key, '\\') >= 0
		})
		if !ok {
			return end, false
		}
		if escaped || bytes.IndexByte(role, '\\') >= 0 { // escapes the skim does not decode
			r := gjson.GetManyBytes(msgs[i:end], "role", "content")
			role, content = []byte(strconv.Quote(r[0].Str)), []byte(r[1].Raw)
		}
		if string(role) != `"assistant"` || len(content) == 0 || content[0] != '[' {
			return end, true
		}
		c := gjson.Parse(unsafe.String(unsafe.SliceData(content), len(content)))
		if key := firstThinkingKey(c, 1); key != "" {
			at = append(at, hiddenCandidate{index: n, content: c})
			keys = append(keys, hiddenKeyPrefix+key)
		}
		return end, true
	})
	return at, keys
}

// walkArray calls elem with the index and the offset of each element of the array b, a value
// of a body the rewrite accepted; elem returns the offset after the element. The walk stops at
// anything it does not expect.
func walkArray(b []byte, elem func(n, i int) (end int, ok bool)) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return
	}
	for n := 0; ; n++ {
		if i = skipSpace(b, i+1); i >= len(b) || b[i] == ']' {
			return
		}
		end, ok := elem(n, i)
		if !ok {
			return
		}
		if i = skipSpace(b, end); i >= len(b) || b[i] != ',' {
			return
		}
	}
}

// walkObject calls member with the key (as written between its quotes, undecoded) and the value
// of each member of the object at b[i], and returns the offset after the object.
func walkObject(b []byte, i int, member func(key, v []byte)) (int, bool) {
	for {
		if i = skipSpace(b, i+1); i >= len(b) {
			return i, false
		}
		if b[i] == '}' {
			return i + 1, true
		}
		kend, ok := policy.ValueEnd(b, i)
		if !ok || b[i] != '"' {
			return i, false
		}
		key := b[i+1 : kend-1]
		if i = skipSpace(b, kend); i >= len(b) || b[i] != ':' {
			return i, false
		}
		i = skipSpace(b, i+1)
		end, ok := valueEnd(b, i)
		if !ok {
			return i, false
		}
		member(key, b[i:end])
		if i = skipSpace(b, end); i >= len(b) {
			return i, false
		}
		if b[i] == '}' {
			return i + 1, true
		}
		if b[i] != ',' {
			return i, false
		}
	}
}

// valueEnd is the offset after the value at b[i]: a string, array or object by the skim, a
// number or a literal where it stops.
func valueEnd(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	if end, ok := policy.ValueEnd(b, i); ok {
		return end, true
	}
	end := i
	for end < len(b) && b[end] != ',' && b[end] != ']' && b[end] != '}' && skipSpace(b, end) == end {
		end++
	}
	return end, end > i
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// restoredMessage is what stands for a message of content given back to the API, from data, the
// kept expansion its key named: the hidden turns, joined by commas, and the last round's
// blocks; nil when data is none or does not fit the message.
func restoredMessage(content gjson.Result, data []byte) []byte {
	if data == nil {
		return nil
	}
	blocks := content.Array()
	visible := int(gjson.GetBytes(data, "visible").Int())
	turns := gjson.GetBytes(data, "turns")
	if !turns.IsArray() || visible <= 0 || visible >= len(blocks) {
		return nil
	}
	var out []byte
	for _, t := range turns.Array() {
		out = append(out, t.Raw...)
		out = append(out, ',')
	}
	out = append(out, `{"role":"assistant","content":[`...)
	for i, b := range blocks[visible:] {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, b.Raw...)
	}
	return append(out, "]}"...)
}
