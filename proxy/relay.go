package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/ctxproxy/ctxproxy/cachetrack"
	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// The relay of one upstream stream to the client. Every event is written and
// flushed as it arrives. In memory proxy mode it withholds memory tool_use
// blocks, renumbers the blocks it passes so the client sees no gaps, and
// keeps every block, to rebuild the assistant turn for the next round.

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

// end is what the round tells the memory loop.
func (rd *round) end() roundEnd {
	return roundEnd{id: rd.id, requestID: rd.requestID, stopReason: rd.stopReason, calls: rd.calls, others: rd.others}
}

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
