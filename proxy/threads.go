package proxy

import (
	"context"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// Threads (spec §9). A thread's state lives upstream, so what the proxy hid
// from the client must be squared when the client continues:
//   - a reply that mixed memory calls with the client's own tools, or hit the
//     iteration cap, left memory tool_use blocks in the thread that the
//     client never saw; the API wants their tool_results in the next turn.
//   - a spliced stream showed the client the first reply's id, but the
//     thread goes on from the last reply.
// The proxy keeps a continuation for the id the client saw, in the memory
// store (so every replica finds it), and applies it to the client's continue.

// continuationTTL bounds how long a thread may rest between turns and still
// be continued through the proxy's bookkeeping.
const continuationTTL = 24 * time.Hour

func (x *exchange) continuations() memoryhook.Continuations {
	c, _ := x.s.cfg.Memory.(memoryhook.Continuations)
	return c
}

// saveContinuation records, for the reply id the client saw, the id the
// thread really continues from and the tool_results it still owes.
func (x *exchange) saveContinuation(ctx context.Context, clientID, lastID string, results []byte) {
	if !x.req.info.Threaded || clientID == "" || (clientID == lastID && results == nil) {
		return
	}
	c := x.continuations()
	if c == nil {
		return
	}
	data := append([]byte(`{"previous_message_id":`), jsonstr.Append(nil, lastID)...)
	if results != nil {
		data = append(append(data, `,"results":`...), results...)
	}
	data = append(data, '}')
	if err := c.PutContinuation(ctx, x.req.pol.Tenant, clientID, data, continuationTTL); err != nil {
		x.s.log.Error("keep thread continuation", zap.String("tenant", x.req.tenant), zap.Error(err))
	}
}

// applyContinuation squares a thread continue with what the proxy kept for
// its previous_message_id: the real previous id, and the owed tool_results
// put first in the new user turn, ahead of the client's own.
func (x *exchange) applyContinuation(ctx context.Context, body []byte) ([]byte, error) {
	// Only memory proxy mode leaves continuations; other tenants never wait
	// on the memory store.
	if !x.req.memory || !x.req.info.ThreadContinue {
		return body, nil
	}
	c := x.continuations()
	if c == nil {
		return body, nil
	}
	prev := gjson.GetBytes(body, "thread.previous_message_id").Str
	data, err := c.GetContinuation(ctx, x.req.pol.Tenant, prev)
	if err != nil || data == nil {
		return body, err
	}
	if id := gjson.GetBytes(data, "previous_message_id").Str; id != "" && id != prev {
		if body, err = sjson.SetBytes(body, "thread.previous_message_id", id); err != nil {
			return nil, err
		}
	}
	results := gjson.GetBytes(data, "results")
	if !results.IsArray() || len(results.Array()) == 0 {
		return body, nil
	}
	first := gjson.GetBytes(body, "messages.0")
	if first.Get("role").Str != "user" {
		turn := append(append([]byte(`{"role":"user","content":`), results.Raw...), '}')
		msgs := gjson.GetBytes(body, "messages")
		if !msgs.IsArray() || len(msgs.Array()) == 0 {
			return sjson.SetRawBytes(body, "messages", append(append([]byte{'['}, turn...), ']'))
		}
		inner := msgs.Raw[1:]
		return sjson.SetRawBytes(body, "messages", append(append(append([]byte{'['}, turn...), ','), inner...))
	}
	content := first.Get("content")
	var merged []byte
	owed := results.Raw[:len(results.Raw)-1] // "[...": without the closing bracket
	switch {
	case content.Type == gjson.String:
		merged = append(append([]byte(owed), `,{"type":"text","text":`...), content.Raw...)
		merged = append(merged, "}]"...)
	case content.IsArray() && len(content.Array()) > 0:
		merged = append(append([]byte(owed), ','), content.Raw[1:]...)
	default:
		merged = []byte(results.Raw)
	}
	return sjson.SetRawBytes(body, "messages.0.content", merged)
}
