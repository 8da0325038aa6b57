package proxy

import (
	"net/http"

	"github.com/ctxproxy/ctxproxy/policy"
)

// rewriteFor applies pol to a body of endpoint ep; the result is the
// upstream body in pieces. A batch (POST /v1/messages/batches) gets the
// policy in each requests[].params (policy.RewriteBatch: no memory tool in
// proxy mode, since no loop can run inside a batch); its reply is relayed
// as it is.
func rewriteFor(ep endpoint, pol *policy.Policy, body []byte, h http.Header) ([][]byte, policy.RewriteInfo, error) {
	if ep != epBatchCreate {
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
	out, _, err := pol.RewriteBatch(body, h)
	if err != nil {
		return nil, policy.RewriteInfo{}, err
	}
	return [][]byte{out}, policy.RewriteInfo{}, nil
}
