package proxy

import (
	"net/http"
	"time"

	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/policy"
)

// exchange is one client request to /v1/messages, count_tokens or batch
// creation. It lives through the phases of serve, one file each, in this
// order: admit.go (credential, tenant, key id), body.go (read, lease; lead.go
// when the body goes upstream while it arrives), rewrite.go (the policy),
// limits.go (caps and per-minute limits), upstream.go (build, send, retry;
// credential.go scrubs), the reply (plain.go; stream.go with relay.go and
// sse.go; loop.go the memory loop between rounds, threads.go its
// continuations; reply.go the writers both use), and accounting.go (ledger
// line, caps settle; trace.go the spans, compaction.go the measurements).
//
// Its state is split by who writes it, so each part has one file that changes it:
//   - req: the request as the tenant's policy made it; written by the
//     admit, body, rewrite and limits phases, read-only afterwards.
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
	r     *http.Request
	w     http.ResponseWriter
	req   request
	out   clientReply
	acct  accounting
	loop  memoryLoop
	spans spans
}

// request is the client's request after the policy.
type request struct {
	ep     endpoint
	start  time.Time
	pol    *policy.Policy // nil: no policy applies; forwarded untouched
	tenant string
	keyID  string
	user   string // of a ctxproxy key
	// upstreamKey is the tenant's own Anthropic key, sent in place of the
	// client's credential and scrubbed from every reply; "" if none.
	upstreamKey string
	header      http.Header // upstream request headers (beta merged)
	lease       *bodyLease  // the client's body buffer, when pooled
	lead        *leadUpload // the first upstream call, sent while the body arrived (lead.go)
	led         bool        // that call was the request's first: its body went while it arrived
	parts       [][]byte    // first upstream request body, in pieces that alias the client's
	body        []byte      // the same joined, in memory proxy mode (the loop edits a copy)
	info        policy.RewriteInfo
	model       string
	stream      bool
	memory      bool // memory.mode proxy: the proxy runs memory calls
	retry       retryPolicy
	bytesIn     int64
	ticket      *limits.Ticket // admitted against the tenant's limits; nil when it has none
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, ep endpoint) {
	x := &exchange{s: s, r: r, w: w, req: request{ep: ep, start: time.Now()}}
	x.startServerSpan(r.URL.Path)
	defer x.finish()
	if !x.readAndRewrite(ep) {
		return
	}
	switch {
	case ep != epMessages:
		x.relayOnce()
	case x.req.stream:
		x.serveStream()
	default:
		x.servePlain()
	}
}

// readAndRewrite finds the tenant, reads the body and applies its policy.
// It answers the client itself and returns false when the request stops here.
func (x *exchange) readAndRewrite(ep endpoint) bool {
	r, q := x.r, &x.req
	known, ok := x.admit(ep)
	if !ok {
		return false
	}
	if x.mayLead(ep) {
		return x.readLeading(ep)
	}
	body, ok := x.readClientBody(known)
	if !ok {
		return false
	}
	// A nil policy (no default.yaml) still validates the body and changes nothing.
	if ep == epBatchCreate {
		return x.acceptBatch(body)
	}
	if !x.accept(rewriteFor(ep, q.pol, body, q.header)) {
		return false
	}
	if ep == epMessages && !x.checkLimits(len(body)) {
		return false
	}
	if q.memory {
		// The memory loop builds its next requests from the whole body.
		var err error
		if q.body, err = x.applyContinuation(r.Context(), joinParts(q.parts)); err != nil {
			x.fail(http.StatusServiceUnavailable, "api_error", "memory store unavailable: "+err.Error())
			return false
		}
		q.parts = [][]byte{q.body}
	}
	return true
}
