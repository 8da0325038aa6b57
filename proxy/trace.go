package proxy

import (
	"context"
	"net/http"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/tokens"
	"github.com/ctxproxy/ctxproxy/tracing"
)

// The exchange's OpenTelemetry spans: one server span per client request,
// one `chat {model}` client span per upstream call (each memory-loop round
// its own), one span per memory command. With tracing off (a nil Tracer)
// every method here is a nil check. Only this file writes x.spans.

// spans are the exchange's open spans.
type spans struct {
	server tracing.Span
	call   tracing.Span // the upstream call in flight; zero when none
}

// replyMeta is what a reply says of itself, for the call's span.
type replyMeta struct {
	id, model, stopReason string
	content               string // the reply's content, for a tenant that opted in
}

// startServerSpan starts the request's server span, continuing an incoming
// traceparent, and returns x.r with the span in its context.
func (x *exchange) startServerSpan(route string) *http.Request {
	t := x.s.cfg.Tracer
	if !t.Enabled() {
		return x.r
	}
	ctx, sp := t.StartServer(x.r, route)
	x.spans.server = sp
	return x.r.WithContext(ctx)
}

// startCallSpan starts the client span of one upstream call to path, which
// sends body.
func (x *exchange) startCallSpan(ctx context.Context, path string, body [][]byte) context.Context {
	t := x.s.cfg.Tracer
	if !t.Enabled() {
		return ctx
	}
	x.spans.call.End() // a call whose reply was never accounted
	q, pol := &x.req, x.who.pol
	req := tracing.ChatRequest{
		Model:     q.info.Model,
		Stream:    q.info.Stream,
		Tenant:    x.who.label,
		Edits:     q.info.Edits,
		Round:     x.loop.round,
		MaxTokens: q.info.MaxTokens,
	}
	if path == pathCountTokens {
		req.Operation = "count_tokens"
	}
	if pol != nil {
		req.PolicyMode = string(pol.ContextManagement.Mode)
	}
	ctx, x.spans.call = t.StartChat(ctx, req)
	content := pol != nil && pol.Tracing.Content
	if (q.info.Threaded || content) && x.spans.call.Recording() {
		r := gjson.GetManyBytes(joinParts(body), "thread.previous_message_id", "messages")
		messages := ""
		if content {
			messages = r[1].Raw
		}
		x.spans.call.SetInput(r[0].Str, messages)
	}
	return ctx
}

// plainMeta reads a whole reply's id, model and stop reason for the call's
// span, when it records.
func (x *exchange) plainMeta(reply []byte) replyMeta {
	if !x.spans.call.Recording() {
		return replyMeta{}
	}
	r := gjson.GetManyBytes(reply, "id", "model", "stop_reason", "content")
	m := replyMeta{id: r[0].Str, model: r[1].Str, stopReason: r[2].Str}
	if x.who.pol != nil && x.who.pol.Tracing.Content {
		m.content = r[3].Raw
	}
	return m
}

// injectTrace gives the upstream request the call span as its parent. The
// header is the exchange's shared one, so it is copied first, and only when
// the span is sampled (Tracer.Inject writes nothing for one that is not).
func (x *exchange) injectTrace(ctx context.Context, req *http.Request) {
	t := x.s.cfg.Tracer
	if !t.Sampled(ctx) {
		return
	}
	req.Header = req.Header.Clone()
	t.Inject(ctx, req.Header)
}

// endCallSpan ends the call's span with what its reply and accounting said.
func (x *exchange) endCallSpan(c *tokens.Call, m replyMeta) {
	sp := x.spans.call
	x.spans.call = tracing.Span{}
	if !sp.Recording() {
		sp.End()
		return
	}
	r := tracing.ChatResponse{
		Status: c.Status, ID: m.id, Model: m.model, StopReason: m.stopReason,
		InputTokens: c.Usage.InputTokens, OutputTokens: c.Usage.OutputTokens,
		CacheRead: c.Usage.CacheReadInputTokens, CacheCreation: c.Usage.CacheCreationInputTokens,
		CostUSD: c.Cost.USD(), OutputMessages: m.content,
	}
	for _, e := range c.Edits {
		r.AppliedEdits = append(r.AppliedEdits, e.Type)
		r.ClearedInput += e.ClearedInputTokens
		r.ClearedTools += e.ClearedToolUses
	}
	sp.EndChat(r)
}

// failCallSpan ends the call's span as failed: no reply, or an error reply.
func (x *exchange) failCallSpan(status int, cause string) {
	sp := x.spans.call
	x.spans.call = tracing.Span{}
	if status != 0 {
		sp.EndChat(tracing.ChatResponse{Status: status})
		return
	}
	sp.Fail(cause, "upstream call failed")
	sp.End()
}

// traceMemory runs one memory command inside its own span: command, result
// and the result's size; never its content or a path.
func (x *exchange) traceMemory(ctx context.Context, input []byte, run func(context.Context) memoryhook.Result) memoryhook.Result {
	t := x.s.cfg.Tracer
	if !t.Enabled() {
		return run(ctx)
	}
	ctx, sp := t.StartMemory(ctx, gjson.GetBytes(input, "command").Str)
	if x.who.pol != nil && x.who.pol.Tracing.Content {
		sp.SetMemoryInput(input)
	}
	res := run(ctx)
	sp.EndMemory(!res.IsError, len(res.Content))
	return res
}

// endSpans closes what is still open when the request is over.
func (x *exchange) endSpans() {
	if !x.s.cfg.Tracer.Enabled() {
		return
	}
	if x.out.status >= 500 || x.out.status == 499 {
		x.failCallSpan(0, "request ended")
	} else {
		x.spans.call.End()
	}
	x.spans.server.EndServer(x.out.status, x.who.label)
}

// tracePassthrough gives every other /v1/ call a server span, and the
// upstream request its traceparent (see the passthrough's Rewrite).
func (s *Server) tracePassthrough(next http.Handler) http.Handler {
	t := s.cfg.Tracer
	if !t.Enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, sp := t.StartServer(r, "/v1/*")
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(ctx))
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		sp.EndServer(status, "")
	})
}

// statusWriter remembers the status a handler wrote (0 until it wrote one;
// 1xx are interim) and the bytes of the body; Unwrap keeps flushing
// (http.ResponseController) working through it.
type statusWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
