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

// Threads (the API reference's threads section). A thread's state lives upstream, so what the proxy hid
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
	sc, ok := x.scope()
	if c == nil || !ok {
		return
	}
	data := append([]byte(`{"previous_message_id":`), jsonstr.Append(nil, lastID)...)
	if results != nil {
		data = append(append(data, `,"results":`...), results...)
	}
	data = append(data, '}')
	if err := c.PutContinuation(ctx, sc.Tenant, clientID, data, continuationTTL); err != nil {
		x.s.log.Error("keep thread continuation", zap.String("tenant", x.who.tenant), zap.Error(err))
	}
}

// applyContinuation squares a thread continue with what the proxy kept for
// its previous_message_id: the real previous id, and the owed tool_results
// put first in the new user turn, ahead of the client's own.
func (x *exchange) applyContinuation(ctx context.Context, body []byte) ([]byte, error) {
	// Only memory proxy mode leaves continuations; other tenants never wait
	// on the memory store.
	if !x.who.memory || !x.req.info.ThreadContinue {
		return body, nil
	}
	c := x.continuations()
	sc, ok := x.scope()
	if c == nil || !ok {
		return body, nil
	}
	prev := gjson.GetBytes(body, "thread.previous_message_id").Str
	data, err := c.GetContinuation(ctx, sc.Tenant, prev)
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
	return placeOwedResults(body, results)
}

// placeOwedResults puts the owed tool_results first in the request's first
// user turn.
func placeOwedResults(body []byte, results gjson.Result) ([]byte, error) {
	// The results answer the thread's last assistant turn, so they go in the
	// first user turn. Mid-conversation system entries stand outside the
	// user/assistant alternation, and none may sit between a tool_use and
	// its tool_result: leading system entries are skipped, and the user turn
	// carrying the results is moved ahead of them.
	var msgs []gjson.Result
	gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
		msgs = append(msgs, m)
		return true
	})
	k := 0
	for k < len(msgs) && msgs[k].Get("role").Str == "system" {
		k++
	}
	if k == len(msgs) || msgs[k].Get("role").Str != "user" {
		turn := append(append([]byte(`{"role":"user","content":`), results.Raw...), '}')
		return setMessages(body, append([][]byte{turn}, rawMessages(msgs)...))
	}
	content := msgs[k].Get("content")
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
	if k == 0 {
		return sjson.SetRawBytes(body, "messages.0.content", merged)
	}
	turn, err := sjson.SetRawBytes([]byte(msgs[k].Raw), "content", merged)
	if err != nil {
		return nil, err
	}
	rest := rawMessages(msgs)
	out := append([][]byte{turn}, rest[:k]...)
	return setMessages(body, append(out, rest[k+1:]...))
}

func rawMessages(msgs []gjson.Result) [][]byte {
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		out[i] = []byte(m.Raw)
	}
	return out
}

func setMessages(body []byte, msgs [][]byte) ([]byte, error) {
	return sjson.SetRawBytes(body, "messages", joinArray(msgs))
}
