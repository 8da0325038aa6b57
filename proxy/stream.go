package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// The streaming path. Every event is written and flushed as it arrives (see
// relay.go). In memory proxy mode the rounds of the loop are spliced into
// one stream: one message_start, one final message_delta (stop reason of
// the last round, usage summed) and one message_stop.

func (x *exchange) serveStream() {
	ctx := x.r.Context()
	if !x.startLoop(true) {
		return
	}
	sw := newStreamWriter(x.w)
	defer x.streamed(sw)
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
			sw.send(sseErrorEvent(apierr.Type(status), msg))
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
	ir := newIdleReader(resp.Body, x.s.cfg.StreamIdleTimeout, cancel)
	up := upstreamBody{ir: ir, cancel: cancel, rest: &io.LimitedReader{R: ir, N: math.MaxInt64}}
	up.src = newSSEReader(up.rest)
	rd := &round{memory: x.who.memory, first: x.loop.round == 0, requestID: resp.Header.Get("Request-Id"), conv: x.trackedStream()}
	err = rd.relay(up.src, sw)
	if err == nil && rd.done {
		err = up.afterStop()
		rd.done = err == nil
	}
	up.complete = rd.done
	x.acct.waited(t0)
	x.seeStream(rd)
	x.record(resp, x.roundReply(ctx, sw, rd), replyMeta{id: rd.id, model: rd.model, stopReason: rd.stopReason})
	if ev, over := x.roundFailure(ctx, sw, up.ir, rd, err); over {
		up.release()
		sw.send(ev)
		return nil, upstreamBody{}
	}
	return rd, up
}

// roundReply is what a relayed round is accounted as: what its stream said. A stream the
// client cut before its message_delta never said its output tokens: it is charged the output its
// relayed deltas carry or the output its request held against a cap, whichever is more
// (tokens.StreamMeter.CutReply), and its ledger line says it was cut.
func (x *exchange) roundReply(ctx context.Context, sw *streamWriter, rd *round) tokens.Reply {
	if rd.phase == ending || rd.done || (sw.err == nil && ctx.Err() == nil) {
		return rd.meter.Reply()
	}
	return rd.meter.CutReply(x.heldOutput())
}

// roundFailure says whether a relayed round ended the reply, and the error
// event the client gets then (nil when there is nothing to tell it).
func (x *exchange) roundFailure(ctx context.Context, sw *streamWriter, ir *idleReader, rd *round, err error) ([]byte, bool) {
	switch {
	case sw.err != nil || ctx.Err() != nil:
		return nil, true // the client went away; its context cancelled the upstream
	case ir.timedOut():
		return sseErrorEvent("timeout_error", "upstream stream was idle for "+x.s.cfg.StreamIdleTimeout.String()), true
	case errors.As(err, new(*malformed)):
		x.s.log.Warn("upstream stream malformed", zap.String("tenant", x.who.label), zap.Error(err))
		return sseErrorEvent("api_error", err.Error()), true
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
	if ev := relayedErrorEvent(b); ev != nil {
		sw.send(ev) // the upstream's error object as it came, details and code included
		return
	}
	sw.send(sseErrorEvent(apierr.Type(resp.StatusCode), fmt.Sprintf("upstream answered %d", resp.StatusCode)))
}

// relayedErrorEvent is the error event carrying the upstream's error object (type, message,
// details.error_code) once the client's stream has begun and the reply's status can no longer
// be relayed; nil when the body has no error object with a type.
func relayedErrorEvent(body []byte) []byte {
	e := gjson.GetBytes(body, "error")
	if !e.IsObject() || e.Get("type").Str == "" {
		return nil
	}
	var c bytes.Buffer
	if json.Compact(&c, []byte(e.Raw)) != nil {
		return nil
	}
	b := make([]byte, 0, 64+c.Len())
	b = append(b, "event: error\ndata: {\"type\":\"error\",\"error\":"...)
	b = append(b, c.Bytes()...)
	return append(b, "}\n\n"...)
}

// upstreamBody is one round's stream body.
type upstreamBody struct {
	ir       *idleReader
	cancel   context.CancelFunc
	rest     *io.LimitedReader // ir, unbounded until message_stop
	src      *sseReader        // the events of rest
	complete bool              // message_stop was relayed, and nothing after it
}

// afterStopBytes and afterStopWait bound what is read of a body after its
// message_stop: a hang guard for an upstream that keeps it open.
const (
	afterStopBytes = 64 << 10
	afterStopWait  = time.Second
)

// afterStop reads what is left of the stream after message_stop, the end of
// the body (a chunked terminator, a compressor's trailer), comments or
// pings, and refuses a message or content block event there: a message
// ends at its message_stop. Read to its end, the body's connection can go
// back to the pool.
func (b upstreamBody) afterStop() error {
	b.rest.N = afterStopBytes
	t := time.AfterFunc(afterStopWait, b.cancel)
	defer t.Stop()
	for {
		ev, err := b.src.Next()
		if err != nil {
			return nil // the end, a cut or the bound: nothing more to relay either way
		}
		if bytes.HasPrefix(ev.Name, []byte("message_")) || bytes.HasPrefix(ev.Name, []byte("content_block_")) {
			return malformedf("%s after message_stop", clip(ev.Name))
		}
	}
}

// release gives the body up. A decoder may stop at the end of its frame,
// before the body's own end, so the raw body of a complete one is drained
// too, for its connection to go back to the pool.
func (b upstreamBody) release() {
	if d, ok := b.ir.r.(*decodedBody); ok && b.complete {
		t := time.AfterFunc(afterStopWait, b.cancel)
		io.CopyN(io.Discard, d.body, afterStopBytes)
		t.Stop()
	}
	b.ir.Close()
	b.cancel()
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

// idleReader cancels the upstream request when no byte arrives for idle.
type idleReader struct {
	r       io.ReadCloser
	idle    time.Duration
	timer   *time.Timer
	expired chan struct{}
}

func newIdleReader(r io.ReadCloser, idle time.Duration, cancel context.CancelFunc) *idleReader {
	ir := &idleReader{r: r, idle: idle, expired: make(chan struct{})}
	var once sync.Once
	ir.timer = time.AfterFunc(idle, func() {
		once.Do(func() { close(ir.expired) })
		cancel()
	})
	return ir
}

func (ir *idleReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	if n > 0 {
		ir.timer.Reset(ir.idle)
	}
	return n, err
}

func (ir *idleReader) Close() error {
	ir.timer.Stop()
	return ir.r.Close()
}

// timedOut reports whether the idle timer fired.
func (ir *idleReader) timedOut() bool {
	select {
	case <-ir.expired:
		return true
	default:
		return false
	}
}
