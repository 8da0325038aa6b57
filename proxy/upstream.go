package proxy

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/upstreamreq"
	"github.com/ctxproxy/ctxproxy/tracing"
)

// roundTrip sends body upstream on the client's route, retrying per p, and
// returns the reply with an identity body. t0 is when it was sent: the
// call's upstream time runs until its reply was read (accounting.waited).
// When the upstream refuses an edit the tenant's policy added, body goes once
// more without it (editrefused.go); resent is then the body the reply
// answers, nil otherwise.
func (x *exchange) roundTrip(ctx context.Context, body [][]byte, p retryPolicy) (resp *http.Response, t0 time.Time, resent [][]byte, err error) {
	resp, t0, err = x.callUpstream(ctx, x.r, body, p)
	if err != nil {
		return nil, t0, nil, err
	}
	if edit, ok := x.errorRefusesEdit(resp); ok {
		return x.resendWithout(ctx, edit, resp, t0, body, p)
	}
	return resp, t0, nil, nil
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
	x.acct.sending(t0)
	x.markModelUse(route, t0)
	ctx = x.startCallSpan(ctx, route.URL.Path, body)
	var lead *leadUpload
	var lease *bodyLease
	if route == x.r {
		lead, lease = x.in.lead.take(), x.in.lease
	}
	if lead != nil {
		t0 = lead.t0
	}
	resp, err = x.s.up.do(ctx, func(attempt int) (*http.Response, error) {
		if attempt == 0 && lead != nil {
			if resp, err, ok := lead.result(ctx); ok {
				return resp, err
			}
			t0 = time.Now() // the upstream saw no whole request: send it again, whole
		}
		req := x.s.up.newRequest(ctx, route, x.req.header, body, lease)
		x.injectTrace(ctx, req)
		return x.s.up.send(req)
	}, p)
	x.acct.calls++ // callUpstream is its one writer
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
	} else if x.who.upstreamKey == "" && x.who.pol != nil {
		// A pass-through tenant's models are read with the first credential
		// the API took from it (read later, never on this path).
		x.s.cfg.Models.Offer(x.who.pol.Tenant, x.req.header)
	}
	scrubReply(resp, x.who.upstreamKey)
	return resp, t0, nil
}

// markModelUse records the call as its tenant's use of its model, for the models it uses
// that retire. A use is a call a report counts (capabilities.Cache.Used): never a count_tokens
// call, the client's or a compaction measure's (countTokensRoute), which bills nothing and
// which the ledger leaves out when a restart reads the uses back (tokens.ModelUseLedger).
func (x *exchange) markModelUse(route *http.Request, at time.Time) {
	if x.who.pol == nil || route != x.r || x.ep == epCountTokens {
		return
	}
	x.s.cfg.Models.Used(x.who.pol.Tenant, x.req.info.Model, at)
}

// sending notes a call begun at t0 (accounting's one writer of roundDur; it lives here, by
// the one call that makes it): after a reply of the same request (a memory round's next
// call), the time since that reply is the round's own.
func (a *accounting) sending(t0 time.Time) {
	if !a.replied.IsZero() {
		a.roundDur += t0.Sub(a.replied)
	}
}

// take hands the upload that went ahead (lead.go) to the request's first upstream call, once;
// nil after. It lives here, by the one call that takes it.
func (u *leadUpload) take() *leadUpload {
	if u == nil || u.taken {
		return nil
	}
	u.taken = true
	return u
}

// decodeBody wraps resp.Body so it reads identity bytes, and fixes the
// headers to match.
func decodeBody(resp *http.Response) error {
	enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding")))
	if enc == "" || enc == "identity" {
		return nil
	}
	var r io.Reader
	var closer func()
	switch enc {
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return fmt.Errorf("decode gzip reply: %w", err)
		}
		r = zr
	case "deflate":
		fr := flate.NewReader(resp.Body)
		r, closer = fr, func() { fr.Close() }
	case "br":
		r = brotli.NewReader(resp.Body)
	case "zstd":
		zr, err := zstd.NewReader(resp.Body, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return fmt.Errorf("decode zstd reply: %w", err)
		}
		r, closer = zr, zr.Close
	default:
		return fmt.Errorf("upstream sent content-encoding %q the proxy cannot read", enc)
	}
	resp.Body = &decodedBody{Reader: r, body: resp.Body, closer: closer}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	resp.Uncompressed = true
	return nil
}

type decodedBody struct {
	io.Reader
	body   io.ReadCloser
	closer func()
}

func (d *decodedBody) Close() error {
	if d.closer != nil {
		d.closer()
	}
	return d.body.Close()
}

// upstream sends requests to the Messages API.
type upstream struct {
	base    *url.URL
	client  *http.Client
	targets sync.Map // client path -> *url.URL upstream, without a query; shared, never written
	// (bounded: classify gives every policy route its one canonical path)
}

// target is the upstream URL for a client request URL. The few paths the
// proxy serves each get one URL, shared by every request to it (the
// transport only reads it); a query makes a copy.
func (u *upstream) target(in *url.URL) *url.URL {
	t, ok := u.targets.Load(in.Path)
	if !ok {
		t, _ = u.targets.LoadOrStore(in.Path, upstreamreq.URL(u.base, in.Path))
	}
	target := t.(*url.URL)
	if in.RawQuery != "" {
		q := *target
		q.RawQuery = in.RawQuery
		return &q
	}
	return target
}

// newRequest builds the upstream request for in's path and query, with h
// (from upstreamHeader) and the body in pieces (sent as they are, not
// joined). lease, when the pieces alias a pooled buffer, tracks the readers.
func (u *upstream) newRequest(ctx context.Context, in *http.Request, h http.Header, body [][]byte, lease *bodyLease) *http.Request {
	var n int64
	for _, p := range body {
		n += int64(len(p))
	}
	return upstreamreq.New(ctx, in.Method, u.target(in.URL), h, n, func() (io.ReadCloser, error) {
		return readCloser(requestBody(body, n, lease)), nil
	})
}

// readCloser is r as a ReadCloser, wrapped only when it is not one (net/http
// knows io.NopCloser over an in-memory reader).
func readCloser(r io.Reader) io.ReadCloser {
	if rc, ok := r.(io.ReadCloser); ok {
		return rc
	}
	return io.NopCloser(r)
}

// requestBody is a reader over the n bytes of parts. A small unpooled body
// is one *bytes.Reader: net/http writes the headers and a body it knows is in
// memory together, where any other reader costs a write(2) of the headers
// alone first. A pooled body keeps its leased reader (body.go), which
// must see EOF before the buffer can go back.
func requestBody(parts [][]byte, n int64, lease *bodyLease) io.Reader {
	if lease == nil && n <= minPooledBody {
		return bytes.NewReader(joinParts(parts))
	}
	return lease.reader(parts)
}

// retryPolicy is one tenant's opt-in upstream retry.
type retryPolicy struct {
	retries int
	base    time.Duration
	max     time.Duration
}

// retryableStatus is what the proxy may retry: rate limits, overload and
// transient server errors, as the official SDKs do.
func retryableStatus(code int) bool {
	switch code {
	case http.StatusTooManyRequests, 529, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable:
		return true
	}
	return false
}

// retryDelay honours retry-after-ms / retry-after, else exponential backoff
// with full jitter.
func (p retryPolicy) delay(attempt int, h http.Header) time.Duration {
	if h != nil {
		if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms >= 0 {
			return min(time.Duration(ms*float64(time.Millisecond)), 60*time.Second)
		}
		if v := h.Get("Retry-After"); v != "" {
			if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
				return min(time.Duration(s*float64(time.Second)), 60*time.Second)
			}
			if t, err := http.ParseTime(v); err == nil {
				return min(max(time.Until(t), 0), 60*time.Second)
			}
		}
	}
	d := p.base << attempt
	if d <= 0 || d > p.max {
		d = p.max
	}
	return d/2 + rand.N(d/2+1)
}

// errUpstreamTimeout marks a reply whose headers did not come in time.
var errUpstreamTimeout = errors.New("upstream timed out")

// do makes attempts with send, retrying per p while the reply is retryable. The caller
// guarantees no byte has reached the client yet.
func (u *upstream) do(ctx context.Context, send func(attempt int) (*http.Response, error), p retryPolicy) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		resp, err := send(attempt)
		last := attempt >= p.retries
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if isTimeout(err) {
				err = fmt.Errorf("%w: %w", errUpstreamTimeout, err)
			}
			if last {
				return nil, err
			}
			if !sleepCtx(ctx, p.delay(attempt, nil)) {
				return nil, ctx.Err()
			}
			continue
		}
		if last || !retryable(resp) {
			return resp, nil
		}
		d := p.delay(attempt, resp.Header)
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if !sleepCtx(ctx, d) {
			return nil, ctx.Err()
		}
	}
}

// send is http.Client.Do without what the proxy never uses (redirects, a
// cookie jar, a client timeout, credentials in the URL), whose copies of the
// header and URL were a tenth of a request's allocations. Errors are
// *url.Error, as Client.Do's.
func (u *upstream) send(req *http.Request) (*http.Response, error) {
	if req.URL.User != nil || u.client.Jar != nil || u.client.Timeout != 0 {
		return u.client.Do(req)
	}
	rt := u.client.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	resp, err := rt.RoundTrip(req)
	if err == nil && resp == nil {
		err = fmt.Errorf("http: RoundTripper implementation (%T) returned a nil *Response with a nil error", rt)
	}
	if err != nil {
		return nil, &url.Error{Op: req.Method[:1] + strings.ToLower(req.Method[1:]), URL: req.URL.String(), Err: err}
	}
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	return resp, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// upstreamFailure maps a failed upstream call to the status the client
// gets; 0 means the client itself cancelled.
func upstreamFailure(ctx context.Context, err error) (int, string) {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return 0, ""
	}
	if errors.Is(err, errUpstreamTimeout) || isTimeout(err) || errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout, "upstream timed out"
	}
	return http.StatusBadGateway, "upstream unreachable: " + redactURLError(err)
}

// redactURLError keeps the cause but not the whole URL error chain noise.
func redactURLError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// joinParts is the body the pieces make, without a copy when there is one.
func joinParts(parts [][]byte) []byte {
	if len(parts) == 1 {
		return parts[0]
	}
	return bytes.Join(parts, nil)
}

// startCallSpan starts the client span of one upstream call to path, which
// sends body.
func (x *exchange) startCallSpan(ctx context.Context, path string, body [][]byte) context.Context {
	t := x.s.cfg.Tracer
	if !t.Enabled() {
		return ctx
	}
	x.spans.call.End() // a call whose reply was never accounted
	q, pol := &x.req, x.who.pol
	req := tracing.ChatRequest{
		Model:     q.info.Model,
		Stream:    q.info.Stream,
		Tenant:    x.who.label,
		Edits:     q.info.Edits,
		Round:     x.loop.round,
		MaxTokens: q.info.MaxTokens,
	}
	if path == pathCountTokens {
		req.Operation = "count_tokens"
	}
	if pol != nil {
		req.PolicyMode = string(pol.ContextManagement.Mode)
	}
	ctx, x.spans.call = t.StartChat(ctx, req)
	content := pol != nil && pol.Tracing.Content
	if (q.info.Threaded || content) && x.spans.call.Recording() {
		r := gjson.GetManyBytes(joinParts(body), "thread.previous_message_id", "messages")
		messages := ""
		if content {
			messages = r[1].Raw
		}
		x.spans.call.SetInput(r[0].Str, messages)
	}
	return ctx
}

// injectTrace gives the upstream request the call span as its parent. The
// header is the exchange's own copy of the client's (upstreamreq.Forwarded),
// which its calls use one at a time, each writing its own traceparent over
// the last; no copy is made for it. (Every sampler OTEL_TRACES_SAMPLER names
// decides by the trace, so the calls of one request are all sampled or all
// not: a call never sends an earlier call's traceparent. One not sampled
// sends the client's, if it came with one.)
func (x *exchange) injectTrace(ctx context.Context, req *http.Request) {
	x.s.cfg.Tracer.Inject(ctx, req.Header)
}

// failCallSpan ends the call's span as failed: no reply, or an error reply.
func (x *exchange) failCallSpan(status int, cause string) {
	sp := x.spans.call
	x.spans.call = tracing.Span{}
	if status != 0 {
		sp.EndChat(tracing.ChatResponse{Status: status})
		return
	}
	sp.Fail(cause, "upstream call failed")
	sp.End()
}
