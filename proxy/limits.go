package proxy

import (
	"net/http"

	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/policy"
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
	return x.admitted(e.Admit(x.r.Context(), req))
}

// checkBatchLimits checks a batch against its tenant's limits as its requests
// (limits.Enforcer.AdmitBatch), and answers a refusal itself.
func (x *exchange) checkBatchLimits(items []policy.BatchItem) bool {
	e, q := x.s.cfg.Limits, &x.req
	if e == nil || q.pol == nil || !q.pol.Limits.Any() {
		return true
	}
	user, ok := x.batchUser(&q.pol.Limits, items)
	if !ok {
		x.fail(http.StatusBadRequest, "invalid_request_error", "tenant "+q.pol.Tenant+" caps spend per end user by metadata.user_id, "+
			"and a batch is charged to one user: its requests name different metadata.user_id values; send each user's requests in a batch of their own")
		return false
	}
	return x.admitted(e.AdmitBatch(x.r.Context(), q.pol, user, items))
}

// admitted keeps the ticket of an admitted request, or answers its refusal.
func (x *exchange) admitted(t *limits.Ticket, ref *limits.Refusal) bool {
	if ref != nil {
		h := x.w.Header()
		for k, v := range ref.Header {
			h[k] = v
		}
		x.fail(ref.Status, ref.Type, ref.Message)
		return false
	}
	x.req.ticket = t
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

// batchUser is a batch's end user for per-user caps: the key's or the
// header's, as a request's; under user_from: metadata.user_id the one its
// requests name, ok false when they name several (the batch is charged to
// one user).
func (x *exchange) batchUser(l *policy.Limits, items []policy.BatchItem) (user string, ok bool) {
	meta := ""
	if l.UserFrom == policy.UserFromMetadata {
		for i, it := range items {
			if i > 0 && it.MetadataUserID != meta {
				return "", false
			}
			meta = it.MetadataUserID
		}
	}
	return limits.UserOf(l, x.req.keyID, x.r.Header, meta), true
}
