package proxy

import (
	"net/http"

	"github.com/ctxproxy/ctxproxy/limits"
)

// checkLimits checks the request against its tenant's spend caps and per-minute limits (package
// limits) before it goes upstream, and answers the refusal itself; it returns false then.
// count_tokens is free and never limited.
func (x *exchange) checkLimits(bodyBytes int) bool {
	e, q := x.s.cfg.Limits, &x.req
	if e == nil || q.pol == nil || !q.pol.Limits.Any() {
		return true
	}
	l := &q.pol.Limits
	req := limits.Request{Policy: q.pol, Model: q.model, BodyBytes: bodyBytes, MaxTokens: q.info.MaxTokens,
		User: limits.UserOf(l, q.keyID, x.r.Header, q.info.MetadataUserID)}
	t, ref := e.Admit(x.r.Context(), req)
	if ref != nil {
		h := x.w.Header()
		for k, v := range ref.Header {
			h[k] = v
		}
		x.fail(ref.Status, ref.Type, ref.Message)
		return false
	}
	q.ticket = t
	return true
}

// heldOutput is the output tokens the request holds against its tenant's caps, 0 when it holds
// nothing.
func (x *exchange) heldOutput() int64 {
	if !x.req.ticket.Held() {
		return 0
	}
	return limits.OutputHold(&x.req.pol.Limits, x.req.info.MaxTokens)
}

// capHeaders puts the tenant's cap on a relayed upstream reply (anthropic-ratelimit-unified-*)
// and takes the upstream's organisation-wide ratelimit headers off it, for capped tenants only,
// on every route.
func (x *exchange) capHeaders(h http.Header) {
	limits.HideUpstreamRatelimit(x.req.pol, h)
	x.req.ticket.Header(h)
}

// settle charges what the request cost (every upstream call of it, memory rounds included, each
// at its ledger line's cost), or releases its reservation when it cost nothing.
func (x *exchange) settle() {
	t := x.req.ticket
	if t == nil {
		return
	}
	if x.acct.cost == 0 { // no call, an error, a cancel, or a reply with no usage
		t.Release(x.r.Context())
		return
	}
	t.Settle(x.r.Context(), x.acct.cost)
}
