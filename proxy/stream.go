package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// The streaming relay. Every event is written and flushed as it arrives. In
// memory proxy mode the relay withholds memory tool_use blocks, renumbers
// the indexes of the blocks it passes so the client sees no gaps, and splices
// the next round's stream in: one message_start, one final message_delta
// (stop reason of the last round, usage summed) and one message_stop.

// block accumulates one content block from its events, to rebuild the
// assistant turn for the next round of a full-history loop.
type block struct {
	start     []byte // content_block from content_block_start
	text      []byte // text, thinking, signature: JSON string contents, still escaped
	thinking  []byte
	signature []byte
	input     []byte
	citations [][]byte
	memory    bool
	toolUse   bool
	id        string
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

// round is what one upstream stream told the relay.
type round struct {
	id         string
	stopReason string
	delta      []byte // the message_delta event's data, withheld until the end
	stopRaw    []byte // the message_stop event as it came
	blocks     []*block
	calls      []memCall
	others     int  // client tool_use blocks
	withheld   bool // some block was not shown to the client
	done       bool // message_stop seen
	failed     bool // an error event was relayed
	meter      tokens.StreamMeter
}

type streamWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	n       int64
	err     error
	scratch []byte // a renumbered event being sent; reused
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

func (x *exchange) serveStream() {
	ctx := x.r.Context()
	sw := &streamWriter{w: x.w, rc: http.NewResponseController(x.w)}
	defer func() { x.outN += sw.n }()
	parts, body := x.parts, x.body
	next := 0 // next client block index
	var sum tokens.Usage
	clientID := "" // the reply id the client saw in message_start
	started := false
	var tail func() // finishes the last round's body
	defer func() {
		if tail != nil {
			tail()
		}
	}()
	for i := 0; ; i++ {
		if tail != nil {
			tail()
			tail = nil
		}
		uctx, cancel := context.WithCancel(ctx)
		resp, t0, err := x.roundTrip(uctx, parts)
		if err != nil {
			cancel()
			if !started {
				x.upstreamError(err)
			} else if status, msg := upstreamFailure(ctx, err); status != 0 {
				sw.send(sseErrorEvent(ErrorType(status), msg))
			}
			return
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			cancel()
			x.upDur += time.Since(t0)
			if !started {
				x.writeReply(resp, b)
				return
			}
			// A later round failed after the client got its 200: say so in the
			// stream, in the API's shape.
			typ := gjson.GetBytes(b, "error.type").Str
			msg := gjson.GetBytes(b, "error.message").Str
			if typ == "" {
				typ, msg = ErrorType(resp.StatusCode), fmt.Sprintf("upstream answered %d", resp.StatusCode)
			}
			sw.send(sseErrorEvent(typ, msg))
			return
		}
		if !started {
			h := x.w.Header()
			copyReplyHeaders(h, resp.Header)
			x.status = http.StatusOK
			x.w.WriteHeader(http.StatusOK)
			sw.send(nil)
			started = true
		}
		ir := newIdleReader(resp.Body, x.s.cfg.StreamIdleTimeout, cancel)
		rd := &round{}
		err = x.relay(newSSEReader(ir), sw, rd, i, &next)
		if i == 0 {
			clientID = rd.id
		}
		if rd.done {
			// The connection goes back to the pool only once the reply is read
			// to its end: done after the client has its events (see tail).
			tail = func() { finishBody(ir, cancel) }
		} else {
			ir.Close()
			cancel()
		}
		x.upDur += time.Since(t0)
		u, edits := rd.meter.Result()
		x.record(resp, u, edits)
		sum.Add(u)
		switch {
		case sw.err != nil || ctx.Err() != nil:
			return // the client went away; its context cancelled the upstream
		case ir.timedOut():
			sw.send(sseErrorEvent("timeout_error", "upstream stream was idle for "+x.s.cfg.StreamIdleTimeout.String()))
			return
		case err != nil && !errors.Is(err, io.EOF):
			sw.send(sseErrorEvent("api_error", "upstream stream broke: "+err.Error()))
			return
		case rd.failed:
			return
		case !rd.done:
			sw.send(sseErrorEvent("api_error", "upstream stream ended before message_stop"))
			return
		}
		if x.memory && rd.stopReason == "tool_use" && len(rd.calls) > 0 {
			results := x.runMemory(ctx, rd.calls)
			if rd.others == 0 && i < x.maxIterations() {
				var asst []byte
				if !x.info.Threaded {
					asst = rd.assistantTurn()
				}
				if body, err = nextBody(body, rd.id, asst, results); err != nil {
					sw.send(sseErrorEvent("api_error", "continue memory loop: "+err.Error()))
					return
				}
				parts = [][]byte{body}
				continue
			}
			x.saveContinuation(ctx, clientID, rd.id, results)
			stop := "tool_use"
			if rd.others == 0 {
				stop = "pause_turn"
			}
			x.endStream(sw, rd, i, sum, stop)
			return
		}
		x.saveContinuation(ctx, clientID, rd.id, nil)
		x.endStream(sw, rd, i, sum, "")
		return
	}
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

// endStream sends the final message_delta and message_stop.
func (x *exchange) endStream(sw *streamWriter, rd *round, i int, sum tokens.Usage, stop string) {
	x.usage = sum
	if i == 0 && !rd.withheld && stop == "" {
		sw.send(appendSSE(nil, "message_delta", rd.delta))
	} else {
		d := setUsage(rd.delta, "usage", sum)
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

// assistantTurn is the round's content as a JSON array, memory calls included.
func (rd *round) assistantTurn() []byte {
	parts := make([][]byte, len(rd.blocks))
	for i, b := range rd.blocks {
		parts[i] = b.json()
	}
	return joinArray(parts)
}

// relay copies one upstream stream to the client. i is the round; next is
// the client's next block index, carried across rounds.
func (x *exchange) relay(rd0 *sseReader, sw *streamWriter, rd *round, i int, next *int) error {
	mem := x.memory
	var index []int // upstream index → client index, -1 withheld
	for {
		ev, err := rd0.Next()
		if err != nil {
			return err
		}
		switch string(ev.Name) {
		case "message_start":
			rd.meter.Event("message_start", ev.Data)
			rd.id = gjson.GetBytes(ev.Data, "message.id").Str
			if i == 0 {
				sw.send(ev.Raw)
			}
		case "content_block_start":
			if !mem { // nothing withheld, no later round: relay as is
				sw.send(ev.Raw)
				continue
			}
			// gjson.Get on a view of the event: no copies per event. What is kept
			// past this event (start, id) is copied.
			data := bstr(ev.Data)
			ir := gjson.Get(data, "index")
			idx := int(ir.Int())
			cb := gjson.Get(data, "content_block")
			b := &block{start: []byte(cb.Raw)}
			if cb.Get("type").Str == "tool_use" {
				b.toolUse = true
				b.id = strings.Clone(cb.Get("id").Str)
				b.memory = mem && cb.Get("name").Str == "memory"
				if !b.memory {
					rd.others++
				}
			}
			for len(index) <= idx {
				index = append(index, -1)
			}
			if idx >= 0 {
				if len(rd.blocks) <= idx {
					rd.blocks = append(rd.blocks, make([]*block, idx+1-len(rd.blocks))...)
				}
				rd.blocks[idx] = b
			}
			if b.memory {
				rd.withheld = true
				continue
			}
			index[idx] = *next
			*next++
			x.sendIndexed(sw, ev, ir, idx, index[idx])
		case "content_block_delta", "content_block_stop":
			if !mem {
				sw.send(ev.Raw)
				continue
			}
			ir := gjson.Get(bstr(ev.Data), "index")
			idx := int(ir.Int())
			if idx < 0 || idx >= len(rd.blocks) || rd.blocks[idx] == nil {
				continue // no such block started: drop what cannot be placed
			}
			b := rd.blocks[idx]
			if ev.Name[len("content_block_")] == 'd' {
				b.addDelta(ev.Data)
			} else if b.memory {
				rd.calls = append(rd.calls, memCall{id: b.id, input: b.inputJSON()})
			}
			if !b.memory {
				x.sendIndexed(sw, ev, ir, idx, index[idx])
			}
		case "message_delta":
			rd.meter.Event("message_delta", ev.Data)
			rd.stopReason = gjson.GetBytes(ev.Data, "delta.stop_reason").Str
			rd.delta = append(rd.delta[:0], ev.Data...)
		case "message_stop":
			rd.stopRaw = append([]byte(nil), ev.Raw...)
			rd.done = true
			return nil
		case "error":
			sw.send(ev.Raw)
			rd.failed = true
			return nil
		default: // ping and events this proxy does not know: pass them on
			sw.send(ev.Raw)
		}
		if sw.err != nil {
			return sw.err
		}
	}
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

// sendIndexed relays ev with its index changed to to, when it differs.
// ir is ev's "index" member: the new number is spliced in at its offset,
// into a buffer the stream reuses.
func (x *exchange) sendIndexed(sw *streamWriter, ev sseEvent, ir gjson.Result, from, to int) {
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
