package proxy

import (
	"bytes"
	"io"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
)

// An upstream error reply is relayed to the client as it came: status, body and headers
// (retry-after, x-should-retry, request-id). ctxproxy reads its error.type and
// error.details.error_code only to decide about its own retry and to name the error in
// ctxproxy_errors_total (the December 2026 API reference, "New error codes a relay must pass through").

// maxErrorPeek bounds what is read of an error reply to find its code; the API's are a few
// hundred bytes.
const maxErrorPeek = 64 << 10

// retryable reports whether the proxy may retry resp: a retryable status, unless the upstream
// said x-should-retry: false or the reply is a spend limit (its code: a limit that does not lift
// in seconds). ramp_limit_exceeded and other 429s follow the usual rules. It may read the start of
// a 429's body; resp.Body still reads whole.
func retryable(resp *http.Response) bool {
	if !retryableStatus(resp.StatusCode) || strings.EqualFold(strings.TrimSpace(resp.Header.Get("X-Should-Retry")), "false") {
		return false
	}
	if resp.StatusCode != http.StatusTooManyRequests {
		return true
	}
	_, code := peekError(resp)
	return !apierr.SpendLimit(code)
}

// peekError reads the error.type and error.details.error_code of an error reply, leaving its
// body to read whole. Both are bounded labels (apierr.TypeLabel, CodeLabel), never bytes of the
// body.
func peekError(resp *http.Response) (typ, code string) {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorPeek))
	resp.Body = &peekedBody{Reader: io.MultiReader(bytes.NewReader(b), resp.Body), Closer: resp.Body}
	if enc := resp.Header.Get("Content-Encoding"); enc != "" {
		// Read a decoded copy; the reply itself goes on as it came.
		c := &http.Response{Header: http.Header{"Content-Encoding": {enc}}, Body: io.NopCloser(bytes.NewReader(b))}
		if decodeBody(c) != nil {
			return errorLabels(resp.StatusCode, nil)
		}
		b, _ = io.ReadAll(io.LimitReader(c.Body, maxErrorPeek))
	}
	return errorLabels(resp.StatusCode, b)
}

// errorLabels names an error reply of status with body by its error.type and code, as bounded
// labels; a body without a type is named by its status.
func errorLabels(status int, body []byte) (typ, code string) {
	r := gjson.GetManyBytes(body, "error.type", "error.details.error_code")
	t := r[0].Str
	if t == "" {
		t = apierr.Type(status)
	}
	return apierr.TypeLabel(t), apierr.CodeLabel(r[1].Str)
}

type peekedBody struct {
	io.Reader
	io.Closer
}
