// Package shadow is the policy lab: it measures a tenant's candidate context-management
// policies (the policy's shadow block) on a sample of its live Messages requests. For a sampled
// request, once its first upstream call has answered 200 and been accounted, the lab asks
// count_tokens what each candidate's rewrite of the client's request would have read (the API
// applies the edits and answers input_tokens after them and
// context_management.original_input_tokens before them), and writes one ledger line per
// candidate with the estimate package tokens defines (tokens.Price.ShadowEstimate).
//
// The lab never delays a client or uses its connection: its calls run in the background on a
// connection pool of their own, with the credential the real request went upstream with. They
// count against nothing (no cap, per-minute limit or request metric), are dropped beyond a
// candidate's max_per_minute or the global bound on calls in flight (each counted in
// ctxproxy_shadow_dropped_total), and never retry; a failure is logged and counted in
// ctxproxy_shadow_errors_total, never seen by a client.
package shadow

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/internal/upstreamreq"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// Defaults of a Config's zero fields.
const (
	DefaultMaxInFlight = 32
	DefaultTimeout     = 30 * time.Second
	maxReply           = 1 << 20
)

// Config is what a Lab needs.
type Config struct {
	Upstream  *url.URL          // the API's base URL
	Transport http.RoundTripper // the lab's own connections; nil: http.DefaultTransport
	Recorder  *tokens.Recorder  // the ledger the measurements go to; nil: the lab measures nothing
	Metrics   *tokens.Metrics   // nil: no metrics
	Log       *zap.Logger
	// Now is the clock of the per-minute bound (a test's manual clock); nil: time.Now.
	Now         func() time.Time
	MaxInFlight int           // lab calls in flight at once, over all tenants; default DefaultMaxInFlight
	Timeout     time.Duration // bound on one count_tokens call; default DefaultTimeout
	// Draw returns a number in [0, 1) for sampling; nil: math/rand/v2.
	Draw func() float64
}

// Lab measures candidates. A nil *Lab samples nothing. Safe for concurrent use.
type Lab struct {
	cfg      Config
	client   *http.Client
	target   *url.URL
	inFlight chan struct{}
	wg       sync.WaitGroup
	ctx      context.Context
	cancel   context.CancelFunc

	mu      sync.Mutex
	minutes map[windowKey]*window
	points  points
	closed  bool
}

type windowKey struct{ tenant, candidate string }

// window counts a candidate's calls in one minute of the clock.
type window struct {
	minute int64
	n      int
}

// New builds a Lab.
func New(cfg Config) *Lab {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Draw == nil {
		cfg.Draw = rand.Float64
	}
	rt := cfg.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Lab{
		cfg:      cfg,
		client:   &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		target:   upstreamreq.URL(cfg.Upstream, "/v1/messages/count_tokens"),
		inFlight: make(chan struct{}, cfg.MaxInFlight),
		ctx:      ctx,
		cancel:   cancel,
		minutes:  map[windowKey]*window{},
		points:   newPoints(),
	}
}

// Sample reports whether a Messages request of pol's tenant is measured: pol has candidates and
// the draw falls within its sample. Cheap: no lock, no allocation.
func (l *Lab) Sample(pol *policy.Policy) bool {
	if l == nil || l.cfg.Recorder == nil || pol == nil || pol.Shadow == nil {
		return false
	}
	s := pol.Shadow.Sample
	return s >= 1 || l.cfg.Draw() < s
}

// Request is a sampled request, as the lab needs it once its first call is accounted.
type Request struct {
	Policy *policy.Policy
	Body   []byte      // the client's body as it came; the lab owns it
	Header http.Header // the real call's upstream headers (upstreamreq.Forwarded, its credential set); the lab owns them
}

// Shadowed is the shadowed call: its priced ledger line and its conversation.
type Shadowed struct {
	Call tokens.Call
	// Conversation is the ledger's conversation of the call ("" when not tracked); PrevCached
	// is P, the conversation's previous call's cache read + creation (0 when unknown).
	Conversation string
	PrevCached   int64
}

// Measure starts a count_tokens call per candidate of req's policy, in the background, each
// within its max_per_minute and the bound on calls in flight (else counted as dropped).
func (l *Lab) Measure(req *Request, sc Shadowed) {
	if l == nil || req == nil || req.Policy == nil || req.Policy.Shadow == nil {
		return
	}
	sh := req.Policy.Shadow
	tenant := req.Policy.Tenant
	for i := range sh.Candidates {
		c := &sh.Candidates[i]
		if !l.admit(tenant, c.Name, sh.MaxPerMinute) {
			if m := l.cfg.Metrics; m != nil {
				m.ShadowDropped(tenant, c.Name)
			}
			continue
		}
		pt := l.points.open(tenant, sc.Conversation, c.Name) // in the order of the conversation's calls
		go func() {
			defer l.done()
			if err := l.measure(req, c, &sc, pt); err != nil {
				pt.settle(l.ctx, 0, false)
				if m := l.cfg.Metrics; m != nil {
					m.ShadowError(tenant, c.Name)
				}
				l.cfg.Log.Warn("shadow measurement failed", zap.String("tenant", tenant), zap.String("candidate", c.Name), zap.Error(err))
			}
		}()
	}
}

// admit takes a place for one call of the candidate: a slot in flight and one of its minute's
// max_per_minute. false: the call is not made.
func (l *Lab) admit(tenant, candidate string, perMinute int) bool {
	minute := l.cfg.Now().Unix() / 60
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	k := windowKey{tenant, candidate}
	w := l.minutes[k]
	if w == nil {
		w = &window{}
		l.minutes[k] = w
	}
	if w.minute != minute {
		w.minute, w.n = minute, 0
	}
	if w.n >= perMinute {
		return false
	}
	select {
	case l.inFlight <- struct{}{}:
	default:
		return false
	}
	w.n++
	l.wg.Add(1)
	return true
}

func (l *Lab) done() {
	<-l.inFlight
	l.wg.Done()
}

// Close stops taking measurements and waits for those in flight, until ctx is done (then it
// cancels them).
func (l *Lab) Close(ctx context.Context) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	finished := make(chan struct{})
	go func() { l.wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done():
		l.cancel()
		<-finished
	}
	l.cancel()
}

// measure makes one candidate's count_tokens call and records its line.
// It settles pt only when it measured (its caller settles a failure).
func (l *Lab) measure(req *Request, c *policy.Candidate, sc *Shadowed, pt *point) error {
	h := req.Header.Clone()
	// The count_tokens request first, then the candidate's rewrite of it, in place: the same
	// rules as on the Messages request (count_tokens gets the same edits and tools), one copy
	// of a transcript instead of two.
	body, _, err := c.Policy.RewriteInPlace(CountBody(req.Body), h)
	if err != nil {
		return fmt.Errorf("rewrite for the candidate: %w", err)
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.Timeout)
	defer cancel()
	h.Del("Content-Length")
	h.Del("Content-Encoding")
	h.Set("Content-Type", "application/json")
	h.Set("Accept-Encoding", "identity")
	// Never retried, not even by the transport on a dead keep-alive connection (which it does
	// for a request with an idempotency key).
	h.Del("Idempotency-Key")
	h.Del("X-Idempotency-Key")
	resp, err := l.client.Do(upstreamreq.New(ctx, http.MethodPost, l.target, h, int64(len(body)), func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(body)), nil
	}))
	if err != nil {
		return fmt.Errorf("count_tokens: %w", redact(err))
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		return fmt.Errorf("count_tokens reply: %w", err)
	}
	reqID := resp.Header.Get("Request-Id")
	if resp.StatusCode != http.StatusOK {
		// Not the body: an upstream that echoes requests could quote a key in it.
		return fmt.Errorf("count_tokens answered %d %s (request-id %q)", resp.StatusCode, http.StatusText(resp.StatusCode), reqID)
	}
	ct := tokens.ParseCountTokens(reply)
	orig := ct.InputTokens
	if ct.HasOriginal {
		orig = ct.OriginalInputTokens
	}
	s := &tokens.Shadow{Name: c.Name, Shadows: sc.Call.RequestID, InputTokens: ct.InputTokens, OriginalInputTokens: orig,
		CompactNotMeasured: c.Compacts(), Actual: tokens.ShadowedCallOf(&sc.Call), PrevCached: sc.PrevCached}
	s.NewClearingPoint = pt.settle(ctx, s.ClearedTokens(), true)
	line := tokens.Call{Tenant: sc.Call.Tenant, KeyID: sc.Call.KeyID, User: sc.Call.User, Model: sc.Call.Model,
		RequestID: strings.Clone(reqID), Status: resp.StatusCode, Conversation: sc.Conversation, Shadow: s}
	l.cfg.Recorder.Record(ctx, line)
	return nil
}

// redact keeps an error's cause without its URL.
func redact(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// countFields are the members of a Messages request count_tokens takes.
var countFields = map[string]bool{"model": true, "messages": true, "system": true, "tools": true,
	"tool_choice": true, "thinking": true, "context_management": true, "mcp_servers": true}

// countRoom is the spare capacity CountBody leaves for a rewrite in place (edits, the memory
// tool).
const countRoom = 1024

// CountBody is the count_tokens request of a Messages request body: its members count_tokens
// takes, as they are.
func CountBody(body []byte) []byte {
	out := make([]byte, 0, len(body)+countRoom)
	out = append(out, '{')
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
		if !countFields[k.Str] {
			return true
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, k.Raw...)
		out = append(out, ':')
		out = append(out, v.Raw...)
		return true
	})
	return append(out, '}')
}
