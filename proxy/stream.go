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
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/cachetrack"
	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// The streamed reply, in the order a round lives: serveStream runs the
// memory loop's rounds (begun by startLoop), each one upstream call
// (streamRound) whose stream is relayed event by event (round.relay) from
// an sseReader to the client's streamWriter, every event written and
// flushed as it arrives. In memory proxy mode the rounds are spliced into
// one stream: one message_start, one final message_delta (stop reason of
// the last round, usage summed) and one message_stop; the memory tool_use
// blocks are withheld, the blocks passed on renumbered so the client sees
// no gaps, and every block kept to rebuild the assistant turn for the next
// round.

// serveStream serves a streamed Messages request.
func (x *exchange) serveStream() {
	ctx := x.r.Context()
	sw := newStreamWriter(x.w)
	defer x.streamed(sw)
	for {
		rd, end, up := x.streamRound(ctx, sw)
		if rd == nil {
			return
		}
		more, stop, err := x.advance(ctx, end, rd.assistantTurn)
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

// streamed counts what the stream wrote, once it is over.
func (x *exchange) streamed(sw *streamWriter) { x.out.n += sw.n }

// streamRound sends the loop's next request, relays its stream and accounts
// it. It returns a nil round when the reply to the client is over: the
// upstream failed (answered, or an error event sent) or the client went
// away. Otherwise the round ended with message_stop: end is what it tells
// the loop, and up its body, for the caller to release.
func (x *exchange) streamRound(ctx context.Context, sw *streamWriter) (rd *round, end roundEnd, up upstreamBody) {
	uctx, cancel := context.WithCancel(ctx)
	resp, t0, err := x.sendRound(uctx)
	if err != nil {
		cancel()
		if !sw.started {
			x.upstreamError(err)
		} else if status, msg := upstreamFailure(ctx, err); status != 0 {
			sw.send(sseErrorEvent(apierr.Type(status), msg))
		}
		return nil, roundEnd{}, upstreamBody{}
	}
	if resp.StatusCode != http.StatusOK {
		x.streamRefused(sw, resp, t0)
		cancel()
		return nil, roundEnd{}, upstreamBody{}
	}
	if !sw.started {
		x.startStream(sw, resp)
	}
	ir := newIdleReader(resp.Body, x.s.cfg.StreamIdleTimeout, cancel)
	up = upstreamBody{ir: ir, cancel: cancel, rest: &io.LimitedReader{R: ir, N: math.MaxInt64}}
	up.src = newSSEReader(up.rest)
	rd = &round{memory: x.who.memory, first: x.loop.round == 0, requestID: resp.Header.Get("Request-Id"), conv: x.trackedStream()}
	err = rd.relay(up.src, sw)
	if err == nil && rd.done {
		err = up.afterStop()
		rd.done = err == nil
	}
	up.complete = rd.done
	x.seeStream(rd)
	reply := x.roundReply(ctx, sw, rd)
	ev, over := x.roundFailure(ctx, sw, up.ir, rd, err)
	end = rd.end()
	x.acct.waited(t0)
	x.record(resp, reply, replyMeta{id: rd.id, model: rd.model, stopReason: rd.stopReason})
	if over {
		up.release()
		sw.send(ev)
		return nil, roundEnd{}, upstreamBody{}
	}
	return rd, end, up
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

// trackedStream is the conversation a stream's rounds feed, nil when it is not tracked.
func (x *exchange) trackedStream() *conversation {
	if !x.conv.on {
		return nil
	}
	return &x.conv
}

// round is what one upstream stream told the relay.
type round struct {
	memory bool // memory proxy mode: withhold, renumber and keep blocks
	first  bool // the first round: its message_start goes to the client

	phase      phase
	id         string
	model      string // message_start's message.model
	requestID  string // the upstream's request-id header of this round
	stopReason string
	delta      []byte   // the message_delta event's data, withheld until the end
	stopRaw    []byte   // the message_stop event as it came
	blocks     []*block // by upstream index, which runs 0, 1, 2 … (memory mode)
	open       int      // blocks started and not stopped (memory mode)
	calls      []memCall
	others     int  // client tool_use blocks
	withheld   bool // some block was not shown to the client
	done       bool // message_stop seen
	failed     bool // an error event was relayed
	meter      tokens.StreamMeter
	// conv is the conversation the round's turn and diagnosis feed (cacheconv.go); nil when
	// the tenant's conversations are not tracked.
	conv *conversation
	turn cachetrack.Turn
	seen seenReply
}

// phase is where a stream is in the Messages API's event grammar:
// message_start, content blocks, message_delta, message_stop.
type phase uint8

const (
	beforeStart phase = iota // nothing but ping yet
	inMessage                // message_start seen: content blocks
	ending                   // message_delta seen: message_stop next
)

// malformed is an upstream stream that breaks the event grammar. The
// proxy cannot splice or account for it, so the client's stream ends
// with an error event.
type malformed struct{ why string }

func (e *malformed) Error() string { return "upstream sent a malformed stream: " + e.why }

func malformedf(format string, args ...any) error { return &malformed{fmt.Sprintf(format, args...)} }

// relay copies one upstream stream to the client, up to its message_stop
// or an error event. A malformed stream stops it with a *malformed error.
func (rd *round) relay(src *sseReader, sw *streamWriter) error {
	for !rd.done && !rd.failed {
		ev, err := src.Next()
		if err != nil {
			return err
		}
		if err := rd.event(ev, sw); err != nil {
			return err
		}
		if sw.err != nil {
			return sw.err
		}
	}
	return nil
}

// event handles one upstream event.
func (rd *round) event(ev sseEvent, sw *streamWriter) error {
	switch string(ev.Name) {
	case "message_start":
		return rd.messageStart(ev, sw)
	case "content_block_start":
		return rd.blockStart(ev, sw)
	case "content_block_delta", "content_block_stop":
		return rd.blockEvent(ev, sw)
	case "message_delta":
		if err := rd.expect(ev, rd.phase != beforeStart); err != nil {
			return err
		}
		rd.phase = ending
		rd.meter.Event("message_delta", ev.Data)
		rd.stopReason = gjson.GetBytes(ev.Data, "delta.stop_reason").Str
		rd.delta = append(rd.delta[:0], ev.Data...)
	case "message_stop":
		if err := rd.expect(ev, rd.phase == ending); err != nil {
			return err
		}
		if rd.open > 0 {
			return malformedf("message_stop with %d content blocks still open", rd.open)
		}
		rd.stopRaw = append([]byte(nil), ev.Raw...)
		rd.done = true
	case "error":
		if !gjson.ValidBytes(ev.Data) {
			return malformedf("error with invalid JSON")
		}
		sw.send(ev.Raw)
		rd.failed = true
	default: // ping and events this proxy does not know: pass them on
		sw.send(ev.Raw)
	}
	return nil
}

// expect checks that ev may come now (inOrder) and that its data is a JSON
// object of ev's type: what the relay reads or sends on must be sound.
func (rd *round) expect(ev sseEvent, inOrder bool) error {
	if !inOrder {
		return malformedf("%s out of order", clip(ev.Name))
	}
	if !gjson.ValidBytes(ev.Data) {
		return malformedf("%s with invalid JSON", clip(ev.Name))
	}
	if t := gjson.Get(bstr(ev.Data), "type"); t.Str != bstr(ev.Name) {
		return malformedf("%s carrying data of type %s", clip(ev.Name), clip([]byte(t.Raw)))
	}
	return nil
}

func (rd *round) messageStart(ev sseEvent, sw *streamWriter) error {
	if err := rd.expect(ev, rd.phase == beforeStart); err != nil {
		return err
	}
	rd.phase = inMessage
	rd.meter.Event("message_start", ev.Data)
	rd.id = gjson.GetBytes(ev.Data, "message.id").Str
	rd.model = gjson.GetBytes(ev.Data, "message.model").Str
	raw := ev.Raw
	if rd.conv != nil {
		raw = rd.conv.streamStart(rd, ev)
	}
	if rd.first {
		sw.send(raw)
	}
	return nil
}

// streamStart reads a stream's message_start for its conversation and gives back the event the
// client gets: its message.diagnostics null in place when ctxproxy asked for them.
func (v *conversation) streamStart(rd *round, ev sseEvent) []byte {
	diag := gjson.GetBytes(ev.Data, "message.diagnostics")
	rd.seen.diagnosis = diag.Get("cache_miss_reason.type").Str
	if !v.asked || !diag.Exists() || diag.Type == gjson.Null {
		return ev.Raw
	}
	at := dataOffset(ev)
	if at < 0 {
		return ev.Raw
	}
	diag.Index += at
	return spliceNull(ev.Raw, diag)
}

// dataOffset is where ev.Data starts within ev.Raw, -1 when it is not a part of it.
func dataOffset(ev sseEvent) int {
	if len(ev.Data) == 0 {
		return -1
	}
	i := bytes.Index(ev.Raw, ev.Data)
	return i
}

// blockStart keeps a new block and relays it under the client's next
// index, unless it is a memory call, which is withheld.
func (rd *round) blockStart(ev sseEvent, sw *streamWriter) error {
	if rd.conv != nil {
		rd.conv.streamBlock(rd, ev.Data)
	}
	if !rd.memory { // nothing withheld, no later round: relay as is
		if rd.phase != inMessage {
			return malformedf("content_block_start out of order")
		}
		sw.send(ev.Raw)
		return nil
	}
	if err := rd.expect(ev, rd.phase == inMessage); err != nil {
		return err
	}
	// gjson.Get on a view of the event: no copies per event. What is kept
	// past this event (start, id) is copied.
	data := bstr(ev.Data)
	ir := gjson.Get(data, "index")
	if idx, ok := blockIndex(ir); !ok || idx != len(rd.blocks) {
		return malformedf("content_block_start with index %s where %d was next", clip([]byte(ir.Raw)), len(rd.blocks))
	}
	cb := gjson.Get(data, "content_block")
	if !cb.IsObject() {
		return malformedf("content_block_start without a content_block")
	}
	b := newBlock(cb)
	rd.blocks = append(rd.blocks, b)
	rd.open++
	if b.toolUse && !b.memory {
		rd.others++
	}
	if b.memory {
		rd.withheld = true
		return nil
	}
	b.client = sw.next
	sw.next++
	sw.sendIndexed(ev, ir, len(rd.blocks)-1, b.client)
	return nil
}

// streamBlock feeds a content_block_start to the round's turn key.
func (v *conversation) streamBlock(rd *round, data []byte) {
	cb := gjson.GetBytes(data, "content_block")
	r := cb.Get("type")
	switch r.Str {
	case "tool_use", "server_tool_use", "mcp_tool_use":
		rd.turn.Block(v.scope, r.Str, cb.Get("name").Str, cb.Get("id").Str)
	}
}

// blockEvent adds a delta to its block or ends the block, and relays it
// under the block's client index unless the block is withheld.
func (rd *round) blockEvent(ev sseEvent, sw *streamWriter) error {
	delta := ev.Name[len("content_block_")] == 'd'
	if !rd.memory {
		if rd.phase != inMessage {
			return malformedf("%s out of order", clip(ev.Name))
		}
		if delta {
			rd.meter.Delta(ev.Data) // what a stream cut before message_delta is charged
		}
		sw.send(ev.Raw)
		return nil
	}
	if err := rd.expect(ev, rd.phase == inMessage); err != nil {
		return err
	}
	ir := gjson.Get(bstr(ev.Data), "index")
	idx, ok := blockIndex(ir)
	if !ok || idx >= len(rd.blocks) {
		return malformedf("%s for block %s, which never started", clip(ev.Name), clip([]byte(ir.Raw)))
	}
	b := rd.blocks[idx]
	if b.stopped {
		return malformedf("%s for block %d after its content_block_stop", clip(ev.Name), idx)
	}
	if delta {
		b.addDelta(ev.Data)
		rd.meter.Delta(ev.Data)
	} else {
		b.stopped = true
		rd.open--
		if b.memory {
			rd.calls = append(rd.calls, memCall{id: b.id, input: b.inputJSON()})
		}
	}
	if !b.memory {
		sw.sendIndexed(ev, ir, idx, b.client)
	}
	return nil
}

// blockIndex is an event's block index: a plain non-negative integer.
func blockIndex(ir gjson.Result) (int, bool) {
	if ir.Type != gjson.Number || len(ir.Raw) == 0 || len(ir.Raw) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range []byte(ir.Raw) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// clip is upstream text quoted in an error message, bounded.
func clip(b []byte) string {
	const max = 40
	if len(b) > max {
		return strconv.Quote(string(b[:max]) + "…")
	}
	return strconv.Quote(string(b))
}

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

// seeStream takes what a relayed round said of its conversation, before it is accounted.
func (x *exchange) seeStream(rd *round) {
	if x.conv.on {
		x.conv.seen = seenReply{turn: rd.turn.Key(), diagnosis: rd.seen.diagnosis}
	}
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

// end is what the round tells the memory loop.
func (rd *round) end() roundEnd {
	return roundEnd{id: rd.id, requestID: rd.requestID, stopReason: rd.stopReason, calls: rd.calls, others: rd.others}
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

// assistantTurn is the round's content as a JSON array, memory calls included.
func (rd *round) assistantTurn() []byte {
	parts := make([][]byte, len(rd.blocks))
	for i, b := range rd.blocks {
		parts[i] = b.json()
	}
	return joinArray(parts)
}

// block accumulates one content block from its events, to rebuild the
// assistant turn for the next round of a full-history loop.
type block struct {
	start     []byte // content_block from content_block_start
	text      []byte // text, thinking, signature: JSON string contents, still escaped
	thinking  []byte
	signature []byte
	input     []byte
	citations [][]byte
	memory    bool // a memory tool_use: withheld from the client
	toolUse   bool
	stopped   bool // content_block_stop seen
	id        string
	client    int // the index the client sees it under
}

// newBlock is the block a content_block_start's content_block begins.
func newBlock(cb gjson.Result) *block {
	b := &block{start: []byte(cb.Raw)}
	if cb.Get("type").Str == "tool_use" {
		b.toolUse = true
		b.id = strings.Clone(cb.Get("id").Str)
		b.memory = cb.Get("name").Str == "memory"
	}
	return b
}

func (b *block) json() []byte {
	out := b.start
	set := func(path string, raw []byte) {
		if o, err := sjson.SetRawBytes(out, path, raw); err == nil {
			out = o
		}
	}
	if len(b.text) > 0 {
		set("text", quoted(b.text))
	}
	if len(b.thinking) > 0 {
		set("thinking", quoted(b.thinking))
	}
	if len(b.signature) > 0 {
		set("signature", quoted(b.signature))
	}
	if b.toolUse {
		in := b.input
		if len(in) == 0 || !gjson.ValidBytes(in) {
			in = []byte("{}")
		}
		set("input", in)
	}
	if len(b.citations) > 0 {
		set("citations", joinArray(b.citations))
	}
	return out
}

func (b *block) addDelta(data []byte) {
	d := gjson.Get(bstr(data), "delta") // a view: appends below copy what is kept
	switch d.Get("type").Str {
	case "text_delta":
		b.text = appendEscaped(b.text, d.Get("text"))
	case "input_json_delta":
		b.input = append(b.input, d.Get("partial_json").Str...)
	case "thinking_delta":
		b.thinking = appendEscaped(b.thinking, d.Get("thinking"))
	case "signature_delta":
		b.signature = appendEscaped(b.signature, d.Get("signature"))
	case "citations_delta":
		b.citations = append(b.citations, []byte(d.Get("citation").Raw))
	}
}

// appendEscaped appends a JSON string's contents as they are, escapes and
// all: fragments of one string concatenate into that string, so the text is
// never unescaped per delta and escaped again for the next round.
func appendEscaped(dst []byte, r gjson.Result) []byte {
	if r.Type != gjson.String || len(r.Raw) < 2 {
		return dst
	}
	return append(dst, r.Raw[1:len(r.Raw)-1]...)
}

// quoted makes the accumulated contents a JSON string again. Contents that
// are not valid UTF-8 (a broken upstream) go through jsonstr, which replaces
// the bad bytes, so the next round's body stays valid.
func quoted(escaped []byte) []byte {
	if !utf8.Valid(escaped) {
		return jsonstr.Append(nil, gjson.Parse(`"`+string(escaped)+`"`).Str)
	}
	out := make([]byte, 0, len(escaped)+2)
	out = append(out, '"')
	out = append(out, escaped...)
	return append(out, '"')
}

func (b *block) inputJSON() []byte {
	if len(b.input) == 0 {
		return []byte(gjson.GetBytes(b.start, "input").Raw)
	}
	return b.input
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

// setUsage writes u into the usage object at path of a message or event.
func setUsage(b []byte, path string, u tokens.Usage) []byte {
	set := func(b []byte, field string, v int64) []byte {
		out, err := sjson.SetBytes(b, path+"."+field, v)
		if err != nil {
			return b
		}
		return out
	}
	b = set(b, "input_tokens", u.InputTokens)
	b = set(b, "output_tokens", u.OutputTokens)
	b = set(b, "cache_creation_input_tokens", u.CacheCreationInputTokens)
	return set(b, "cache_read_input_tokens", u.CacheReadInputTokens)
}

// setIterations writes the usage.iterations of every call into the usage
// object at path, when any call had them.
func setIterations(b []byte, path string, its []tokens.Iteration) []byte {
	if its == nil {
		return b
	}
	out, err := sjson.SetRawBytes(b, path+".iterations", tokens.AppendIterations(nil, its))
	if err != nil {
		return b
	}
	return out
}

// streamWriter is the one event stream the client sees, across every round
// of the memory loop. Every write is flushed at once.
type streamWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool   // the 200 and headers went out
	next    int    // the client's next content block index
	n       int64  // bytes written
	err     error  // the first failed write: the client is gone
	scratch []byte // a renumbered event being sent; reused
}

func newStreamWriter(w http.ResponseWriter) *streamWriter {
	return &streamWriter{w: w, rc: http.NewResponseController(w)}
}

func (sw *streamWriter) send(b []byte) {
	if sw.err != nil {
		return
	}
	n, err := sw.w.Write(b)
	sw.n += int64(n)
	if err == nil {
		err = sw.rc.Flush()
	}
	sw.err = err
}

// sendIndexed relays ev with its index changed to to, when it differs.
// ir is ev's "index" member: the new number is spliced in at its offset,
// into a buffer the stream reuses.
func (sw *streamWriter) sendIndexed(ev sseEvent, ir gjson.Result, from, to int) {
	if from == to {
		sw.send(ev.Raw)
		return
	}
	if ir.Type != gjson.Number || ir.Index <= 0 || ir.Index+len(ir.Raw) > len(ev.Data) {
		d, err := sjson.SetRawBytes(append([]byte(nil), ev.Data...), "index", strconv.AppendInt(nil, int64(to), 10))
		if err != nil {
			sw.send(ev.Raw)
			return
		}
		sw.send(appendSSE(nil, string(ev.Name), d))
		return
	}
	b := append(sw.scratch[:0], "event: "...)
	b = append(b, ev.Name...)
	b = append(b, "\ndata: "...)
	b = append(b, ev.Data[:ir.Index]...)
	b = strconv.AppendInt(b, int64(to), 10)
	b = append(b, ev.Data[ir.Index+len(ir.Raw):]...)
	b = append(b, "\n\n"...)
	sw.scratch = b
	sw.send(b)
}

// bstr views b as a string without copying; only for reads that do not
// outlive b.
func bstr(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// sseEvent is one server-sent event as it came off the wire. Raw holds the
// whole event including its terminating blank line, so an event the proxy does
// not change is relayed byte for byte. Name and Data alias Raw.
type sseEvent struct {
	Raw  []byte
	Name []byte
	Data []byte
}

// sseReader splits an SSE stream into events. Its one buffer both takes the
// reads and holds the events, which alias it: no line is copied, and an
// event is only valid until the next call to Next.
type sseReader struct {
	r          io.Reader
	buf        []byte // buf[start:end] is read and not yet returned
	start, end int
	data       []byte // joined data lines when an event has several
	max        int
}

// maxSSEEvent bounds one event; the largest real ones are tool inputs of a
// few hundred KB split into many deltas, so this is generous.
const maxSSEEvent = 16 << 20

// sseReadSize is the first buffer: a few events at a time, and little
// memory per open stream (it grows for a larger event).
const sseReadSize = 2 << 10

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: r, buf: make([]byte, sseReadSize), max: maxSSEEvent}
}

var errSSETooLarge = errors.New("sse event too large")

// fill reads more bytes, first moving the pending ones to the front or
// growing the buffer when there is no room.
func (s *sseReader) fill() error {
	if s.end == len(s.buf) {
		if s.start > 0 {
			s.end = copy(s.buf, s.buf[s.start:s.end])
			s.start = 0
		} else {
			nb := make([]byte, 2*len(s.buf))
			s.end = copy(nb, s.buf[s.start:s.end])
			s.buf = nb
		}
	}
	n, err := s.r.Read(s.buf[s.end:])
	s.end += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// Next returns the next event, or io.EOF at a clean end of stream. A stream
// that ends inside an event returns io.ErrUnexpectedEOF.
func (s *sseReader) Next() (sseEvent, error) {
	pos := s.start // where the next line starts, relative to buf
	for {
		nl := bytes.IndexByte(s.buf[pos:s.end], '\n')
		if nl < 0 {
			if s.end-s.start > s.max {
				return sseEvent{}, errSSETooLarge
			}
			off := pos - s.start
			if err := s.fill(); err != nil {
				if err == io.EOF {
					if s.start == s.end {
						return sseEvent{}, io.EOF
					}
					return sseEvent{}, io.ErrUnexpectedEOF
				}
				return sseEvent{}, err
			}
			pos = s.start + off
			continue
		}
		lineEnd := pos + nl + 1
		if len(trimEOL(s.buf[pos:lineEnd])) > 0 {
			pos = lineEnd
			continue
		}
		if pos == s.start { // stray blank line between events
			s.start = lineEnd
			pos = lineEnd
			continue
		}
		raw := s.buf[s.start:lineEnd]
		s.start = lineEnd
		if len(raw) > s.max {
			return sseEvent{}, errSSETooLarge
		}
		return s.parse(raw), nil
	}
}

// parse picks the event's name and data out of its lines.
func (s *sseReader) parse(raw []byte) sseEvent {
	ev := sseEvent{Raw: raw}
	dataLines := 0
	for rest := raw; len(rest) > 0; {
		nl := bytes.IndexByte(rest, '\n')
		l := trimEOL(rest[:nl+1])
		rest = rest[nl+1:]
		switch {
		case bytes.HasPrefix(l, []byte("event:")):
			ev.Name = trimSpace1(l[len("event:"):])
		case bytes.HasPrefix(l, []byte("data:")):
			v := trimSpace1(l[len("data:"):])
			dataLines++
			switch dataLines {
			case 1:
				ev.Data = v
			case 2:
				// Several data lines join with \n (the SSE rule); rare here.
				s.data = append(append(append(s.data[:0], ev.Data...), '\n'), v...)
				ev.Data = s.data
			default:
				s.data = append(append(s.data, '\n'), v...)
				ev.Data = s.data
			}
		}
	}
	return ev
}

func trimEOL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b
}

// trimSpace1 drops the single optional space after the field colon.
func trimSpace1(b []byte) []byte {
	if len(b) > 0 && b[0] == ' ' {
		return b[1:]
	}
	return b
}

// appendSSE appends an event in the API's framing.
func appendSSE(b []byte, name string, data []byte) []byte {
	b = append(b, "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}
