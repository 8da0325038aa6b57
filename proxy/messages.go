package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
)

// exchange is one client request to /v1/messages or count_tokens. Its state
// is split by who writes it, so each part has one file that changes it:
//   - req: the request as the tenant's policy made it; written only by
//     readAndRewrite (this file), read-only afterwards.
//   - out: what the client got; written only by the writers in respond.go.
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

// accept takes the rewrite's result as the request, or answers the client its error.
func (x *exchange) accept(parts [][]byte, info policy.RewriteInfo, err error) bool {
	if err != nil {
		var re *policy.RequestError
		if errors.As(err, &re) {
			x.refuse(re)
			return false
		}
		x.fail(http.StatusBadRequest, "invalid_request_error", err.Error())
		return false
	}
	// Rewrite read model and stream in its validating pass; a gjson lookup
	// of an absent "stream" would walk the whole body once more.
	q := &x.req
	q.parts, q.info, q.model, q.stream = parts, info, info.Model, info.Stream
	return true
}

// admit finds the caller and its tenant's policy, before the body is read:
// a refused caller costs no read, and a 413 can name the tenant. known is
// whether the key matched a tenant (not the default).
func (x *exchange) admit(ep endpoint) (known, ok bool) {
	s, r, q := x.s, x.r, &x.req
	c, refused := s.authenticate(r.Context(), r.Header)
	q.keyID = c.keyID // the refusal's log line says which key
	if refused != nil {
		x.fail(refused.status, refused.typ, refused.msg)
		return false, false
	}
	q.user, q.upstreamKey = c.user, c.upstreamKey
	if !c.known && s.cfg.RequireKnownTenant {
		x.fail(http.StatusUnauthorized, "authentication_error", "the API key matches no ctxproxy tenant")
		return false, false
	}
	q.pol = c.pol
	q.header = upstreamHeader(r)
	if c.upstreamKey != "" {
		swapCredential(q.header, c.upstreamKey)
	}
	if pol := c.pol; pol != nil {
		q.tenant = pol.Tenant
		q.memory = pol.Memory.Mode == policy.MemoryProxy && ep == epMessages
		q.retry = retryPolicy{retries: pol.Upstream.Retries, base: pol.Upstream.RetryBaseDelay, max: pol.Upstream.RetryMaxDelay}
	}
	return c.known, true
}

// readClientBody reads the body within --max-body; past it the 413 names
// the tenant when the key is a tenant's (the operator's first question).
func (x *exchange) readClientBody(known bool) ([]byte, bool) {
	s, r, q := x.s, x.r, &x.req
	whose := ""
	if known {
		whose = " for tenant " + q.tenant
	}
	if r.ContentLength > s.cfg.MaxBody {
		x.fail(http.StatusRequestEntityTooLarge, "request_too_large",
			fmt.Sprintf("request body is %d bytes; the limit%s is %d bytes", r.ContentLength, whose, s.cfg.MaxBody))
		return nil, false
	}
	body, lease, err := readBody(r, s.cfg.MaxBody)
	q.lease = lease
	q.bytesIn = int64(len(body))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			x.fail(http.StatusRequestEntityTooLarge, "request_too_large",
				fmt.Sprintf("request body is over the limit%s of %d bytes", whose, s.cfg.MaxBody))
			return nil, false
		}
		x.fail(http.StatusBadRequest, "invalid_request_error", "could not read request body: "+err.Error())
		return nil, false
	}
	return body, true
}

// joinParts is the body the pieces make, without a copy when there is one.
func joinParts(parts [][]byte) []byte {
	if len(parts) == 1 {
		return parts[0]
	}
	return bytes.Join(parts, nil)
}

// readBody reads at most limit bytes; Content-Length sizes the buffer once
// (a pooled one for large bodies; see bodypool.go).
func readBody(r *http.Request, limit int64) ([]byte, *bodyLease, error) {
	rd := http.MaxBytesReader(nil, r.Body, limit)
	if r.ContentLength > 0 {
		buf, lease := newBodyBuf(int(r.ContentLength))
		if _, err := io.ReadFull(rd, buf); err != nil {
			lease.release()
			return nil, nil, err
		}
		if err := pastLength(rd); err != nil {
			lease.release()
			return nil, nil, err
		}
		return buf, lease, nil
	}
	b, err := io.ReadAll(rd)
	return b, nil, err
}

// errPastLength is a body that goes on past its Content-Length: a broken client.
var errPastLength = errors.New("body longer than its content-length")

// pastLength reads rd, a body read up to its declared length, for one byte more: any is
// errPastLength.
func pastLength(rd io.Reader) error {
	var one [1]byte
	if n, _ := rd.Read(one[:]); n > 0 {
		return errPastLength
	}
	return nil
}

// roundTrip sends body upstream on the client's route, retrying per p, and
// returns the reply with an identity body. t0 is when it was sent: the
// call's upstream time runs until its reply was read (accounting.waited).
func (x *exchange) roundTrip(ctx context.Context, body [][]byte, p retryPolicy) (resp *http.Response, t0 time.Time, err error) {
	return x.callUpstream(ctx, x.r, body, p)
}

// callUpstream is every upstream call of the exchange, one path: the
// request newRequest builds with the exchange's upstream headers (the
// tenant's key in place of the client's), the call's span and its trace
// context, the count of calls, an identity body, and a reply scrubbed of
// the tenant's key. route gives the method, path and query: the client's
// own request (x.r), whose call may take the upload that went ahead and the
// pooled body, or another route of the API (countTokensRoute).
func (x *exchange) callUpstream(ctx context.Context, route *http.Request, body [][]byte, p retryPolicy) (resp *http.Response, t0 time.Time, err error) {
	t0 = time.Now()
	ctx = x.startCallSpan(ctx, route.URL.Path, body)
	var lead *leadUpload
	var lease *bodyLease
	if route == x.r {
		lead, lease = x.req.lead, x.req.lease
		x.req.lead = nil
	}
	if lead != nil {
		t0 = lead.t0
	}
	resp, err = x.s.up.do(ctx, func(attempt int) (*http.Response, error) {
		if attempt == 0 && lead != nil {
			if resp, err, ok := lead.result(ctx); ok {
				x.req.led = true
				return resp, err
			}
			t0 = time.Now() // the upstream saw no whole request: send it again, whole
		}
		req := x.s.up.newRequest(ctx, route, x.req.header, body, lease)
		x.injectTrace(ctx, req)
		return x.s.up.send(req)
	}, p)
	x.acct.called()
	if err == nil {
		if err = decodeBody(resp); err != nil {
			resp.Body.Close()
		}
	}
	if err != nil {
		x.acct.waited(t0)
		x.failCallSpan(0, "upstream_unreachable")
		return nil, t0, err
	}
	if resp.StatusCode != http.StatusOK {
		x.failCallSpan(resp.StatusCode, "")
	}
	scrubReply(resp, x.req.upstreamKey)
	return resp, t0, nil
}

// relayOnce forwards the request and relays the reply as it is (count_tokens,
// batch creation).
func (x *exchange) relayOnce() {
	resp, t0, err := x.roundTrip(x.r.Context(), x.req.parts, x.req.retry)
	if err != nil {
		x.upstreamError(err)
		return
	}
	defer resp.Body.Close()
	body, err := readReply(resp)
	x.acct.waited(t0)
	if err != nil {
		x.upstreamError(err)
		return
	}
	x.recordCount(resp, body)
	x.openBatch(resp, body)
	x.writeReply(resp, body)
}

// scope is the request's memory namespace: the store the policy names for
// its key (see policy.Policy.MemoryStore), under the tenant's limits. ok is
// false when there is none (memory per key, and no key).
func (x *exchange) scope() (sc memoryhook.Scope, ok bool) {
	store, ok := x.req.pol.MemoryStore(x.req.keyID)
	return memoryhook.Scope{Tenant: store, Limits: memoryhook.Limits(x.req.pol.Memory.Limits)}, ok
}
