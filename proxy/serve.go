package proxy

import (
	"net/http"
	"time"

	"github.com/ctxproxy/ctxproxy/limits"
)

// exchange is one client request to /v1/messages, count_tokens or batch
// creation. serve runs its phases in the order a request lives, one file
// each: admit.go (credential, tenant, key id), body.go (read, lease; lead.go
// when the body goes upstream while it arrives), rewrite.go (the policy),
// limits.go (caps and per-minute limits), upstream.go (build, send, retry;
// credential.go scrubs), the reply (plain.go; stream.go with relay.go and
// sse.go; loop.go the memory loop between rounds, memoryscope.go the stores
// its calls see, threads.go its continuations; reply.go the writers both
// use), and accounting.go (ledger line, caps settle; trace.go the spans,
// compaction.go the measurements).
//
// Each phase's result is a field of its own, written once, by serve, from
// what the phase returns; the later phases only read it. What changes while
// the reply is under way is split by the file that writes it:
//   - out: what the client got; written only by the writers in reply.go.
//   - acct: what the upstream calls cost; written only by accounting.go.
//   - loop: what the memory loop carries from round to round; written only
//     by loop.go.
//   - spans: the open OpenTelemetry spans; written only by trace.go.
//
// What one upstream round learns lives in the round's own values: the reply
// and roundEnd in loop.go, round in relay.go.
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

	conv  conversation // the conversation's previous call and the cache (cacheconv.go)
	out   clientReply
	acct  accounting
	loop  memoryLoop
	spans spans
}

// serve is the request path: admit, body, rewrite, limits, then the reply,
// whose rounds go upstream through callUpstream and are accounted as they
// end (record); finish accounts the request. A phase that stops the request
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
		if x.req, ok = x.rewrite(body); !ok {
			return
		}
		if x.ticket, ok = x.checkLimits(&x.req, len(body)); !ok {
			return
		}
	}
	switch {
	case ep != epMessages:
		x.relayOnce()
	case x.req.info.Stream:
		x.serveStream()
	default:
		x.servePlain()
	}
}
