package fakeapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.uber.org/zap"
)

// Outcomes recorded in Request.Outcome.
const (
	OutcomeOK         = "ok"          // complete reply
	OutcomeError      = "error"       // error status (validation or scripted)
	OutcomeDropped    = "dropped"     // connection closed before a reply
	OutcomeCut        = "cut"         // connection cut mid-reply
	OutcomeErrorEvent = "error_event" // stream ended with event: error
	OutcomeCanceled   = "canceled"    // the client went away
)

func (a *API) serveMessages(w http.ResponseWriter, req *http.Request, reqID string) {
	countTokens := req.URL.Path == "/v1/messages/count_tokens"
	a.mu.Lock()
	opts := a.opts
	a.mu.Unlock()
	body, st, e := a.readBody(req)
	if unread(w, st, e, reqID) {
		return
	}
	r := newRequest(a, req, body)
	r.ID = reqID
	r.CountTokens = countTokens
	if e == nil && req.Method != http.MethodPost {
		st, e = 405, &APIError{Type: "invalid_request_error", Message: "Method " + req.Method + " not allowed; use POST"}
	}
	if e != nil {
		a.record(r)
		a.answerError(w, req, r, st, e, reqID)
		return
	}
	p, rerr := a.parseRequest(body, req.Header, countTokens, &opts)
	r.Model, r.Stream, r.Betas = p.model, p.stream, p.betas
	r.Thread, r.PreviousMessageID = p.thread, p.prevID
	r.Messages, r.Tools, r.AssistantTurns = p.conversation(), p.tools, p.assistant
	r.InputTransformations = p.transforms
	a.record(r)
	if rerr != nil {
		a.releaseThread(p, false)
		a.answerError(w, req, r, rerr.status, rerr.err, reqID)
		return
	}
	if a.keyError(w, req, r, countTokens) {
		a.releaseThread(p, false)
		return
	}
	if countTokens {
		a.releaseThread(p, false)
		res := applyEdits(p)
		out := []byte(`{"input_tokens":` + itoa(res.after) + `,"context_management":`)
		if p.hasCM {
			out = append(out, `{"original_input_tokens":`+itoa(res.before)+`}}`...)
		} else {
			out = append(out, "null}"...)
		}
		a.finish(r, 200, "", nil)
		a.setOutcome(r, OutcomeOK)
		a.writeBody(w, req, "", 200, out)
		return
	}
	rep := a.pickReply(r, p.stream)
	outcome := a.serveReply(w, req, r, p, &rep, &opts, reqID)
	if outcome == OutcomeCanceled {
		a.setOutcome(r, outcome)
	}
	a.log.Debug("fakeapi request", zap.String("path", r.Path), zap.String("model", r.Model),
		zap.Bool("stream", r.Stream), zap.Int("status", r.Status), zap.String("outcome", outcome))
}

func (a *API) setOutcome(r *Request, o string) {
	a.mu.Lock()
	r.Outcome = o
	a.mu.Unlock()
}

func (a *API) answerError(w http.ResponseWriter, req *http.Request, r *Request, status int, e *APIError, reqID string) {
	if a.echoing() {
		e = withEcho(e, req.Header)
	}
	a.finish(r, status, "", e)
	a.setOutcome(r, OutcomeError)
	a.log.Debug("fakeapi rejected request", zap.String("path", r.Path), zap.Int("status", status), zap.String("message", e.Message))
	writeError(w, status, e, reqID)
}

// sleep waits d or until ctx is done (false).
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// message is a success reply made ready to serve.
type message struct {
	id, model, stop, stopSeq string
	blocks                   []json.RawMessage
	usage                    Usage
	iterations               []byte // usage.iterations array; nil when not reported
	rawUsage                 []byte // Reply.RawUsage: the usage object as scripted
	cm                       []byte // context_management value: null or {...}

	cache      *cacheCall // the prompt cache's part (nil: the cache model is off)
	diag       []byte     // the diagnostics value; nil: no field
	transforms []byte     // input_transformations value; nil when not reported
}

func (a *API) buildMessage(p *parsed, rep *Reply, cc *cacheCall) message {
	m := message{id: rep.ID, model: rep.Model, stop: rep.StopReason, stopSeq: rep.StopSequence, cache: cc}
	if m.id == "" {
		m.id = a.newID("msg_fake_")
	}
	if m.model == "" {
		m.model = p.model
	}
	content := rep.Content
	if content == nil {
		content = []json.RawMessage{Text("ok")}
	}
	m.blocks = make([]json.RawMessage, len(content))
	hasTool := false
	outBytes := 0
	for i, b := range content {
		if typ := gjson.GetBytes(b, "type").Str; typ == "tool_use" {
			hasTool = true
			if gjson.GetBytes(b, "id").Str == "" {
				if nb, err := sjson.SetBytes(b, "id", a.newID("toolu_fake_")); err == nil {
					b = nb
				}
			}
		}
		m.blocks[i] = b
		outBytes += len(b)
	}
	if m.stop == "" {
		m.stop = "end_turn"
		if hasTool {
			m.stop = "tool_use"
		}
	}
	res := applyEdits(p)
	if rep.Usage != nil {
		m.usage = *rep.Usage
	} else {
		m.usage = Usage{InputTokens: res.after, OutputTokens: max(Tokens(outBytes), 1)}
		if cc != nil {
			m.usage = cc.usage.withOutput(m.usage.OutputTokens)
		}
	}
	if cc != nil {
		m.diag = cc.diag
	}
	m.applyCompaction(p, rep, res.after)
	if len(rep.RawUsage) > 0 {
		m.rawUsage = rep.RawUsage
	}
	m.splitCalls(p, rep)
	applied := res.applied
	if rep.AppliedEdits != nil {
		applied = rep.AppliedEdits
	}
	if applied == nil {
		m.cm = []byte("null")
	} else {
		cm := []byte(`{"applied_edits":[`)
		for i, e := range applied {
			if i > 0 {
				cm = append(cm, ',')
			}
			cm = append(cm, e...)
		}
		m.cm = append(cm, "]}"...)
	}
	return m
}

// applyCompaction compacts when the request asks for it: on demand, or past
// the compact edit's trigger (inputTokens is the estimate after the other
// edits). The compaction block comes first; with pause_after_compaction or on
// demand it comes alone, with stop_reason "compaction" and the cost only in
// usage.iterations. With the compact edit every reply reports iterations.
func (m *message) applyCompaction(p *parsed, rep *Reply, inputTokens int64) {
	spec, signed := p.compact, false
	if p.onDemand != nil {
		spec, signed = p.onDemand, true
	}
	if spec == nil {
		return
	}
	if !signed && inputTokens < spec.trigger {
		m.iterations = appendIteration([]byte{'['}, "message", m.model, m.usage)
		m.iterations = append(m.iterations, ']')
		return
	}
	in := Usage{InputTokens: inputTokens}
	if m.cache != nil && rep.Usage == nil {
		in = m.cache.usage
	}
	c := compact(p, spec, in, signed)
	m.iterations = append(append([]byte{'['}, c.iteration...), ']')
	if signed || spec.pause {
		m.blocks = []json.RawMessage{c.block}
		m.stop = "compaction"
		m.usage = Usage{}
		if m.cache != nil {
			m.usage.CacheCreation = &CacheCreation{}
		}
		return
	}
	m.blocks = append([]json.RawMessage{c.block}, m.blocks...)
	if rep.Usage == nil && m.cache != nil {
		m.usage = m.cache.afterCompaction(c.block).withOutput(m.usage.OutputTokens)
	} else if rep.Usage == nil {
		// What the model read after the compaction: system, tools, the summary
		// and the latest turn.
		m.usage.InputTokens = Tokens(len(p.system)+len(p.tools)) + c.tokens + lastTurnTokens(p)
	}
	m.iterations = appendIteration(append(m.iterations[:len(m.iterations)-1], ','), "message", m.model, m.usage)
	m.iterations = append(m.iterations, ']')
}

// appendTransforms appends the input_transformations member when reported.
func (m *message) appendTransforms(b []byte) []byte {
	if m.transforms == nil {
		return b
	}
	return append(append(b, `,"input_transformations":`...), m.transforms...)
}

// appendUsage appends the usage object: final (the JSON body and
// message_delta) carries the iterations and the output tokens, message_start
// the input counts and 1 output token.
func (m *message) appendUsage(b []byte, final bool) []byte {
	if m.rawUsage != nil {
		if final {
			return append(b, m.rawUsage...)
		}
		r := gjson.ParseBytes(m.rawUsage)
		u := Usage{InputTokens: r.Get("input_tokens").Int(), CacheCreationInputTokens: r.Get("cache_creation_input_tokens").Int(),
			CacheReadInputTokens: r.Get("cache_read_input_tokens").Int()}
		return appendUsage(b, u, 1)
	}
	if !final {
		return appendUsage(b, m.usage, 1)
	}
	b = appendUsage(b, m.usage, m.usage.OutputTokens)
	if m.iterations != nil {
		b = append(b[:len(b)-1], `,"iterations":`...)
		b = append(b, m.iterations...)
		b = append(b, '}')
	}
	return b
}

func appendUsage(b []byte, u Usage, outputTokens int64) []byte {
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, u.InputTokens, 10)
	b = append(b, `,"cache_creation_input_tokens":`...)
	b = strconv.AppendInt(b, u.CacheCreationInputTokens, 10)
	b = append(b, `,"cache_read_input_tokens":`...)
	b = strconv.AppendInt(b, u.CacheReadInputTokens, 10)
	if c := u.CacheCreation; c != nil {
		b = append(b, `,"cache_creation":{"ephemeral_5m_input_tokens":`...)
		b = strconv.AppendInt(b, c.Ephemeral5m, 10)
		b = append(b, `,"ephemeral_1h_input_tokens":`...)
		b = strconv.AppendInt(b, c.Ephemeral1h, 10)
		b = append(b, '}')
	}
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, outputTokens, 10)
	return append(b, '}')
}

func appendStopSeq(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return jsonstr.Append(b, s)
}

func (m *message) appendHead(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = jsonstr.Append(b, m.id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = jsonstr.Append(b, m.model)
	return b
}

// body is the non-streaming JSON message.
func (m *message) body() []byte {
	n := 256 + len(m.cm) + len(m.diag)
	for _, b := range m.blocks {
		n += len(b) + 1
	}
	b := m.appendHead(make([]byte, 0, n))
	b = append(b, `,"content":[`...)
	for i, blk := range m.blocks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, blk...)
	}
	b = append(b, `],"stop_reason":`...)
	b = jsonstr.Append(b, m.stop)
	b = append(b, `,"stop_sequence":`...)
	b = appendStopSeq(b, m.stopSeq)
	b = append(b, `,"usage":`...)
	b = m.appendUsage(b, true)
	b = append(b, `,"context_management":`...)
	b = append(b, m.cm...)
	b = m.appendDiagnostics(b)
	b = m.appendTransforms(b)
	return append(b, '}')
}

// assistantTurn is the reply as a conversation message (for threads).
func (m *message) assistantTurn() json.RawMessage {
	b := []byte(`{"role":"assistant","content":[`)
	for i, blk := range m.blocks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, blk...)
	}
	return append(b, "]}"...)
}

// serveReply answers a validated request with rep and returns the outcome.
func (a *API) serveReply(w http.ResponseWriter, req *http.Request, r *Request, p *parsed, rep *Reply, opts *Options, reqID string) string {
	ctx := req.Context()
	var t0 time.Time // the prompt cache's clock at the request's start
	if opts.CacheOptions.on() {
		t0 = a.Now()
	}
	if !sleep(ctx, rep.Delay) {
		a.releaseThread(p, false)
		a.finish(r, 0, "", nil)
		return OutcomeCanceled
	}
	if rep.Drop {
		a.releaseThread(p, false)
		a.finish(r, 0, "", nil)
		a.setOutcome(r, OutcomeDropped)
		cutConnection(w)
		return OutcomeDropped
	}
	for k, vs := range rep.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if st, e, isErr := rep.errorParts(); isErr {
		addCodeHeaders(w.Header(), e, opts.SpendLimitsNoRetry)
		if opts.EchoHeaders {
			e = withEcho(e, req.Header)
		}
		a.releaseThread(p, false)
		a.finish(r, st, "", e)
		a.setOutcome(r, OutcomeError)
		a.writeBody(w, req, rep.Encoding, st, errorBody(e, reqID))
		return OutcomeError
	}
	var cc *cacheCall
	if opts.CacheOptions.on() {
		cc = a.runCache(r, p, &opts.CacheOptions, t0, p.stream)
	}
	m := a.buildMessage(p, rep, cc)
	cc.stored(m.id)
	a.bindReply(p, m.blocks, m.model)
	if p.reportTransforms {
		m.transforms = p.transformsJSON()
	}
	if p.thread != "" {
		// Stored before the first byte goes out, so a client can continue at once.
		a.storeThread(p, m.id, m.assistantTurn())
	}
	a.finish(r, 200, m.id, nil)
	// end settles the thread state; it runs before a cut or an error event
	// reaches the client, so a client reacting at once sees the settled state.
	ended := false
	end := func(outcome string) {
		if ended {
			return
		}
		ended = true
		a.setOutcome(r, outcome)
		ok := outcome == OutcomeOK
		if p.thread != "" && !ok {
			a.threads.remove(m.id)
		}
		a.releaseThread(p, ok)
	}
	var outcome string
	if p.stream {
		outcome = a.stream(w, req, &m, rep, opts, end)
	} else {
		outcome = a.writeMessage(w, req, &m, rep, end)
	}
	end(outcome)
	return outcome
}

func (a *API) writeMessage(w http.ResponseWriter, req *http.Request, m *message, rep *Reply, end func(string)) string {
	body := m.body()
	if rep.CutAfter <= 0 {
		end(OutcomeOK)
		a.writeBody(w, req, rep.Encoding, 200, body)
		return OutcomeOK
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(200)
	_, _ = w.Write(body[:len(body)/2])
	_ = http.NewResponseController(w).Flush()
	end(OutcomeCut)
	cutConnection(w)
	return OutcomeCut
}

// cutConnection closes the client's TCP connection without finishing the
// response (hijacking it; on HTTP/2 the stream is reset instead).
func cutConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// sse writes one stream's events.
type sse struct {
	ctx       context.Context
	w         io.Writer
	zw        flushWriter
	rc        *http.ResponseController
	buf       []byte // the event being written
	data      []byte // scratch for a payload
	delay     time.Duration
	timer     *time.Timer
	n         int // events written, pings not counted
	pingEvery int
	sinceping int
	cutAfter  int
	errAfter  int
	errEvent  *APIError
	first     bool
	stop      string // outcome when the stream ended early
	end       func(outcome string)
}

// event writes one event; false means stop (cut, error event, client gone).
func (s *sse) event(name string, data []byte) bool {
	if s.stop != "" {
		return false
	}
	if !s.first && s.delay > 0 {
		s.timer.Reset(s.delay)
		select {
		case <-s.timer.C:
		case <-s.ctx.Done():
			s.stop = OutcomeCanceled
			return false
		}
	}
	s.first = false
	s.buf = append(s.buf[:0], "event: "...)
	s.buf = append(s.buf, name...)
	s.buf = append(s.buf, "\ndata: "...)
	s.buf = append(s.buf, data...)
	s.buf = append(s.buf, "\n\n"...)
	if _, err := s.w.Write(s.buf); err != nil {
		s.stop = OutcomeCanceled
		return false
	}
	if s.zw != nil {
		_ = s.zw.Flush()
	}
	if err := s.rc.Flush(); err != nil {
		s.stop = OutcomeCanceled
		return false
	}
	if name == "ping" {
		return true
	}
	s.n++
	if s.cutAfter > 0 && s.n >= s.cutAfter {
		s.stop = OutcomeCut
		return false
	}
	if s.errEvent != nil && s.n >= s.errAfter {
		e := s.errEvent
		s.errEvent = nil
		s.end(OutcomeErrorEvent)
		s.buf = append(s.buf[:0], "event: error\ndata: "...)
		s.buf = append(s.buf, errorBody(e, "")...)
		s.buf = append(s.buf, "\n\n"...)
		_, _ = s.w.Write(s.buf)
		if s.zw != nil {
			_ = s.zw.Flush()
		}
		_ = s.rc.Flush()
		s.stop = OutcomeErrorEvent
		return false
	}
	if s.pingEvery > 0 {
		s.sinceping++
		if s.sinceping >= s.pingEvery {
			s.sinceping = 0
			return s.event("ping", pingData)
		}
	}
	return true
}

var (
	pingData    = []byte(`{"type":"ping"}`)
	messageStop = []byte(`{"type":"message_stop"}`)
)

func (a *API) stream(w http.ResponseWriter, req *http.Request, m *message, rep *Reply, opts *Options, end func(string)) string {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	s := &sse{ctx: req.Context(), w: w, rc: http.NewResponseController(w), first: true,
		delay: rep.EventDelay, pingEvery: opts.PingEvery, cutAfter: rep.CutAfter,
		errAfter: rep.ErrorAfter, errEvent: rep.ErrorEvent, end: end}
	if s.delay == 0 {
		s.delay = opts.EventDelay
	}
	if s.delay > 0 {
		s.timer = time.NewTimer(time.Hour)
		s.timer.Stop()
		defer s.timer.Stop()
	}
	chunks := rep.TextChunks
	if chunks == 0 {
		chunks = opts.TextChunks
	}
	if chunks <= 0 {
		chunks = 3
	}
	if enc := a.pickEncoding(req, rep.Encoding); enc != "" {
		zw, done, err := newEncoder(enc, w)
		if err == nil {
			defer done()
			s.zw, s.w = zw, zw
			h.Set("Content-Encoding", enc)
			h.Add("Vary", "Accept-Encoding")
		}
	}
	w.WriteHeader(200)
	s.run(m, chunks)
	switch s.stop {
	case OutcomeCut:
		end(OutcomeCut)
		cutConnection(w)
		return OutcomeCut
	case "":
		s.stop = OutcomeOK
	}
	if s.zw != nil {
		_ = s.zw.Close()
	}
	return s.stop
}

func (s *sse) run(m *message, chunks int) {
	d := m.appendHead(append(s.data[:0], `{"type":"message_start","message":`...))
	d = append(d, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":`...)
	d = m.appendUsage(d, false)
	d = append(d, `,"context_management":null`...)
	d = append(m.appendTransforms(m.appendDiagnostics(d)), "}}"...)
	s.data = d
	if !s.event("message_start", d) || !s.event("ping", pingData) {
		return
	}
	for i, blk := range m.blocks {
		if !s.block(i, blk, chunks) {
			return
		}
	}
	d = append(s.data[:0], `{"type":"message_delta","delta":{"stop_reason":`...)
	d = jsonstr.Append(d, m.stop)
	d = append(d, `,"stop_sequence":`...)
	d = appendStopSeq(d, m.stopSeq)
	d = append(d, `},"usage":`...)
	d = m.appendDeltaUsage(d)
	d = append(d, `,"context_management":`...)
	d = append(d, m.cm...)
	s.data = append(d, '}')
	if !s.event("message_delta", s.data) {
		return
	}
	if s.cutAfter > 0 && s.n+1 >= s.cutAfter {
		s.event("message_stop", messageStop) // the cut comes right after
		return
	}
	s.end(OutcomeOK)
	s.event("message_stop", messageStop)
}

func (s *sse) blockStart(i int, start string) bool {
	d := append(s.data[:0], `{"type":"content_block_start","index":`...)
	d = strconv.AppendInt(d, int64(i), 10)
	d = append(d, `,"content_block":`...)
	d = append(d, start...)
	s.data = append(d, '}')
	return s.event("content_block_start", s.data)
}

func (s *sse) delta(i int, typ, field, value string) bool {
	d := append(s.data[:0], `{"type":"content_block_delta","index":`...)
	d = strconv.AppendInt(d, int64(i), 10)
	d = append(d, `,"delta":{"type":"`...)
	d = append(d, typ...)
	d = append(d, `","`...)
	d = append(d, field...)
	d = append(d, `":`...)
	d = jsonstr.Append(d, value)
	s.data = append(d, "}}"...)
	return s.event("content_block_delta", s.data)
}

func (s *sse) blockStop(i int) bool {
	d := append(s.data[:0], `{"type":"content_block_stop","index":`...)
	d = strconv.AppendInt(d, int64(i), 10)
	s.data = append(d, '}')
	return s.event("content_block_stop", s.data)
}

func (s *sse) block(i int, blk json.RawMessage, chunks int) bool {
	b := gjson.ParseBytes(blk)
	switch b.Get("type").Str {
	case "text":
		if !s.blockStart(i, `{"type":"text","text":""}`) {
			return false
		}
		if t := b.Get("text").Str; t != "" {
			for _, piece := range splitN(t, chunks) {
				if !s.delta(i, "text_delta", "text", piece) {
					return false
				}
			}
		}
	case "thinking":
		if !s.blockStart(i, `{"type":"thinking","thinking":"","signature":""}`) {
			return false
		}
		if t := b.Get("thinking").Str; t != "" {
			for _, piece := range splitN(t, chunks) {
				if !s.delta(i, "thinking_delta", "thinking", piece) {
					return false
				}
			}
		}
		if !s.delta(i, "signature_delta", "signature", b.Get("signature").Str) {
			return false
		}
	case "tool_use", "server_tool_use":
		start, err := sjson.SetRawBytes(blk, "input", []byte("{}"))
		if err != nil {
			start = blk
		}
		if !s.blockStart(i, string(start)) {
			return false
		}
		in := b.Get("input").Raw
		if in == "" {
			in = "{}"
		}
		for _, piece := range splitN(in, chunks) {
			if !s.delta(i, "input_json_delta", "partial_json", piece) {
				return false
			}
		}
	case "compaction":
		// content_block_start without the summary, then one compaction_delta
		// carrying the complete content and encrypted_content (null stays null).
		start, err := sjson.SetRawBytes(blk, "content", []byte("null"))
		if err != nil {
			start = blk
		}
		start, _ = sjson.DeleteBytes(start, "encrypted_content")
		if !s.blockStart(i, string(start)) {
			return false
		}
		content, enc := b.Get("content").Raw, b.Get("encrypted_content").Raw
		if content == "" {
			content = "null"
		}
		if enc == "" {
			enc = "null"
		}
		d := append(s.data[:0], `{"type":"content_block_delta","index":`...)
		d = strconv.AppendInt(d, int64(i), 10)
		d = append(d, `,"delta":{"type":"compaction_delta","content":`...)
		d = append(d, content...)
		d = append(d, `,"encrypted_content":`...)
		d = append(d, enc...)
		s.data = append(d, "}}"...)
		if !s.event("content_block_delta", s.data) {
			return false
		}
	default: // redacted_thinking, server tool results, ...: whole block, no deltas
		if !s.blockStart(i, string(blk)) {
			return false
		}
	}
	return s.blockStop(i)
}
