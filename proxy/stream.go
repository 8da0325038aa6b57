package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// The streaming path. Every event is written and flushed as it arrives (see
// relay.go). In memory proxy mode the rounds of the loop are spliced into
// one stream: one message_start, one final message_delta (stop reason of
// the last round, usage summed) and one message_stop.

func (x *exchange) serveStream() {
	ctx := x.r.Context()
	sw := newStreamWriter(x.w)
	defer x.streamed(sw)
	x.startLoop(true)
	for {
		rd, up := x.streamRound(ctx, sw)
		if rd == nil {
			return
		}
		more, stop, err := x.advance(ctx, rd.end(), rd.assistantTurn)
		switch {
		case more:
			up.release()
			continue
		case err != nil:
			sw.send(sseErrorEvent("api_error", err.Error()))
		default:
			x.endStream(sw, rd, x.loop.round, stop)
		}
		// Released only now: the client has its last events before the
		// proxy waits on what is left of the upstream's body.
		up.release()
		return
	}
}

// streamRound sends the loop's next request and relays its stream. It
// returns a nil round when the reply to the client is over: the upstream
// failed (answered, or an error event sent) or the client went away.
// Otherwise the round ended with message_stop, and up is its body, for the
// caller to release.
func (x *exchange) streamRound(ctx context.Context, sw *streamWriter) (*round, upstreamBody) {
	uctx, cancel := context.WithCancel(ctx)
	resp, t0, err := x.roundTrip(uctx, x.loop.parts, x.loopRetry())
	if err != nil {
		cancel()
		if !sw.started {
			x.upstreamError(err)
		} else if status, msg := upstreamFailure(ctx, err); status != 0 {
			sw.send(sseErrorEvent(ErrorType(status), msg))
		}
		return nil, upstreamBody{}
	}
	if resp.StatusCode != http.StatusOK {
		x.streamRefused(sw, resp, t0)
		cancel()
		return nil, upstreamBody{}
	}
	if !sw.started {
		x.startStream(sw, resp)
	}
	up := upstreamBody{ir: newIdleReader(resp.Body, x.s.cfg.StreamIdleTimeout, cancel), cancel: cancel}
	rd := &round{memory: x.req.memory, first: x.loop.round == 0}
	err = rd.relay(newSSEReader(up.ir), sw)
	up.complete = rd.done
	x.acct.waited(t0)
	x.record(resp, rd.meter.Reply(), replyMeta{id: rd.id, model: rd.model, stopReason: rd.stopReason})
	if ev, over := x.roundFailure(ctx, sw, up.ir, rd, err); over {
		up.release()
		sw.send(ev)
		return nil, upstreamBody{}
	}
	return rd, up
}

// roundFailure says whether a relayed round ended the reply, and the error
// event the client gets then (nil when there is nothing to tell it).
func (x *exchange) roundFailure(ctx context.Context, sw *streamWriter, ir *idleReader, rd *round, err error) ([]byte, bool) {
	switch {
	case sw.err != nil || ctx.Err() != nil:
		return nil, true // the client went away; its context cancelled the upstream
	case ir.timedOut():
		return sseErrorEvent("timeout_error", "upstream stream was idle for "+x.s.cfg.StreamIdleTimeout.String()), true
	case err != nil && !errors.Is(err, io.EOF):
		return sseErrorEvent("api_error", "upstream stream broke: "+err.Error()), true
	case rd.failed:
		return nil, true // the upstream's error event was relayed
	case !rd.done:
		return sseErrorEvent("api_error", "upstream stream ended before message_stop"), true
	}
	return nil, false
}

// streamRefused relays an upstream's error reply: as it is while the
// client has no byte yet, else as an error event in the API's shape.
func (x *exchange) streamRefused(sw *streamWriter, resp *http.Response, t0 time.Time) {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	x.acct.waited(t0)
	if !sw.started {
		x.writeReply(resp, b)
		return
	}
	typ := gjson.GetBytes(b, "error.type").Str
	msg := gjson.GetBytes(b, "error.message").Str
	if typ == "" {
		typ, msg = ErrorType(resp.StatusCode), fmt.Sprintf("upstream answered %d", resp.StatusCode)
	}
	sw.send(sseErrorEvent(typ, msg))
}

// upstreamBody is one round's stream body.
type upstreamBody struct {
	ir       *idleReader
	cancel   context.CancelFunc
	complete bool // message_stop was relayed
}

// release gives the body up. A complete one is drained first, so its
// connection goes back to the pool; any other is closed.
func (b upstreamBody) release() {
	if b.complete {
		finishBody(b.ir, b.cancel)
		return
	}
	b.ir.Close()
	b.cancel()
}

// finishBody reads what is left of a stream after message_stop (the
// chunked terminator, stray bytes), bounded in bytes and time, then closes it.
// A decoder may stop at the end of its frame, before the body's own end, so
// the raw body is drained too.
func finishBody(body *idleReader, cancel context.CancelFunc) {
	t := time.AfterFunc(time.Second, cancel)
	io.CopyN(io.Discard, body, 64<<10)
	if d, ok := body.r.(*decodedBody); ok {
		io.CopyN(io.Discard, d.body, 64<<10)
	}
	t.Stop()
	body.Close()
	cancel()
}

// endStream sends the final message_delta and message_stop. The first
// round's delta goes as it came when nothing was spliced or withheld.
func (x *exchange) endStream(sw *streamWriter, rd *round, round int, stop string) {
	if round == 0 && !rd.withheld && stop == "" {
		sw.send(appendSSE(nil, "message_delta", rd.delta))
	} else {
		d := setIterations(setUsage(rd.delta, "usage", x.acct.usage), "usage", x.acct.iterations)
		if stop != "" {
			if o, err := sjson.SetBytes(d, "delta.stop_reason", stop); err == nil {
				d = o
			}
		}
		sw.send(appendSSE(nil, "message_delta", d))
	}
	if rd.stopRaw != nil {
		sw.send(rd.stopRaw)
	} else {
		sw.send(appendSSE(nil, "message_stop", []byte(`{"type":"message_stop"}`)))
	}
}
