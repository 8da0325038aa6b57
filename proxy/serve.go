package proxy

import (
	"net/http"
	"time"

	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/tracing"
)

// exchange is one client request to /v1/messages, count_tokens or batch
// creation. serve runs its phases in the order a request lives, one file
// each: admit.go (credential, tenant, key id), body.go (read, lease; lead.go
// when the body goes upstream while it arrives), rewrite.go (the policy, the
// upstream headers, and openConversation: the conversation it continues,
// whose type and plain-reply reading are in cacheconv.go),
// limits.go (caps and per-minute limits), loop.go (the memory loop: begun
// before the first round, advanced between rounds; thread continuations in
// threads.go), the reply (plain.go, or stream.go: every round of a stream,
// relayed and spliced), upstream.go (build, send, retry, the call's span;
// credential.go scrubs the tenant's key from replies), memory.go (a round's memory calls), reply.go (the
// writers of what the client gets) and accounting.go (ledger line, caps
// settle, the spans' end; compaction.go the measurements). A helper lives in
// the file of the phase that calls it.
//
// Each phase's result is a field of its own, written once, by serve (or
// readLeading, which reads, rewrites and limits in one), from what the phase
// returns; the later phases only read it. One exception: when the upstream
// refuses an edit the policy added, resendWithout (editrefused.go) takes it
// out of req's info and header as the request goes again without it. What changes while the reply is
// under way has one writer per field:
//   - out: what the client got; the writers in reply.go (startStream for a
//     stream) and streamed, which counts what the stream wrote.
//   - acct: what the upstream calls cost; calls by callUpstream, upDur by
//     waited, memCmds by memoryCommand, the rest by record.
//   - loop: what the memory loop carries from round to round; loop.go.
//   - spans: the open OpenTelemetry spans; started by startServerSpan and
//     startCallSpan, ended by endCallSpan, failCallSpan and endSpans.
//   - conv: opened by openConversation, in rewrite (or readLeading); seen
//     set by readPlain and seeStream, prev and known moved on by attributeCache.
//   - shadow: opened by openShadow, handed to the policy lab by shadowCall.
//
// What one upstream round learns lives in the round's own values: a plain
// round's reply in servePlain (plain.go), a stream's round in stream.go, and
// what either tells the memory loop in a roundEnd (loop.go).
type exchange struct {
	s     *Server
	r     *http.Request // the client's request, with the server span in its context
	w     http.ResponseWriter
	ep    endpoint
	start time.Time

	who    admission      // admit: who asks, and what the tenant's policy makes of it
	in     clientBody     // body: the client's body as read
	req    request        // rewrite: the upstream request the policy made
	ticket *limits.Ticket // limits: admitted against the tenant's limits; nil when it has none

	conv   conversation  // the conversation's previous call and the cache (cacheconv.go)
	replay replayRequest // names the request for the SDKs' resends (replay.go)
	shadow shadowRun     // the policy lab's sample (shadow.go)
	out    clientReply
	acct   accounting
	loop   memoryLoop
	spans  spans
}

// serve is the request path: admit, body, rewrite (with the conversation), limits,
// the memory loop begun, then the reply, whose rounds go upstream through
// callUpstream and are accounted as they end (record); finish accounts the
// request. A phase that stops the request
// has answered the client itself.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, ep endpoint) {
	x := &exchange{s: s, r: r, w: w, ep: ep, start: time.Now(), who: admission{label: "none"}}
	x.r = x.startServerSpan(r.URL.Path)
	defer x.finish()
	var ok bool
	if x.who, ok = x.admit(); !ok {
		return
	}
	if x.mayLead() {
		// The body goes upstream while it arrives: read, rewrite and limits in one.
		if x.in, x.req, x.ticket, ok = x.readLeading(); !ok {
			return
		}
	} else {
		var body []byte
		if x.in, body, ok = x.readClientBody(); !ok {
			return
		}
		x.shadow = x.openShadow(body) // before the rewrite, which may reuse body's buffer
		if x.replayKeyFor(body); x.replayed() {
			return
		}
		if x.req, x.conv, ok = x.rewrite(body); !ok {
			return
		}
		if x.ticket, ok = x.checkLimits(&x.req, len(body)); !ok {
			return
		}
	}
	if ep != epMessages {
		x.relayOnce()
		return
	}
	if !x.startLoop() {
		return
	}
	if x.req.info.Stream {
		x.serveStream()
	} else {
		x.servePlain()
	}
}

// spans are the exchange's open OpenTelemetry spans: one server span per
// client request, one `chat {model}` client span per upstream call (each
// memory-loop round its own), one span per memory command (traceMemory).
// With tracing off (a nil Tracer) every method on them is a nil check.
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
