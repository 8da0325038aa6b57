package proxy

import (
	"net/http"

	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/policy"
)

// checkLimits checks the request q against its tenant's spend caps and per-minute limits
// (package limits) before it goes upstream, and answers the refusal itself; it returns false
// then. A Messages request is admitted by its model and max_tokens, a batch as its requests
// (limits.Enforcer.AdmitBatch); count_tokens is free and never limited. The ticket is nil when
// the tenant has no limits.
func (x *exchange) checkLimits(q *request, bodyBytes int) (*limits.Ticket, bool) {
	e, pol := x.s.cfg.Limits, x.who.pol
	if e == nil || pol == nil || !pol.Limits.Any() {
		return nil, true
	}
	l := &pol.Limits
	switch x.ep {
	case epMessages:
		req := limits.Request{Policy: pol, Model: q.info.Model, BodyBytes: bodyBytes, MaxTokens: q.info.MaxTokens,
			User: limits.UserOf(l, x.who.keyID, x.r.Header, q.info.MetadataUserID)}
		if x.who.memory {
			req.Rounds = int64(x.maxIterations()) // the memory loop's calls, each bounded by max_tokens
		}
		return x.admitted(e.Admit(x.r.Context(), req))
	case epBatchCreate:
		user, ok := x.batchUser(l, q.items)
		if !ok {
			x.fail(http.StatusBadRequest, "invalid_request_error", "tenant "+pol.Tenant+" caps spend per end user by metadata.user_id, "+
				"and a batch is charged to one user: its requests name different metadata.user_id values; send each user's requests in a batch of their own")
			return nil, false
		}
		return x.admitted(e.AdmitBatch(x.r.Context(), pol, user, q.items))
	}
	return nil, true
}

// admitted is the ticket of an admitted request, or answers its refusal.
func (x *exchange) admitted(t *limits.Ticket, ref *limits.Refusal) (*limits.Ticket, bool) {
	if ref != nil {
		h := x.w.Header()
		for k, v := range ref.Header {
			h[k] = v
		}
		x.fail(ref.Status, ref.Type, ref.Message)
		return nil, false
	}
	return t, true
}

// heldOutput is the output tokens the request holds against its tenant's caps, 0 when it holds
// nothing.
func (x *exchange) heldOutput() int64 {
	if !x.ticket.Held() {
		return 0
	}
	return limits.OutputHold(&x.who.pol.Limits, x.req.info.MaxTokens)
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
	return limits.UserOf(l, x.who.keyID, x.r.Header, meta), true
}
