package proxy

import (
	"net/http"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/policy"
)

// rewriteFor applies pol to a body of endpoint ep (Messages or count_tokens);
// the result is the upstream body in pieces.
func rewriteFor(ep endpoint, pol *policy.Policy, body []byte, h http.Header) ([][]byte, policy.RewriteInfo, error) {
	if len(body) < minPooledBody {
		// Built whole, in the room newBodyBuf left after the body: a small
		// body goes upstream as one *bytes.Reader (requestBody), so pieces
		// would only be joined. The client's bytes are not read again.
		out, info, err := pol.RewriteInPlace(body, h, ep == epCountTokens)
		if err != nil {
			return nil, info, err
		}
		return [][]byte{out}, info, nil
	}
	return pol.RewriteParts(body, h, ep == epCountTokens)
}

// acceptBatch applies the policy to a batch (POST /v1/messages/batches) and
// admits it against its tenant's limits as its requests. Each
// requests[].params gets the policy (policy.RewriteBatch: no memory tool in
// proxy mode, since no loop can run inside a batch); the reply is relayed
// as it is, and the batch recorded (openBatch) so its results are accounted
// when they pass through (batchreads.go).
func (x *exchange) acceptBatch(body []byte) bool {
	q := &x.req
	out, info, err := q.pol.RewriteBatch(body, q.header)
	if !x.accept([][]byte{out}, policy.RewriteInfo{}, err) {
		return false
	}
	return x.checkBatchLimits(info.Items)
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

// openBatch records a batch the upstream created: its requests' hold becomes
// the batch's (limits.Enforcer.OpenBatch) until its results pass through.
func (x *exchange) openBatch(resp *http.Response, body []byte) {
	e := x.s.cfg.Limits
	if x.req.ep != epBatchCreate || e == nil || resp.StatusCode != http.StatusOK {
		return
	}
	id := gjson.GetBytes(body, "id")
	if id.Type != gjson.String || !batchID(id.Str) {
		return
	}
	e.OpenBatch(x.r.Context(), x.req.ticket, limits.Batch{ID: strings.Clone(id.Str), Tenant: x.tenantLabel(),
		KeyID: x.req.keyID, User: x.req.user})
}
