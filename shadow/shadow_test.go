package shadow

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

const labPolicy = `tenant: lab
context_management:
  mode: enforce
  clear_tool_uses: { trigger: { type: input_tokens, value: 100000 } }
shadow:
  sample: 1
  max_per_minute: %d
  candidates:
    - name: keep-5
      context_management:
        mode: enforce
        clear_tool_uses: { trigger: { type: input_tokens, value: 80000 }, keep: { type: tool_uses, value: 5 } }
    - name: no-edits
      context_management: { mode: off }
`

const clientBody = `{"model":"claude-opus-4-8","max_tokens":100,"stream":true,"metadata":{"user_id":"u"},"messages":[{"role":"user","content":"hello"}]}`

func loadPolicy(t *testing.T, perMinute int) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("lab.yaml", []byte(sprintf(labPolicy, perMinute)))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sprintf(f string, n int) string {
	out := ""
	for i := 0; i < len(f); i++ {
		if f[i] == '%' && i+1 < len(f) && f[i+1] == 'd' {
			out += strconv.Itoa(n)
			i++
			continue
		}
		out += string(f[i])
	}
	return out
}

// upstream answers count_tokens with input_tokens = the body's length and
// original_input_tokens = 1000 when the body has context_management; it
// records what it was sent. status, when not 200, is every answer.
type upstream struct {
	mu      sync.Mutex
	bodies  []string
	keys    []string
	headers []http.Header
	status  int
	hold    chan struct{} // when set, each call waits for it to close
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if u.hold != nil {
		<-u.hold
	}
	u.mu.Lock()
	u.bodies = append(u.bodies, string(b))
	u.keys = append(u.keys, r.Header.Get("X-Api-Key"))
	u.headers = append(u.headers, r.Header.Clone())
	status := u.status
	u.mu.Unlock()
	w.Header().Set("Request-Id", "req_count_"+strconv.Itoa(len(b)))
	if r.URL.Path != "/v1/messages/count_tokens" {
		status = 404
	}
	if status != 0 && status != 200 {
		w.WriteHeader(status)
		io.WriteString(w, `{"type":"error","error":{"type":"api_error","message":"no"}}`)
		return
	}
	orig := "null"
	if gjson.GetBytes(b, "context_management").Exists() {
		orig = `{"original_input_tokens":1000}`
	}
	io.WriteString(w, `{"input_tokens":`+strconv.Itoa(len(b))+`,"context_management":`+orig+`}`)
}

type rig struct {
	lab     *Lab
	rec     *tokens.Recorder
	ledger  tokens.Ledger
	metrics *tokens.Metrics
	up      *upstream
	clock   *time.Time
}

func newRig(t *testing.T, up *upstream, maxInFlight int) *rig {
	t.Helper()
	return newRigAt(t, up, maxInFlight, "")
}

// newRigAt is newRig with the upstream's base URL under path prefix.
func newRigAt(t *testing.T, up *upstream, maxInFlight int, prefix string) *rig {
	t.Helper()
	var h http.Handler = up
	if prefix != "" {
		h = http.StripPrefix(prefix, up)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	base, _ := url.Parse(srv.URL + prefix)
	l, err := tokens.OpenFileLedger(filepath.Join(t.TempDir(), "ledger.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	prices := tokens.BuiltinPrices()
	m := tokens.NewMetrics([]string{"lab"}, prices.Models())
	rec := tokens.NewRecorder(prices, m, l, nil)
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	r := &rig{rec: rec, ledger: l, metrics: m, up: up, clock: &now}
	r.lab = New(Config{Upstream: base, Recorder: rec, Metrics: m, Now: func() time.Time { return *r.clock }, MaxInFlight: maxInFlight})
	return r
}

// finish waits for the lab's calls and the ledger's writes, and reads the ledger back.
func (r *rig) finish(t *testing.T) []tokens.Call {
	t.Helper()
	r.lab.Close(context.Background())
	if err := r.rec.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	calls, err := r.ledger.Query(context.Background(), tokens.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return calls
}

func (r *rig) counter(t *testing.T, name, candidate string) float64 {
	t.Helper()
	mfs, err := r.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "candidate") == candidate && label(m, "tenant") == "lab" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func shadowed(reqID string) Shadowed {
	return Shadowed{Call: tokens.Call{Tenant: "lab", KeyID: "k1", Model: "claude-opus-4-8", RequestID: reqID, Status: 200,
		Usage: tokens.Usage{InputTokens: 500}, Cost: 2_500_000}, Conversation: "msg_first"}
}

func request(p *policy.Policy) *Request {
	return &Request{Policy: p, Body: []byte(clientBody), Header: http.Header{"X-Api-Key": {"sk-ant-real"}, "Anthropic-Version": {"2023-06-01"}}}
}

func TestEachSampledCallGetsOneLinePerCandidate(t *testing.T) {
	p := loadPolicy(t, 60)
	r := newRig(t, &upstream{}, 0)
	if !r.lab.Sample(p) {
		t.Fatal("sample 1 did not sample")
	}
	r.lab.Measure(request(p), shadowed("req_real"))
	calls := r.finish(t)
	if len(calls) != 2 {
		t.Fatalf("%d lines, want one per candidate: %+v", len(calls), calls)
	}
	for _, c := range calls {
		cand, _ := p.Shadow.Candidate(c.Shadow.Name)
		rewritten, _, err := cand.Policy.Rewrite([]byte(clientBody), http.Header{})
		if err != nil {
			t.Fatal(err)
		}
		want := CountBody(rewritten)
		sh := c.Shadow
		if sh.Shadows != "req_real" || sh.InputTokens != int64(len(want)) || c.RequestID != "req_count_"+strconv.Itoa(len(want)) {
			t.Errorf("%s: shadows %q, input_tokens %d, request_id %q; want req_real, %d (the count of its rewrite)", sh.Name, sh.Shadows, sh.InputTokens, c.RequestID, len(want))
		}
		if c.Tenant != "lab" || c.KeyID != "k1" || c.Conversation != "msg_first" || c.Cost != 0 {
			t.Errorf("%s: line %+v", sh.Name, c)
		}
	}
	r.up.mu.Lock()
	defer r.up.mu.Unlock()
	for i, b := range r.up.bodies {
		if gjson.Get(b, "max_tokens").Exists() || gjson.Get(b, "stream").Exists() || gjson.Get(b, "metadata").Exists() {
			t.Errorf("count_tokens body carries members count_tokens does not take: %s", b)
		}
		if r.up.keys[i] != "sk-ant-real" {
			t.Errorf("count_tokens went with key %q, want the real call's", r.up.keys[i])
		}
	}
}

func TestMaxPerMinuteDropsTheRest(t *testing.T) {
	p := loadPolicy(t, 2)
	r := newRig(t, &upstream{}, 0)
	for i := range 10 {
		r.lab.Measure(request(p), shadowed("req_"+strconv.Itoa(i)))
	}
	calls := r.finish(t)
	per := map[string]int{}
	for _, c := range calls {
		per[c.Shadow.Name]++
	}
	for _, name := range []string{"keep-5", "no-edits"} {
		if per[name] != 2 {
			t.Errorf("%s measured %d times, want 2", name, per[name])
		}
		if d := r.counter(t, "ctxproxy_shadow_dropped_total", name); d != 8 {
			t.Errorf("%s dropped %v, want 8", name, d)
		}
	}
}

func TestANewMinuteMeasuresAgain(t *testing.T) {
	p := loadPolicy(t, 1)
	r := newRig(t, &upstream{}, 0)
	r.lab.Measure(request(p), shadowed("req_1"))
	r.lab.Measure(request(p), shadowed("req_2"))
	*r.clock = r.clock.Add(time.Minute)
	r.lab.Measure(request(p), shadowed("req_3"))
	if calls := r.finish(t); len(calls) != 4 {
		t.Errorf("%d lines, want 2 a minute for 2 candidates", len(calls))
	}
}

func TestCallsInFlightAreBounded(t *testing.T) {
	p := loadPolicy(t, 60)
	up := &upstream{hold: make(chan struct{})}
	r := newRig(t, up, 1)
	r.lab.Measure(request(p), shadowed("req_1")) // keep-5 takes the one slot; no-edits is dropped
	close(up.hold)
	calls := r.finish(t)
	if len(calls) != 1 || r.counter(t, "ctxproxy_shadow_dropped_total", "no-edits") != 1 {
		t.Errorf("%d lines, no-edits dropped %v; want 1 and 1", len(calls), r.counter(t, "ctxproxy_shadow_dropped_total", "no-edits"))
	}
}

func TestFailuresAreCountedNotRecorded(t *testing.T) {
	p := loadPolicy(t, 60)
	r := newRig(t, &upstream{status: 529}, 0)
	r.lab.Measure(request(p), shadowed("req_1"))
	if calls := r.finish(t); len(calls) != 0 {
		t.Errorf("%d lines for failed calls", len(calls))
	}
	for _, name := range []string{"keep-5", "no-edits"} {
		if e := r.counter(t, "ctxproxy_shadow_errors_total", name); e != 1 {
			t.Errorf("%s errors %v, want 1", name, e)
		}
	}
}

func TestNewClearingPoints(t *testing.T) {
	p := newPoints()
	ctx := context.Background()
	steps := []struct {
		conv     string
		cleared  int64
		measured bool
		want     bool
	}{
		{"c1", 0, true, false},     // none earlier
		{"c1", 500, true, true},    // cleared more than at its latest measurement
		{"c1", 500, true, false},   // the same clearing
		{"c1", 9000, false, false}, // a failed measurement: the earlier one's value stands
		{"c1", 400, true, false},
		{"c1", 900, true, true},
		{"c2", 900, true, false}, // another conversation: none earlier
		{"", 900, true, false},   // not tracked
		{"", 1900, true, false},
	}
	for i, s := range steps {
		if got := p.open("lab", s.conv, "keep-5").settle(ctx, s.cleared, s.measured); got != s.want {
			t.Errorf("step %d (%s, %d): new point %v, want %v", i, s.conv, s.cleared, got, s.want)
		}
	}
}

// Measurements of one conversation whose calls come back out of order are still compared in
// the order of the conversation's calls.
func TestClearingPointsKeepTheConversationsOrder(t *testing.T) {
	p := newPoints()
	ctx := context.Background()
	first, second := p.open("lab", "c", "keep-5"), p.open("lab", "c", "keep-5")
	got := make(chan bool)
	go func() { got <- second.settle(ctx, 800, true) }() // back first: waits for the first
	if first.settle(ctx, 300, true) {
		t.Error("the conversation's first measurement is a new clearing point")
	}
	if !<-got {
		t.Error("800 cleared after 300 is not a new clearing point")
	}
	if p.open("lab", "c", "keep-5").settle(ctx, 800, true) {
		t.Error("the third measurement compared with the first, not the second")
	}
}

func TestCountBodyKeepsWhatCountTokensTakes(t *testing.T) {
	got := string(CountBody([]byte(`{"model":"m","max_tokens":5,"system":"s","stream":true,"messages":[],"diagnostics":{"previous_message_id":null},"context_management":{"edits":[]},"tools":[{"name":"x"}]}`)))
	want := `{"model":"m","system":"s","messages":[],"context_management":{"edits":[]},"tools":[{"name":"x"}]}`
	if got != want {
		t.Errorf("CountBody = %s, want %s", got, want)
	}
}

func TestNilLabSamplesNothing(t *testing.T) {
	var l *Lab
	if l.Sample(loadPolicy(t, 1)) {
		t.Error("a nil lab sampled")
	}
	l.Measure(nil, Shadowed{})
	l.Close(context.Background())
}

// A candidate's count_tokens call goes under the configured base URL with the real call's
// credential and headers as they were sent upstream, but never an idempotency key (it is
// never retried) nor the real call's framing.
func TestTheCountTokensCallCarriesTheRealCallsCredentialOnly(t *testing.T) {
	p := loadPolicy(t, 60)
	up := &upstream{}
	r := newRigAt(t, up, 0, "/gateway/anthropic")
	req := request(p)
	req.Header = http.Header{"X-Api-Key": {"sk-ant-real"}, "Authorization": {"Bearer tok"}, "Anthropic-Version": {"2023-06-01"},
		"User-Agent": {"Anthropic/Go 2.18.0"}, "Idempotency-Key": {"idem-1"}, "X-Idempotency-Key": {"idem-2"},
		"Content-Length": {"99999"}, "Accept-Encoding": {"gzip"}}
	if !r.lab.Sample(p) {
		t.Fatal("sample 1 did not sample")
	}
	r.lab.Measure(req, shadowed("req_real"))
	if calls := r.finish(t); len(calls) != 2 {
		t.Fatalf("%d lines, want one per candidate (the calls reach the base URL's path): %+v", len(calls), calls)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	for i, h := range up.headers {
		want := map[string]string{"X-Api-Key": "sk-ant-real", "Authorization": "Bearer tok", "Anthropic-Version": "2023-06-01",
			"User-Agent": "Anthropic/Go 2.18.0", "Content-Type": "application/json", "Accept-Encoding": "identity",
			"Idempotency-Key": "", "X-Idempotency-Key": "", "Content-Length": strconv.Itoa(len(up.bodies[i]))}
		for k, v := range want {
			if got := h.Get(k); got != v {
				t.Errorf("call %d: %s = %q, want %q", i, k, got, v)
			}
		}
	}
}
