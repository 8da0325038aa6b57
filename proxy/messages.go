package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// exchange is one client request to /v1/messages or count_tokens and
// everything the proxy learns while serving it.
type exchange struct {
	s      *Server
	r      *http.Request
	w      http.ResponseWriter
	start  time.Time
	pol    *policy.Policy // nil: no policy applies; forwarded untouched
	tenant string
	keyID  string
	// upstreamKey is the tenant's own Anthropic key, sent in place of the
	// client's credential and scrubbed from every reply; "" if none.
	upstreamKey string
	header      http.Header // upstream request headers (beta merged), read-only once built
	lease       *bodyLease  // the client's body buffer, when pooled
	parts       [][]byte    // first upstream request body, in pieces that alias the client's
	body        []byte      // the same joined, in memory proxy mode (the loop edits it)
	info        policy.RewriteInfo
	model       string
	stream      bool
	memory      bool // memory.mode proxy: the proxy runs memory calls
	retry       retryPolicy
	wrote       bool // a memory command wrote: no retries from here on
	status      int
	calls       int
	upDur       time.Duration
	bytesIn     int64
	outN        int64
	memCmds     int
	usage       tokens.Usage
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) { s.serve(w, r, false) }

func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) { s.serve(w, r, true) }

func (s *Server) serve(w http.ResponseWriter, r *http.Request, countTokens bool) {
	x := &exchange{s: s, r: r, w: w, start: time.Now()}
	defer x.finish()
	if !x.readAndRewrite(countTokens) {
		return
	}
	switch {
	case countTokens:
		x.relayOnce()
	case x.stream:
		x.serveStream()
	default:
		x.servePlain()
	}
}

// fail answers with the API's error shape before anything else was sent.
func (x *exchange) fail(status int, typ, msg string) {
	x.status = status
	x.outN += int64(writeError(x.w, status, typ, msg))
}

// readAndRewrite reads the body, finds the tenant and applies its policy.
// It answers the client itself and returns false when the request stops here.
func (x *exchange) readAndRewrite(countTokens bool) bool {
	s, r := x.s, x.r
	if r.ContentLength > s.cfg.MaxBody {
		x.fail(http.StatusRequestEntityTooLarge, "request_too_large",
			fmt.Sprintf("request body is %d bytes; the limit is %d bytes", r.ContentLength, s.cfg.MaxBody))
		return false
	}
	body, lease, err := readBody(r, s.cfg.MaxBody)
	x.lease = lease
	x.bytesIn = int64(len(body))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			x.fail(http.StatusRequestEntityTooLarge, "request_too_large",
				fmt.Sprintf("request body is over the limit of %d bytes", s.cfg.MaxBody))
			return false
		}
		x.fail(http.StatusBadRequest, "invalid_request_error", "could not read request body: "+err.Error())
		return false
	}
	c := s.authenticate(r.Context(), r.Header)
	x.keyID, x.upstreamKey = c.keyID, c.upstreamKey
	pol, known := c.pol, c.known
	if !known && s.cfg.RequireKnownTenant {
		x.fail(http.StatusUnauthorized, "authentication_error", "the API key matches no ctxproxy tenant")
		return false
	}
	x.pol = pol
	x.header = upstreamHeader(r)
	if c.upstreamKey != "" {
		swapCredential(x.header, c.upstreamKey)
	}
	if pol != nil {
		x.tenant = pol.Tenant
		x.memory = pol.Memory.Mode == policy.MemoryProxy && !countTokens
		x.retry = retryPolicy{retries: pol.Upstream.Retries, base: pol.Upstream.RetryBaseDelay, max: pol.Upstream.RetryMaxDelay}
	}
	// A nil policy (no default.yaml) still validates the body and changes nothing.
	parts, info, err := pol.RewriteParts(body, x.header, countTokens)
	if err != nil {
		var re *policy.RequestError
		if errors.As(err, &re) {
			x.fail(re.Status, re.Type, re.Message)
			return false
		}
		x.fail(http.StatusBadRequest, "invalid_request_error", err.Error())
		return false
	}
	x.parts, x.info = parts, info
	if x.memory {
		// The memory loop builds its next requests from the whole body.
		x.body = joinParts(parts)
		if x.body, err = x.applyContinuation(r.Context(), x.body); err != nil {
			x.fail(http.StatusServiceUnavailable, "api_error", "memory store unavailable: "+err.Error())
			return false
		}
		x.parts = [][]byte{x.body}
	}
	// Rewrite read both in its validating pass; a gjson lookup of an absent
	// "stream" would walk the whole body once more.
	x.model, x.stream = info.Model, info.Stream
	return true
}

// joinParts is the body the pieces make, without a copy when there is one.
func joinParts(parts [][]byte) []byte {
	if len(parts) == 1 {
		return parts[0]
	}
	return bytes.Join(parts, nil)
}

// readBody reads at most limit bytes; Content-Length sizes the buffer once
// (a pooled one for large bodies; see bodypool.go).
func readBody(r *http.Request, limit int64) ([]byte, *bodyLease, error) {
	rd := http.MaxBytesReader(nil, r.Body, limit)
	if r.ContentLength > 0 {
		buf, lease := newBodyBuf(int(r.ContentLength))
		if _, err := io.ReadFull(rd, buf); err != nil {
			lease.release()
			return nil, nil, err
		}
		// Anything beyond the declared length is a broken client.
		var one [1]byte
		if n, _ := rd.Read(one[:]); n > 0 {
			lease.release()
			return nil, nil, errors.New("body longer than its content-length")
		}
		return buf, lease, nil
	}
	b, err := io.ReadAll(rd)
	return b, nil, err
}

// roundTrip sends body upstream (retrying per the tenant's policy while no
// memory write happened) and returns the reply with an identity body.
func (x *exchange) roundTrip(ctx context.Context, body [][]byte) (*http.Response, time.Time, error) {
	p := x.retry
	if x.wrote {
		p.retries = 0 // never repeat a loop step after a memory write
	}
	t0 := time.Now()
	resp, err := x.s.up.do(ctx, func() (*http.Request, error) {
		return x.s.up.newRequest(ctx, x.r, x.header, body, x.lease)
	}, p)
	x.calls++
	if err != nil {
		x.upDur += time.Since(t0)
		return nil, t0, err
	}
	if err := decodeBody(resp); err != nil {
		resp.Body.Close()
		x.upDur += time.Since(t0)
		return nil, t0, err
	}
	scrubReply(resp, x.upstreamKey)
	return resp, t0, nil
}

// relayOnce forwards the request and relays the reply as it is (count_tokens).
func (x *exchange) relayOnce() {
	ctx := x.r.Context()
	resp, t0, err := x.roundTrip(ctx, x.parts)
	if err != nil {
		x.upstreamError(err)
		return
	}
	defer resp.Body.Close()
	body, err := readReply(resp)
	x.upDur += time.Since(t0)
	if err != nil {
		x.upstreamError(err)
		return
	}
	x.writeReply(resp, body)
}

func (x *exchange) upstreamError(err error) {
	status, msg := upstreamFailure(x.r.Context(), err)
	if status == 0 {
		x.status = 499 // client closed the request
		return
	}
	x.s.log.Warn("upstream failed", zap.String("tenant", x.tenant), zap.Error(err))
	x.fail(status, "", msg)
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
	for k, vv := range src {
		dst[k] = append(dst[k][:0:0], vv...)
	}
	removeHopHeaders(dst)
	dst.Del("Content-Length")
}

func (x *exchange) writeReply(resp *http.Response, body []byte) {
	h := x.w.Header()
	copyReplyHeaders(h, resp.Header)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	x.status = resp.StatusCode
	x.w.WriteHeader(resp.StatusCode)
	n, _ := x.w.Write(body)
	x.outN += int64(n)
}

// record accounts one upstream call.
func (x *exchange) record(resp *http.Response, u tokens.Usage, edits []tokens.AppliedEdit) {
	x.usage.Add(u)
	rec := x.s.cfg.Recorder
	if rec == nil {
		return
	}
	rec.Record(x.r.Context(), tokens.Call{
		Time:      time.Now(),
		Tenant:    x.tenantLabel(),
		Model:     x.model,
		RequestID: resp.Header.Get("Request-Id"),
		Stream:    x.stream,
		Status:    resp.StatusCode,
		Usage:     u,
		Edits:     edits,
	})
}

func (x *exchange) tenantLabel() string {
	if x.tenant == "" {
		return "none"
	}
	return x.tenant
}

// scope is the tenant's memory namespace.
func (x *exchange) scope() memoryhook.Scope {
	return memoryhook.Scope{Tenant: x.pol.Tenant, Limits: memoryhook.Limits(x.pol.Memory.Limits)}
}

// finish writes the request's log line and metrics.
func (x *exchange) finish() {
	x.lease.release()
	d := time.Since(x.start)
	if m := x.s.cfg.Metrics; m != nil {
		m.ObserveRequest(x.tenantLabel(), x.model, x.status, x.upDur, max(d-x.upDur, 0))
	}
	if ce := x.s.log.Check(zap.InfoLevel, "request"); ce != nil {
		ce.Write(
			zap.String("tenant", x.tenantLabel()),
			zap.String("key", x.keyID),
			zap.String("path", x.r.URL.Path),
			zap.String("model", x.model),
			zap.Bool("stream", x.stream),
			zap.Int("status", x.status),
			zap.Duration("duration", d),
			zap.Duration("upstream_duration", x.upDur),
			zap.Int("upstream_calls", x.calls),
			zap.Int("memory_commands", x.memCmds),
			zap.Int64("bytes_in", x.bytesIn),
			zap.Int64("bytes_out", x.outN),
			zap.Strings("edits", x.info.Edits),
			zap.Int64("input_tokens", x.usage.InputTokens),
			zap.Int64("output_tokens", x.usage.OutputTokens),
		)
	}
}
