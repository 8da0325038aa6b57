package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/ctxproxy/ctxproxy/policy"
)

// The memory loop. When a reply stops for tool_use and its tool calls are all
// memory, the proxy runs them, appends the assistant turn and a user turn of
// tool_results, and calls upstream again: up to memory.max_iterations rounds, so at most
// max_iterations+1 upstream calls per client request.
//
// What the client receives is one message: the blocks of every round except
// the memory tool_use blocks, so it can send the message back unchanged as its
// next assistant turn. Its usage is the sum over the rounds; its id, stop
// reason and context_management are those of the last reply.
//
// A reply that mixes memory calls with the client's own tools ends the loop:
// the memory calls are run and withheld, the client gets its own calls.
// At the cap the last round's memory calls are still run, the reply is handed
// over without them and with stop_reason "pause_turn", which tells a client
// to send the message back as is to let the model go on.

// memCall is one memory tool_use the model made.
type memCall struct {
	id    string
	input []byte
}

// memoryLoop is what the loop carries from one round to the next (the
// exchange's loop; only this file writes it: memory.go runs a round's
// calls). The plain (servePlain) and the
// streamed path (serveStream) both drive it; advance is the loop's one
// decision.
type memoryLoop struct {
	parts    [][]byte // the next upstream request body
	body     []byte   // the same whole, in memory proxy mode
	round    int
	clientID string // the reply id the client sees
	// firstID: the client sees the first round's id (a spliced stream
	// shows the first message_start); else the last reply's.
	firstID bool
	// retry is the tenant's retry policy, off once a memory command wrote: a loop step is
	// never repeated after a write.
	retry retryPolicy
}

// startLoop begins the loop at the client's request. In memory proxy mode
// the loop builds its next requests from the whole body, the thread's owed
// memory results placed in it (applyContinuation); when the store cannot
// give them, startLoop answers the client and returns false. A streamed
// reply shows the first round's id (its first message_start), a whole one
// the last reply's.
func (x *exchange) startLoop() bool {
	x.loop = memoryLoop{parts: x.req.parts, firstID: x.req.info.Stream, retry: x.who.retry}
	if !x.who.memory {
		return true
	}
	body, err := x.applyContinuation(x.r.Context(), joinParts(x.req.parts))
	if err != nil {
		x.fail(http.StatusServiceUnavailable, "api_error", "memory store unavailable: "+err.Error())
		return false
	}
	x.loop.body, x.loop.parts = body, [][]byte{body}
	return true
}

// roundEnd is what a round that ended normally tells the loop.
type roundEnd struct {
	id         string
	requestID  string // the upstream's request-id of the reply: with id, the attribution of its memory writes
	stopReason string
	calls      []memCall // the memory tool_use blocks, in order
	others     int       // the client's own tool_use blocks
}

// mayContinue says whether a reply with this stop reason may carry memory
// calls the proxy runs.
func (x *exchange) mayContinue(stopReason string) bool {
	return x.who.memory && stopReason == "tool_use"
}

func (x *exchange) maxIterations() int {
	if n := x.who.pol.Memory.MaxIterations; n > 0 {
		return n
	}
	return policy.DefaultMaxIterations
}

// advance decides what follows a round that ended normally: another round
// (more; the loop's parts are the next request), or the end of the reply,
// with stop the stop_reason to hand over instead of the round's ("" keeps
// it): "tool_use" when the client's own tools wait, "pause_turn" at the
// iteration cap. The round's memory calls are run either way. assistant is
// the round's content, memory calls included; it is built only when a
// full-history request needs it.
func (x *exchange) advance(ctx context.Context, e roundEnd, assistant func() []byte) (more bool, stop string, err error) {
	l := &x.loop
	if l.round == 0 || !l.firstID {
		l.clientID = e.id
	}
	if !x.mayContinue(e.stopReason) || len(e.calls) == 0 {
		x.saveContinuation(ctx, l.clientID, e.id, nil)
		return false, "", nil
	}
	atCap := l.round >= x.maxIterations()
	results, wrote := x.runMemory(ctx, e)
	if wrote {
		l.retry.retries = 0
	}
	if e.others > 0 || atCap {
		x.saveContinuation(ctx, l.clientID, e.id, results)
		if e.others > 0 {
			return false, "tool_use", nil
		}
		return false, "pause_turn", nil
	}
	var asst []byte
	if !x.req.info.Threaded {
		asst = assistant()
	}
	body, err := nextBody(l.body, e.id, asst, results)
	if err != nil {
		return false, "", fmt.Errorf("continue memory loop: %w", err)
	}
	body = x.diagnosticsForRound(body, e.id)
	l.body, l.parts = body, [][]byte{body}
	l.round++
	return true, "", nil
}

// nextBody is the request that continues the loop after reply replyID.
// A full-history request gets the assistant turn and the results appended; a
// thread is continued from replyID with only the results (the API reference's threads section).
func nextBody(body []byte, replyID string, assistant, results []byte) ([]byte, error) {
	// One pass finds thread and messages; a full-history body (the big one)
	// is then built in one allocation, where two sjson appends would walk
	// and copy it twice.
	var msgs, thread gjson.Result
	root := gjson.ParseBytes(body)
	root.Index = len(body) - len(root.Raw) // leading whitespace: keep child offsets absolute
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "messages":
			msgs = v
		case "thread":
			thread = v
		}
		return true
	})
	if t := thread.Get("type").Str; t == "create" || t == "continue" {
		b, err := sjson.SetRawBytes(body, "messages", append(append([]byte(`[{"role":"user","content":`), results...), "}]"...))
		if err != nil {
			return nil, err
		}
		t := append(append([]byte(`{"type":"continue","previous_message_id":`), jsonstr.Append(nil, replyID)...), '}')
		if b, err = sjson.SetRawBytes(b, "thread", t); err != nil {
			return nil, err
		}
		// The thread keeps its tool set; a tools array would replace it.
		return sjson.DeleteBytes(b, "tools")
	}
	if !msgs.IsArray() || msgs.Index <= 0 {
		return nil, errors.New("request has no messages array")
	}
	end := msgs.Index + len(msgs.Raw) - 1 // the closing ']'
	sep := ","
	if strings.TrimSpace(msgs.Raw[1:len(msgs.Raw)-1]) == "" {
		sep = ""
	}
	out := make([]byte, 0, len(body)+len(assistant)+len(results)+64)
	out = append(out, body[:end]...)
	out = append(out, sep...)
	out = append(out, `{"role":"assistant","content":`...)
	out = append(out, assistant...)
	out = append(out, `},{"role":"user","content":`...)
	out = append(out, results...)
	out = append(out, '}')
	return append(out, body[end:]...), nil
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
