package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unsafe"

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
	// parts is the next upstream request body: the client's request as the rewrite left it
	// (pieces of its buffer and the policy's additions), sent without joining them, as most
	// requests make no memory round; nextBody builds a whole one when a round does.
	parts    [][]byte
	msgEnd   partPos // where parts' messages array closes, when known: spliceRound
	round    int
	clientID string // the reply id the client sees
	// firstID: the client sees the first round's id (a spliced stream
	// shows the first message_start); else the last reply's.
	firstID bool
	// retry is the tenant's retry policy, off once a memory command wrote: a loop step is
	// never repeated after a write.
	retry retryPolicy
	// wrote: a memory command of the loop wrote (the reply is kept for a resend, replay.go).
	wrote bool
	// hidden is what the rounds hid from the client, kept for a request that sends the merged
	// message back (hiddenrounds.go); only with thinking on.
	hidden hiddenRounds
}

// startLoop begins the loop at the client's request. In memory proxy mode a
// continued thread's request gets the thread's owed memory results placed in it
// (applyContinuation); when the store cannot give them, startLoop answers the
// client and returns false. A streamed reply shows the first round's id (its
// first message_start), a whole one the last reply's.
func (x *exchange) startLoop() bool {
	x.loop = memoryLoop{parts: x.req.parts, msgEnd: x.req.msgEnd, firstID: x.req.info.Stream, retry: x.who.retry}
	if x.who.memory && x.thinkingOn() && !x.req.info.Threaded {
		body, changed, err := x.restoreHiddenRounds(x.r.Context())
		if err != nil {
			x.fail(http.StatusServiceUnavailable, "api_error", "memory store unavailable: "+err.Error())
			return false
		}
		if changed {
			x.loop.parts, x.loop.msgEnd = [][]byte{body}, partPos{}
		}
	}
	if !x.who.memory || !x.req.info.ThreadContinue {
		return true
	}
	x.loop.msgEnd = partPos{}
	body, err := x.applyContinuation(x.r.Context(), joinParts(x.req.parts))
	if err != nil {
		x.fail(http.StatusServiceUnavailable, "api_error", "memory store unavailable: "+err.Error())
		return false
	}
	x.loop.parts = [][]byte{body}
	return true
}

// sendRound sends the loop's next request (roundTrip). When it went again without an edit the
// upstream refused, the body resent is the one the next rounds build on.
func (x *exchange) sendRound(ctx context.Context) (*http.Response, time.Time, error) {
	resp, t0, resent, err := x.roundTrip(ctx, x.loop.parts, x.loop.retry)
	if resent != nil {
		x.loop.parts, x.loop.msgEnd = resent, partPos{}
	}
	return resp, t0, err
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

// thinkingOn says whether the request's model may write thinking blocks.
func (x *exchange) thinkingOn() bool { return x.req.info.Thinking || x.req.info.BetweenTools }

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
		x.keepHiddenRounds(ctx, assistant)
		return false, "", nil
	}
	atCap := l.round >= x.maxIterations()
	results, wrote := x.runMemory(ctx, e)
	if wrote {
		l.retry.retries = 0
		l.wrote = true
	}
	if e.others > 0 || atCap {
		x.saveContinuation(ctx, l.clientID, e.id, results)
		x.keepHiddenRounds(ctx, assistant)
		if e.others > 0 {
			return false, "tool_use", nil
		}
		return false, "pause_turn", nil
	}
	var asst []byte
	if !x.req.info.Threaded {
		asst = assistant()
		if x.thinkingOn() {
			l.hidden.hide(l.round, asst, results, len(e.calls))
		}
	}
	if parts, end, ok := spliceRound(l.parts, l.msgEnd, e.id, asst, results, x.conv.asked); ok {
		l.parts, l.msgEnd = parts, end
	} else {
		body, err := nextBody(l.parts, e.id, asst, results, x.conv.asked)
		if err != nil {
			return false, "", fmt.Errorf("continue memory loop: %w", err)
		}
		l.parts, l.msgEnd = [][]byte{body}, partPos{}
	}
	l.round++
	return true, "", nil
}

// partPos is a byte of a body in pieces: parts[part][idx].
type partPos struct {
	part, idx int
	ok        bool
}

// posIn finds body[off] among parts, which alias body where the rewrite kept its bytes (by
// address: the rewrite leaves kept bytes where they were); not ok when no part holds it.
func posIn(parts [][]byte, body []byte, off int) partPos {
	if off < 0 || off >= len(body) {
		return partPos{}
	}
	at := uintptr(unsafe.Pointer(&body[off]))
	for i, p := range parts {
		if len(p) == 0 {
			continue
		}
		start := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
		if at >= start && at < start+uintptr(len(p)) && p[at-start] == ']' {
			return partPos{part: i, idx: int(at - start), ok: true}
		}
	}
	return partPos{}
}

// diagPrefix opens the diagnostics member askDiagnostics adds (appendDiagnostics).
const diagPrefix = `"diagnostics":{"previous_message_id":`

// spliceRound is nextBody for a full-history request whose messages array closes at end in
// parts: the next request's parts are the same pieces, the one holding the ']' cut there with
// the round's turns between, and, when the request asks the cache diagnosis, a new last piece
// naming replyID (askDiagnostics put the field in the last piece). Nothing of the transcript
// is copied or read again: a round on a 1 MiB body costs what it does on a small one. The
// pieces of the client's buffer stay valid for every round: it is released when the request
// is over. Not ok when end is not known or the field is not where askDiagnostics puts it.
func spliceRound(parts [][]byte, end partPos, replyID string, assistant, results []byte, diagnose bool) ([][]byte, partPos, bool) {
	if !end.ok || end.part >= len(parts) || end.idx >= len(parts[end.part]) || parts[end.part][end.idx] != ']' {
		return nil, partPos{}, false
	}
	p := parts[end.part]
	turns := make([]byte, 0, len(assistant)+len(results)+64)
	if !emptyBefore(parts, end) {
		turns = append(turns, ',')
	}
	turns = append(turns, `{"role":"assistant","content":`...)
	turns = append(turns, assistant...)
	turns = append(turns, `},{"role":"user","content":`...)
	turns = append(turns, results...)
	turns = append(turns, '}')
	out := make([][]byte, 0, len(parts)+2)
	out = append(out, parts[:end.part]...)
	if end.idx > 0 {
		out = append(out, p[:end.idx])
	}
	out = append(out, turns)
	next := partPos{part: len(out), idx: 0, ok: true}
	out = append(out, p[end.idx:])
	out = append(out, parts[end.part+1:]...)
	if diagnose {
		last, ok := withPreviousID(out[len(out)-1], replyID)
		if !ok {
			return nil, partPos{}, false
		}
		out[len(out)-1] = last // a copy of the last piece: the ']' at next stays first in it when it is there
	}
	return out, next, true
}

// withPreviousID is lp, the last piece of a request, with the value of the diagnostics field
// askDiagnostics put in it replaced by replyID, padded as appendDiagnostics pads it.
func withPreviousID(lp []byte, replyID string) ([]byte, bool) {
	i := bytes.LastIndex(lp, []byte(diagPrefix))
	if i < 0 {
		return nil, false
	}
	v := i + len(diagPrefix)
	tail := lp[v:]
	old := gjson.Parse(unsafe.String(unsafe.SliceData(tail), len(tail))) // a view, as bstr: read before last is built
	if old.Type != gjson.String && old.Type != gjson.Null {
		return nil, false
	}
	rest := v + len(old.Raw)
	for rest < len(lp) && lp[rest] == ' ' {
		rest++
	}
	last := make([]byte, 0, len(lp)+len(replyID)+diagValueWidth)
	last = jsonstr.Append(append(last, lp[:v]...), replyID)
	for len(last)-v < diagValueWidth {
		last = append(last, ' ')
	}
	return append(last, lp[rest:]...), true
}

// emptyBefore reports whether the array closing at end has no elements: only whitespace back
// to its '['.
func emptyBefore(parts [][]byte, end partPos) bool {
	for i, j := end.part, end.idx-1; i >= 0; i-- {
		p := parts[i]
		if i != end.part {
			j = len(p) - 1
		}
		for ; j >= 0; j-- {
			switch p[j] {
			case ' ', '\t', '\n', '\r':
				continue
			case '[':
				return true
			}
			return false
		}
	}
	return false
}

// nextBody is the request that continues the loop after reply replyID, from
// the parts of the one before it. A full-history request gets the assistant
// turn and the results appended; a thread is continued from replyID with only
// the results (the API reference's threads section). diagnose: the request
// asks the cache diagnosis of the reply it continues from
// (diagnostics.previous_message_id, see cacheconv.go).
//
// A full-history body (a long transcript, megabytes) is copied once: its parts
// into a buffer with room for the new turns, read there without a copy, and the
// turns spliced in by moving what follows the messages (a few bytes, usually).
func nextBody(parts [][]byte, replyID string, assistant, results []byte, diagnose bool) ([]byte, error) {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	body := make([]byte, 0, n+len(assistant)+len(results)+len(replyID)+128)
	for _, p := range parts {
		body = append(body, p...)
	}
	// One pass finds thread, messages and diagnostics.
	var msgs, thread, diag gjson.Result
	// A view (bstr's conversion, written here so the splice reads in one file): body is
	// written only after its last read.
	root := gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body)))
	root.Index = len(body) - len(root.Raw) // leading whitespace: keep child offsets absolute
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "messages":
			msgs = v
		case "thread":
			thread = v
		case "diagnostics":
			diag = v
		}
		return true
	})
	if t := thread.Get("type").Str; t == "create" || t == "continue" {
		return nextThreadBody(body, replyID, results, diagnose)
	}
	if !msgs.IsArray() || msgs.Index <= 0 {
		return nil, errors.New("request has no messages array")
	}
	end := msgs.Index + len(msgs.Raw) - 1 // the closing ']'
	turns := make([]byte, 0, len(assistant)+len(results)+64)
	if strings.TrimSpace(msgs.Raw[1:len(msgs.Raw)-1]) != "" {
		turns = append(turns, ',')
	}
	turns = append(turns, `{"role":"assistant","content":`...)
	turns = append(turns, assistant...)
	turns = append(turns, `},{"role":"user","content":`...)
	turns = append(turns, results...)
	turns = append(turns, '}')
	edits := []splice{{end, end, turns}}
	rare := false // a diagnostics member that is not an object: sjson's rules, on the whole body
	if diagnose { // as sjson.SetBytes(body, "diagnostics.previous_message_id", replyID) writes it
		switch {
		case !diag.Exists():
			d := append([]byte(`,"diagnostics":{"previous_message_id":`), jsonstr.Append(nil, replyID)...)
			last := bytes.LastIndexByte(body, '}') // the root's closing '}'
			edits = append(edits, splice{last, last, append(d, '}')})
		case diag.IsObject():
			if d, err := sjson.SetBytes([]byte(diag.Raw), "previous_message_id", replyID); err == nil {
				edits = append(edits, splice{diag.Index, diag.Index + len(diag.Raw), d})
			}
		default:
			rare = true
		}
	}
	body = applySplices(body, edits)
	if rare {
		if out, err := sjson.SetBytes(body, "diagnostics.previous_message_id", replyID); err == nil {
			body = out
		}
	}
	return body, nil
}

// nextThreadBody continues a thread: its messages are the results alone.
func nextThreadBody(body []byte, replyID string, results []byte, diagnose bool) ([]byte, error) {
	b, err := sjson.SetRawBytes(body, "messages", append(append([]byte(`[{"role":"user","content":`), results...), "}]"...))
	if err != nil {
		return nil, err
	}
	t := append(append([]byte(`{"type":"continue","previous_message_id":`), jsonstr.Append(nil, replyID)...), '}')
	if b, err = sjson.SetRawBytes(b, "thread", t); err != nil {
		return nil, err
	}
	// The thread keeps its tool set; a tools array would replace it.
	if b, err = sjson.DeleteBytes(b, "tools"); err != nil {
		return nil, err
	}
	if diagnose {
		if out, err := sjson.SetBytes(b, "diagnostics.previous_message_id", replyID); err == nil {
			b = out
		}
	}
	return b, nil
}

// splice replaces b[from:to] with with.
type splice struct {
	from, to int
	with     []byte
}

// applySplices makes the edits, which do not overlap, in b, in place where its
// capacity allows: the later first, so each moves only the bytes after it.
func applySplices(b []byte, edits []splice) []byte {
	slices.SortFunc(edits, func(x, y splice) int { return y.from - x.from })
	for _, e := range edits {
		old, grow := len(b), len(e.with)-(e.to-e.from)
		if grow > 0 {
			b = slices.Grow(b, grow)[:old+grow]
		}
		copy(b[e.to+grow:], b[e.to:old])
		b = b[:old+grow]
		copy(b[e.from:], e.with)
	}
	return b
}
