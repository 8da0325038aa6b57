package proxy

import (
	"errors"
	"net/http"

	"github.com/ctxproxy/ctxproxy/policy"
)

// rewriteFor applies pol to a Messages or count_tokens body;
// the result is the upstream body in pieces.
func rewriteFor(pol *policy.Policy, body []byte, h http.Header) ([][]byte, policy.RewriteInfo, error) {
	if len(body) < minPooledBody {
		// Built whole, in the room newBodyBuf left after the body: a small
		// body goes upstream as one *bytes.Reader (requestBody), so pieces
		// would only be joined. The client's bytes are not read again.
		out, info, err := pol.RewriteInPlace(body, h)
		if err != nil {
			return nil, info, err
		}
		return [][]byte{out}, info, nil
	}
	return pol.RewriteParts(body, h)
}

// request is the upstream request the tenant's policy made of the client's.
type request struct {
	header http.Header        // the upstream request's headers: the tenant's credential, betas merged
	parts  [][]byte           // its body, in pieces that alias the client's
	info   policy.RewriteInfo // what the rewrite read and did (model, stream, edits; zero for a batch)
	items  []policy.BatchItem // a batch's requests, for the limits
}

// rewrite applies the tenant's policy to the client's body: a Messages or
// count_tokens request (rewriteFor), or a batch, each of whose
// requests[].params gets the policy (policy.RewriteBatch: no memory tool in
// proxy mode, since no loop can run inside a batch; the reply is relayed as
// it is, and the batch recorded, openBatch, so its results are accounted
// when they pass through, batchreads.go). A nil policy (no default.yaml)
// still validates the body and changes nothing. It answers a refused body
// itself.
func (x *exchange) rewrite(body []byte) (request, bool) {
	q := request{header: x.upstreamHeader()}
	if x.ep == epBatchCreate {
		out, info, err := x.who.pol.RewriteBatch(body, q.header)
		q.items = info.Items
		return q, x.accept(&q, [][]byte{out}, policy.RewriteInfo{}, err)
	}
	x.openConversation(body) // before the rewrite, which may reuse body's buffer
	parts, info, err := rewriteFor(x.who.pol, body, q.header)
	if !x.accept(&q, parts, info, err) {
		return q, false
	}
	x.askDiagnostics(&q)
	return q, true
}

// upstreamHeader is the client's headers as they go upstream, with the
// tenant's own key in place of the client's credential when it has one.
func (x *exchange) upstreamHeader() http.Header {
	h := upstreamHeader(x.r)
	if x.who.upstreamKey != "" {
		swapCredential(h, x.who.upstreamKey)
	}
	return h
}

// accept takes the rewrite's result into q, or answers the client its error.
// The rewrite read model and stream in its validating pass (info): a gjson
// lookup of an absent "stream" would walk the whole body once more.
func (x *exchange) accept(q *request, parts [][]byte, info policy.RewriteInfo, err error) bool {
	if err != nil {
		var re *policy.RequestError
		if errors.As(err, &re) {
			x.refuse(re)
			return false
		}
		x.fail(http.StatusBadRequest, "invalid_request_error", err.Error())
		return false
	}
	q.parts, q.info = parts, info
	return true
}
