package proxy

import (
	"bytes"
	"context"
	"strconv"

	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.uber.org/zap"
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
// message of body that a kept expansion names (by a thinking block after its first block) is
// replaced by the hidden turns and the blocks of the last round; changed is false when none
// is. An error only when the store fails.
func (x *exchange) restoreHiddenRounds(ctx context.Context, body []byte) (_ []byte, changed bool, _ error) {
	c := x.continuations()
	sc, ok := x.scope()
	if c == nil || !ok || !bytes.Contains(body, []byte(`"assistant"`)) {
		return body, false, nil
	}
	msgs := gjson.GetBytes(body, "messages")
	if !msgs.IsArray() {
		return body, false, nil
	}
	// First the lookups, then the copies: most requests name no kept expansion and are sent
	// as they came, without a copy of their history.
	all := msgs.Array()
	var restored map[int][]byte
	for i, m := range all {
		msg, err := restoredMessage(ctx, c, sc.Tenant, m)
		if err != nil {
			return nil, false, err
		}
		if msg != nil {
			if restored == nil {
				restored = map[int][]byte{}
			}
			restored[i] = msg
		}
	}
	if len(restored) == 0 {
		return body, false, nil
	}
	out := make([][]byte, 0, len(all))
	for i, m := range all {
		if msg, ok := restored[i]; ok {
			out = append(out, msg)
			continue
		}
		out = append(out, []byte(m.Raw))
	}
	body, err := sjson.SetRawBytes(body, "messages", joinArray(out))
	return body, err == nil, err
}

// restoredMessage is what stands for the message m given back to the API: the hidden turns a
// kept expansion names, joined by commas, and the last round's blocks; nil when m names none.
func restoredMessage(ctx context.Context, c memoryhook.Continuations, tenant string, m gjson.Result) ([]byte, error) {
	content := m.Get("content")
	if m.Get("role").Str != "assistant" || !content.IsArray() {
		return nil, nil
	}
	key := firstThinkingKey(content, 1)
	if key == "" {
		return nil, nil
	}
	data, err := c.GetContinuation(ctx, tenant, hiddenKeyPrefix+key)
	if err != nil {
		return nil, err
	}
	blocks := content.Array()
	visible := int(gjson.GetBytes(data, "visible").Int())
	turns := gjson.GetBytes(data, "turns")
	if data == nil || !turns.IsArray() || visible <= 0 || visible >= len(blocks) {
		return nil, nil
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
	return append(out, "]}"...), nil
}
