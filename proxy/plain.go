package proxy

import (
	"context"
	"net/http"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/ctxproxy/ctxproxy/tokens"
)

// The non-streamed reply: one upstream call relayed as it is (relayOnce), or
// the Messages path, whose rounds the memory loop (loop.go) may continue.

// servePlain serves a non-streamed request, running the memory loop (begun
// by startLoop) when the tenant's memory mode is proxy.
func (x *exchange) servePlain() {
	ctx := x.r.Context()
	var shown [][]byte // client-visible blocks of earlier rounds
	for {
		resp, reply, ok := x.plainRound(ctx)
		if !ok {
			return
		}
		if resp.StatusCode != http.StatusOK {
			// Errors are relayed unchanged, also mid-loop: the client retries the
			// request, and memory writes already made stay made.
			x.writeReply(resp, reply)
			return
		}
		var r tokens.Reply
		r, reply = x.readPlain(reply)
		x.record(resp, r, x.plainMeta(&r, reply))
		var end roundEnd
		var client [][]byte // the reply's blocks but its memory calls
		if x.who.memory {
			end.stopReason = gjson.GetBytes(reply, "stop_reason").Str
		}
		if x.mayContinue(end.stopReason) {
			end.id, end.requestID = gjson.GetBytes(reply, "id").Str, resp.Header.Get("Request-Id")
			client, end.calls, end.others = splitReply(reply)
		}
		more, stop, err := x.advance(ctx, end, func() []byte { return []byte(gjson.GetBytes(reply, "content").Raw) })
		switch {
		case err != nil:
			x.fail(http.StatusInternalServerError, "api_error", err.Error())
		case more:
			shown = append(shown, client...)
			continue
		case stop != "":
			if client == nil {
				client = [][]byte{} // every block was a memory call: none is shown
			}
			x.finishPlain(resp, reply, x.loop.round, shown, client, stop)
		default:
			x.finishPlain(resp, reply, x.loop.round, shown, nil, "")
		}
		return
	}
}

// plainRound sends the loop's next request and reads the whole reply. It
// answers the client itself and returns false when the upstream failed.
func (x *exchange) plainRound(ctx context.Context) (*http.Response, []byte, bool) {
	resp, t0, err := x.sendRound(ctx)
	if err != nil {
		x.upstreamError(err)
		return nil, nil, false
	}
	reply, err := readReply(resp)
	resp.Body.Close()
	x.acct.waited(t0)
	if err != nil {
		x.upstreamError(err)
		return nil, nil, false
	}
	return resp, reply, true
}

// finishPlain hands the client the last reply, merged with earlier rounds
// when there were any. last is the client-visible content of the last reply
// when it had memory calls withheld (nil: the reply's content as is); stop
// replaces its stop_reason when not "".
func (x *exchange) finishPlain(resp *http.Response, reply []byte, round int, shown, last [][]byte, stop string) {
	if round == 0 && last == nil {
		x.writeReply(resp, reply) // the common case: byte for byte
		return
	}
	if last == nil {
		gjson.GetBytes(reply, "content").ForEach(func(_, blk gjson.Result) bool {
			last = append(last, []byte(blk.Raw))
			return true
		})
	}
	out, err := sjson.SetRawBytes(reply, "content", joinArray(compactionFirst(append(shown, last...))))
	if err == nil && stop != "" {
		out, err = sjson.SetBytes(out, "stop_reason", stop)
	}
	if err != nil {
		x.fail(http.StatusInternalServerError, "api_error", "build reply: "+err.Error())
		return
	}
	x.writeReply(resp, setIterations(setUsage(out, "usage", x.acct.usage), "usage", x.acct.iterations))
}

// relayOnce forwards the request and relays the reply as it is (count_tokens,
// batch creation).
func (x *exchange) relayOnce() {
	resp, t0, _, err := x.roundTrip(x.r.Context(), x.req.parts, x.who.retry)
	if err != nil {
		x.upstreamError(err)
		return
	}
	defer resp.Body.Close()
	body, err := readReply(resp)
	x.acct.waited(t0)
	if err != nil {
		x.upstreamError(err)
		return
	}
	x.recordCount(resp, body)
	x.openBatch(resp, body)
	x.writeReply(resp, body)
}

// splitReply sorts a non-streamed reply's content into what the client may
// see and the memory calls the proxy runs.
func splitReply(reply []byte) (client [][]byte, calls []memCall, otherTools int) {
	gjson.GetBytes(reply, "content").ForEach(func(_, blk gjson.Result) bool {
		if blk.Get("type").Str == "tool_use" {
			if blk.Get("name").Str == "memory" {
				calls = append(calls, memCall{id: blk.Get("id").Str, input: []byte(blk.Get("input").Raw)})
				return true
			}
			otherTools++
		}
		client = append(client, []byte(blk.Raw))
		return true
	})
	return client, calls, otherTools
}

func joinArray(parts [][]byte) []byte {
	n := 2
	for _, p := range parts {
		n += len(p) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, '[')
	for i, p := range parts {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, p...)
	}
	return append(out, ']')
}

// compactionFirst puts the last compaction block of the rounds first, where
// the API puts it in one reply, and drops earlier ones: it summarizes them,
// and a client sending the message back must not have an older summary
// after it (the API takes the last compaction block as the state).
func compactionFirst(blocks [][]byte) [][]byte {
	last := -1
	for i, b := range blocks {
		if gjson.GetBytes(b, "type").Str == "compaction" {
			last = i
		}
	}
	if last <= 0 {
		return blocks
	}
	out := make([][]byte, 0, len(blocks))
	out = append(out, blocks[last])
	for _, b := range blocks {
		if gjson.GetBytes(b, "type").Str != "compaction" {
			out = append(out, b)
		}
	}
	return out
}

// plainMeta is what the call's span records of a whole reply, when it
// records: r's id, model and stop reason (read already, and cloned), and the
// reply's content for a tenant that opted in.
func (x *exchange) plainMeta(r *tokens.Reply, reply []byte) replyMeta {
	if !x.spans.call.Recording() {
		return replyMeta{}
	}
	m := replyMeta{id: r.ID, model: r.Model, stopReason: r.StopReason}
	if x.who.pol != nil && x.who.pol.Tracing.Content {
		m.content = gjson.GetBytes(reply, "content").Raw
	}
	return m
}
