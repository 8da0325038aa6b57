package fakeapi

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/klauspost/compress/zstd"
	"go.uber.org/zap"
)

// MaxBodyBytes is the API's request size limit for /v1/messages and count_tokens.
const MaxBodyBytes = 32 << 20

// Options tune the fake. Set them with New's options or, at run time, with
// SetOptions (or POST /_fake/options).
type Options struct {
	// EventDelay between SSE events (a Reply's own EventDelay wins).
	EventDelay time.Duration `json:"-"`
	// TextChunks: pieces per text/thinking/tool input in a stream (default 3).
	TextChunks int `json:"text_chunks"`
	// PingEvery sends a ping after every N non-ping events (besides the one
	// right after message_start); 0 means only that first ping.
	PingEvery int `json:"ping_every"`
	// Compress negotiates a content-encoding (zstd, br, gzip, in that
	// preference) from the request's Accept-Encoding for every reply.
	Compress bool `json:"compress"`
	// DenyBetas are beta names rejected even though they look like betas.
	DenyBetas []string `json:"deny_betas"`
	// Faults injects random faults (nil or Rate 0: none).
	Faults *Faults `json:"faults"`
	// RecordLimit bounds how many requests Requests keeps (the most recent);
	// 0 means the default 10000, negative means unlimited. Recorded requests
	// keep their bodies: a long soak at high rates wants a small limit.
	RecordLimit int `json:"record_limit"`
	// MaxBodyBytes is the request size limit (default MaxBodyBytes, 32 MiB).
	MaxBodyBytes int64 `json:"max_body_bytes"`
	// NoAuthCheck accepts requests without x-api-key / Authorization and
	// without anthropic-version.
	NoAuthCheck bool `json:"no_auth_check"`
	// EchoHeaders repeats the request's headers in every reply, as a careless
	// upstream might: as X-Fake-Echo-* reply headers, in every error's message
	// and in the body of other /v1/ routes. It tests that a proxy lets no
	// credential it sent upstream travel back to its client.
	EchoHeaders bool `json:"echo_headers"`
	// ThreadsRefuse is the strict threads mode: a threaded request carrying
	// any of these fields ("context_management", "thinking") is answered 400
	// thread_unsupported_request with details.unsupported listing them, as
	// the API may (unverified, the 2026 API reference's message-threads section). Empty: threads
	// take every field.
	ThreadsRefuse []string `json:"threads_refuse"`
	// CompactionBlockNeedsEdit refuses a replayed (unsigned) compaction block
	// in a request without the compact_20260112 edit, as one third party
	// reports the API does (unverified, the compaction reference on how a compaction block must come back).
	CompactionBlockNeedsEdit bool `json:"compaction_block_needs_edit"`
	// CacheOptions model the prompt cache and cache diagnostics; off by
	// default (cache.go).
	CacheOptions

	// The December 2026 API (december.go has the details).
	December
}

// Option configures New.
type Option func(*API)

// WithOptions replaces the options.
func WithOptions(o Options) Option { return func(a *API) { a.opts = o } }

// WithLogger logs every request at debug level (and problems at warn).
func WithLogger(l *zap.Logger) Option { return func(a *API) { a.log = l } }

// WithEventDelay sets Options.EventDelay.
func WithEventDelay(d time.Duration) Option { return func(a *API) { a.opts.EventDelay = d } }

// WithTextChunks sets Options.TextChunks.
func WithTextChunks(n int) Option { return func(a *API) { a.opts.TextChunks = n } }

// WithCompress sets Options.Compress.
func WithCompress(on bool) Option { return func(a *API) { a.opts.Compress = on } }

// WithDenyBetas adds beta names to reject.
func WithDenyBetas(names ...string) Option {
	return func(a *API) { a.opts.DenyBetas = append(a.opts.DenyBetas, names...) }
}

// WithFaults turns on random fault injection.
func WithFaults(f Faults) Option { return func(a *API) { a.opts.Faults = &f } }

// WithRecordLimit sets Options.RecordLimit.
func WithRecordLimit(n int) Option { return func(a *API) { a.opts.RecordLimit = n } }

// WithThreadsRefuse sets Options.ThreadsRefuse (the strict threads mode).
func WithThreadsRefuse(fields ...string) Option {
	return func(a *API) { a.opts.ThreadsRefuse = append(a.opts.ThreadsRefuse, fields...) }
}

// WithoutAuthCheck sets Options.NoAuthCheck.
func WithoutAuthCheck() Option { return func(a *API) { a.opts.NoAuthCheck = true } }

// Request is one request the fake saw.
type Request struct {
	Seq      int64  // 1-based arrival order
	ID       string // the request-id header it was answered with
	Time     time.Time
	Method   string
	Path     string
	RawQuery string
	Header   http.Header
	Body     []byte // decoded (content-encoding undone)
	// Credential is the key the request carried: x-api-key, else the
	// Authorization Bearer token ("" if none).
	Credential string

	// Filled for /v1/messages and count_tokens when the body parsed.
	Model             string
	Stream            bool
	CountTokens       bool
	Betas             []string
	Thread            string // "", "create" or "continue"
	PreviousMessageID string
	// Messages is the full conversation: for a thread continue, the stored
	// messages followed by the request's.
	Messages []json.RawMessage
	// Tools is the effective tools array (inherited from the thread when omitted).
	Tools json.RawMessage
	// AssistantTurns counts assistant messages in Messages (Script uses it).
	AssistantTurns int
	// InputTransformations is what thinking block binding did to the
	// request (dropped blocks, mismatches let through), whether or not the
	// reply reported it.
	InputTransformations []InputTransformation

	// Filled once answered.
	Status  int
	ReplyID string
	Error   *APIError // the error answered, if any
	Outcome string    // one of the Outcome constants
}

func (r *Request) clone() Request {
	c := *r
	c.Header = r.Header.Clone()
	c.Body = bytes.Clone(r.Body)
	c.Betas = append([]string(nil), r.Betas...)
	c.Messages = append([]json.RawMessage(nil), r.Messages...)
	c.InputTransformations = append([]InputTransformation(nil), r.InputTransformations...)
	if r.Error != nil {
		e := *r.Error
		c.Error = &e
	}
	return c
}

// API is the fake Messages API. It is an http.Handler; all methods are safe
// for concurrent use.
type API struct {
	log  *zap.Logger
	opts Options // guarded by mu; copied per request

	idPrefix string
	seq      atomic.Int64
	ids      atomic.Int64

	mu        sync.Mutex
	queue     []Reply
	responder func(*Request) Reply
	reqs      []*Request
	faults    *faultState

	threads threadStore
	cache   cacheStore

	table    *modelTable // Options.Models indexed; guarded by mu
	bindings bindingStore
	batches  batchStore
}

// New makes a fake API.
func New(opts ...Option) *API {
	var b [4]byte
	_, _ = rand.Read(b[:])
	a := &API{log: zap.NewNop(), idPrefix: hex.EncodeToString(b[:])}
	for _, o := range opts {
		o(a)
	}
	a.threads.init(10000)
	a.cache.init()
	a.bindings.init(maxBindings)
	a.table = newModelTable(a.opts.Models)
	a.setFaults(a.opts.Faults)
	return a
}

// SetOptions replaces the options at run time.
func (a *API) SetOptions(o Options) {
	a.mu.Lock()
	a.opts = o
	a.table = newModelTable(o.Models)
	a.mu.Unlock()
	a.setFaults(o.Faults)
}

// CurrentOptions returns the options in force.
func (a *API) CurrentOptions() Options {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.opts
}

// Enqueue appends replies to the FIFO served to POST /v1/messages.
func (a *API) Enqueue(replies ...Reply) {
	a.mu.Lock()
	a.queue = append(a.queue, replies...)
	a.mu.Unlock()
}

// Pending is the number of queued replies not yet served.
func (a *API) Pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.queue)
}

// SetResponder sets the function answering when the queue is empty (nil:
// the default reply). fn is called concurrently.
func (a *API) SetResponder(fn func(*Request) Reply) {
	a.mu.Lock()
	a.responder = fn
	a.mu.Unlock()
}

// Requests returns copies of the recorded requests, oldest first.
func (a *API) Requests() []Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	rs := a.recent()
	out := make([]Request, len(rs))
	for i, r := range rs {
		out[i] = r.clone()
	}
	return out
}

// LastRequest returns the most recent request to path ("" for any).
func (a *API) LastRequest(path string) (Request, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	rs := a.recent()
	for i := len(rs) - 1; i >= 0; i-- {
		if path == "" || rs[i].Path == path {
			return rs[i].clone(), true
		}
	}
	return Request{}, false
}

// Reset forgets queued replies, the responder, recorded requests, threads,
// batches, cache entries, diagnostics fingerprints and thinking-block
// bindings. Options and the clock stay.
func (a *API) Reset() {
	a.mu.Lock()
	a.queue = nil
	a.responder = nil
	a.reqs = nil
	a.mu.Unlock()
	a.threads.reset()
	a.cache.reset()
	a.bindings.reset()
	a.batches.mu.Lock()
	a.batches.list, a.batches.byID = nil, nil
	a.batches.mu.Unlock()
}

func (a *API) recordLimit() int {
	switch l := a.opts.RecordLimit; {
	case l == 0:
		return 10000
	case l < 0:
		return int(^uint(0) >> 1)
	default:
		return l
	}
}

// record keeps r; past twice the limit the oldest half goes at once, so
// recording stays O(1) amortised (Requests shows only the newest limit).
func (a *API) record(r *Request) {
	a.mu.Lock()
	limit := a.recordLimit()
	// len/2 rather than 2*limit: an unlimited record limit is MaxInt.
	if len(a.reqs)/2 >= limit || (limit < 1024 && len(a.reqs) >= limit) {
		keep := limit - 1
		n := copy(a.reqs, a.reqs[len(a.reqs)-keep:])
		clear(a.reqs[n:])
		a.reqs = a.reqs[:n]
	}
	a.reqs = append(a.reqs, r)
	a.mu.Unlock()
}

// recent is the newest limit requests; a.mu must be held.
func (a *API) recent() []*Request {
	if l := a.recordLimit(); len(a.reqs) > l {
		return a.reqs[len(a.reqs)-l:]
	}
	return a.reqs
}

func (a *API) finish(r *Request, status int, replyID string, e *APIError) {
	a.mu.Lock()
	r.Status, r.ReplyID, r.Error = status, replyID, e
	a.mu.Unlock()
}

// next picks the reply for a validated request.
func (a *API) next(r *Request) Reply {
	a.mu.Lock()
	if len(a.queue) > 0 {
		rep := a.queue[0]
		a.queue[0] = Reply{}
		a.queue = a.queue[1:]
		a.mu.Unlock()
		return rep
	}
	fn := a.responder
	a.mu.Unlock()
	if fn != nil {
		return fn(r)
	}
	return Reply{}
}

func (a *API) newID(prefix string) string {
	return prefix + a.idPrefix + strconv.FormatInt(a.ids.Add(1), 10)
}

// ServeHTTP routes /v1/messages, /v1/messages/count_tokens, batch creation, any other /v1/
// path, and the /_fake/ control endpoints.
func (a *API) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	reqID := a.newID("req_fake_")
	w.Header().Set("request-id", reqID)
	if a.echoing() {
		echoHeaders(w.Header(), req.Header)
	}
	p := req.URL.Path
	switch {
	case strings.HasPrefix(p, "/_fake/"):
		a.serveControl(w, req)
	case p == "/v1/messages" || p == "/v1/messages/count_tokens":
		a.serveMessages(w, req, reqID)
	case p == "/v1/messages/batches" && req.Method == http.MethodPost:
		a.serveBatchCreate(w, req, reqID)
	case strings.HasPrefix(p, "/v1/messages/batches") && a.serveBatch(w, req, reqID):
	case strings.HasPrefix(p, "/v1/"):
		a.servePassthrough(w, req, reqID)
	default:
		writeError(w, http.StatusNotFound, &APIError{Type: "not_found_error", Message: "Not found"}, reqID)
	}
}

// unread answers a request whose body never arrived whole, unrecorded.
func unread(w http.ResponseWriter, st int, e *APIError, reqID string) bool {
	if e == nil || !e.unread {
		return false
	}
	writeError(w, st, e, reqID)
	return true
}

func (a *API) readBody(req *http.Request) ([]byte, int, *APIError) {
	a.mu.Lock()
	limit := a.opts.MaxBodyBytes
	a.mu.Unlock()
	if limit <= 0 {
		limit = MaxBodyBytes
	}
	var buf bytes.Buffer
	if req.ContentLength > limit {
		return nil, 413, &APIError{Type: "request_too_large", Message: "Request exceeds the maximum allowed number of bytes."}
	}
	if req.ContentLength > 0 {
		// ReadFrom wants MinRead bytes free before each read, the one that
		// finds EOF too: without them a body of exactly ContentLength bytes
		// would be copied into a buffer of twice its size.
		buf.Grow(int(req.ContentLength) + bytes.MinRead)
	}
	n, err := buf.ReadFrom(io.LimitReader(req.Body, limit+1))
	if err != nil {
		return nil, 400, &APIError{Type: "invalid_request_error", Message: "could not read request body: " + err.Error(), unread: true}
	}
	if n > limit {
		return nil, 413, &APIError{Type: "request_too_large", Message: "Request exceeds the maximum allowed number of bytes."}
	}
	body := buf.Bytes()
	switch enc := strings.ToLower(strings.TrimSpace(req.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	default:
		dec, err := decodeBody(enc, body, limit)
		if err != nil {
			code := CodeEncodingInvalid
			switch {
			case errors.Is(err, errUnsupportedEncoding):
				code = CodeEncodingUnsupported
			case errors.Is(err, errDecodedTooLarge):
				code = CodeTooLargeAfterDecoding
			}
			st, e, _ := codedError(code)
			e.Message = fmt.Sprintf("could not decode %s request body: %v", enc, err)
			return nil, st, e
		}
		body = dec
	}
	return body, 0, nil
}

var (
	errUnsupportedEncoding = errors.New("unsupported content-encoding")
	errDecodedTooLarge     = errors.New("decoded body too large")
)

func decodeBody(enc string, body []byte, limit int64) ([]byte, error) {
	var r io.Reader
	switch enc {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		r = zr
	case "br":
		r = brotli.NewReader(bytes.NewReader(body))
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		r = zr
	default:
		return nil, errUnsupportedEncoding
	}
	out, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(out)) > limit {
		return nil, errDecodedTooLarge
	}
	return out, nil
}

func newRequest(a *API, req *http.Request, body []byte) *Request {
	return &Request{
		Seq:        a.seq.Add(1),
		Time:       time.Now(),
		Method:     req.Method,
		Path:       req.URL.Path,
		RawQuery:   req.URL.RawQuery,
		Header:     req.Header.Clone(),
		Body:       body,
		Credential: credential(req.Header),
	}
}

// writeError writes the API's error shape.
func writeError(w http.ResponseWriter, status int, e *APIError, reqID string) {
	w.Header().Set("Content-Type", "application/json")
	body := errorBody(e, reqID)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func errorBody(e *APIError, reqID string) []byte {
	b := make([]byte, 0, 128+len(e.Message))
	b = append(b, `{"type":"error","error":{"type":`...)
	b = jsonstr.Append(b, e.Type)
	b = append(b, `,"message":`...)
	b = jsonstr.Append(b, e.Message)
	if len(e.Details) > 0 {
		b = append(b, `,"details":`...)
		b = append(b, e.Details...)
	}
	b = append(b, '}')
	if reqID != "" {
		b = append(b, `,"request_id":`...)
		b = jsonstr.Append(b, reqID)
	}
	return append(b, '}')
}

// echoing reports Options.EchoHeaders.
func (a *API) echoing() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.opts.EchoHeaders
}

func (a *API) servePassthrough(w http.ResponseWriter, req *http.Request, reqID string) {
	body, st, e := a.readBody(req)
	if unread(w, st, e, reqID) {
		return
	}
	r := newRequest(a, req, body)
	r.ID = reqID
	a.record(r)
	if e != nil {
		a.finish(r, st, "", e)
		if a.echoing() {
			e = withEcho(e, req.Header)
		}
		writeError(w, st, e, reqID)
		return
	}
	if a.serveModels(w, req, r) {
		return
	}
	b := []byte(`{"type":"fake_passthrough","method":`)
	b = jsonstr.Append(b, req.Method)
	b = append(b, `,"path":`...)
	b = jsonstr.Append(b, req.URL.Path)
	b = append(b, `,"query":`...)
	b = jsonstr.Append(b, req.URL.RawQuery)
	b = append(b, `,"body_bytes":`...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	if a.echoing() {
		b = append(b, `,"headers":`...)
		b = jsonstr.Append(b, headerText(req.Header))
	}
	a.finish(r, 200, "", nil)
	a.writeBody(w, req, "", http.StatusOK, append(b, '}'))
}

// writeBody writes a complete JSON reply, compressed if asked.
func (a *API) writeBody(w http.ResponseWriter, req *http.Request, forced string, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	enc := a.pickEncoding(req, forced)
	if enc != "" {
		zb, err := compress(enc, body)
		if err == nil {
			body = zb
			h.Set("Content-Encoding", enc)
			h.Add("Vary", "Accept-Encoding")
		} else {
			a.log.Warn("fakeapi: compress reply", zap.String("encoding", enc), zap.Error(err))
		}
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// jsonIndent is for the control endpoints' human-readable output.
func jsonIndent(v any) []byte {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return []byte(`{"error":` + string(mustJSON(err.Error())) + `}`)
	}
	return append(b, '\n')
}
