package proxy

import (
	"errors"
	"net/http"

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
