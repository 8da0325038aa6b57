package proxy

import (
	"io"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"github.com/ctxproxy/ctxproxy/internal/upstreamreq"
	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/policy"
)

// clientReply is what the client got. Only the writers in this file change
// it: an error answer, a relayed reply, or the stream (streamWriter).
type clientReply struct {
	status int
	n      int64 // bytes written
	// errType and errCode name an error answer (status 400 and up) by its error.type and
	// error.details.error_code, as bounded labels (errorLabels); "" otherwise.
	errType, errCode string
}

// fail answers with the API's error shape before anything else was sent.
func (x *exchange) fail(status int, typ, msg string) {
	x.out.status = status
	x.out.errType, x.out.errCode = errorLabels(status, nil)
	if typ != "" {
		x.out.errType = apierr.TypeLabel(typ)
	}
	x.ticket.Header(x.w.Header()) // the answer is the proxy's own: no upstream headers to hide
	x.out.n += int64(apierr.Write(x.w, status, typ, msg))
}

// refuse answers a request the policy refused, in the API's shape with its
// details (a thread_unsupported_request carries error.details as the API's).
func (x *exchange) refuse(re *policy.RequestError) {
	if re.Details == "" {
		x.fail(re.Status, re.Type, re.Message)
		return
	}
	x.out.status = re.Status
	x.out.errType, x.out.errCode = errorLabels(re.Status, re.JSON())
	x.out.n += int64(apierr.Write(x.w, re.Status, re.Type, re.Message, apierr.Field{Name: "details", Raw: re.Details}))
}

// upstreamError answers a failed upstream call in the API's shape, or
// notes that the client itself went away.
func (x *exchange) upstreamError(err error) {
	status, msg := upstreamFailure(x.r.Context(), err)
	if status == 0 {
		x.out.status = 499 // client closed the request
		return
	}
	x.s.log.Warn("upstream failed", zap.String("tenant", x.who.tenant), zap.Error(err))
	x.fail(status, "", msg)
}

// writeReply relays a whole reply with the upstream's status and headers.
func (x *exchange) writeReply(resp *http.Response, body []byte) {
	h := x.w.Header()
	x.relayHeaders(h, resp)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	x.out.status = resp.StatusCode
	if resp.StatusCode >= 400 {
		x.out.errType, x.out.errCode = errorLabels(resp.StatusCode, body)
	}
	x.keepReply(resp.StatusCode, body)
	x.w.WriteHeader(resp.StatusCode)
	n, _ := x.w.Write(body)
	x.out.n += int64(n)
}

// relayHeaders puts the upstream reply's end-to-end headers on the client's reply h, and for a
// capped tenant its cap (anthropic-ratelimit-unified-*) in place of the upstream's
// organisation-wide ratelimit headers, on every route. Those are taken off the upstream's reply
// before the copy (as the pass-through does), not copied and then deleted: the client's header
// map, which net/http clones when the reply starts, never holds them.
func (x *exchange) relayHeaders(h http.Header, resp *http.Response) {
	limits.HideUpstreamRatelimit(x.who.pol, resp.Header)
	copyReplyHeaders(h, resp.Header)
	x.ticket.Header(h)
}

// readReply reads a whole non-streamed reply, sized once when its length
// is known.
func readReply(resp *http.Response) ([]byte, error) {
	if n := resp.ContentLength; n >= 0 && n <= maxReplyBytes {
		buf := make([]byte, n)
		_, err := io.ReadFull(resp.Body, buf)
		return buf, err
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes))
}

// copyReplyHeaders copies the upstream's end-to-end headers (request-id,
// retry-after, anthropic-ratelimit-*) to the client.
func copyReplyHeaders(dst, src http.Header) {
	// The values are shared, not copied: the upstream reply's header is
	// this request's own and only read from here on.
	for k, vv := range src {
		dst[k] = vv
	}
	upstreamreq.RemoveHop(dst)
	dst.Del("Content-Length")
}

// startStream sends the status and the first reply's headers.
func (x *exchange) startStream(sw *streamWriter, resp *http.Response) {
	x.relayHeaders(sw.w.Header(), resp)
	x.out.status = http.StatusOK
	sw.w.WriteHeader(http.StatusOK)
	sw.started = true
	sw.send(nil)
}
