package capabilities

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/testwait"
)

func startFake(t *testing.T, opts ...fakeapi.Option) (*fakeapi.API, *url.URL) {
	t.Helper()
	fake := fakeapi.New(opts...)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return fake, u
}

func tenants(ts ...Tenant) func() []Tenant { return func() []Tenant { return ts } }

func TestReadsEachTenantsModelsFromTheEndpoint(t *testing.T) {
	fake, u := startFake(t)
	c := New(Options{Upstream: u, Tenants: tenants(Tenant{Name: "acme", Key: "sk-acme"})})
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, model                                      string
		clearThinking, clearToolUses, compact, betweenTl Support
		lifecycle                                        string
	}{
		{"a frontier model takes every strategy", "claude-opus-4-8", Yes, Yes, Yes, Yes, Active},
		{"a dated snapshot is its model", "claude-opus-4-8-20260601", Yes, Yes, Yes, Yes, Active},
		{"haiku 5.5 has no compaction nor between_tools", "claude-haiku-5-5", Yes, Yes, No, No, Active},
		{"null strategy entries are unknown, not unsupported", "claude-haiku-4-5", Unknown, Unknown, Unknown, No, Active},
		{"an alias finds the dated id it stands for", "claude-opus-4-5", Yes, Yes, No, No, Deprecated},
		{"retired models are read too", "claude-opus-4-1-20250805", Yes, Yes, No, No, Retired},
		{"a model the endpoint does not list is unknown", "claude-sonnet-4-5", Unknown, Unknown, Unknown, Unknown, ""},
		{"claude-opus-5 is not claude-opus-5-5's entry", "claude-opus-5-5-1", Unknown, Unknown, Unknown, Unknown, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := c.Model("acme", tt.model)
			got := [4]Support{m.ClearThinking, m.ClearToolUses, m.Compact, m.BetweenTools}
			want := [4]Support{tt.clearThinking, tt.clearToolUses, tt.compact, tt.betweenTl}
			if got != want || m.Lifecycle != tt.lifecycle {
				t.Errorf("Model(%s) = %v %q, want %v %q", tt.model, got, m.Lifecycle, want, tt.lifecycle)
			}
		})
	}
	if m := c.Model("acme", "claude-opus-4-5"); m.RetiresAt != "2027-01-22T00:00:00Z" || m.MaxInputTokens != 200_000 {
		t.Errorf("claude-opus-4-5: retires_at %q, max_input_tokens %d", m.RetiresAt, m.MaxInputTokens)
	}
	if m := c.Model("other", "claude-opus-4-8"); m != (Model{}) {
		t.Errorf("a tenant never read knows %+v", m)
	}
	// The read went with the tenant's key and no beta header.
	r, ok := fake.LastRequest("/v1/models")
	if !ok || r.Credential != "sk-acme" || r.Header.Get("Anthropic-Beta") != "" {
		t.Fatalf("models read: %v %q beta %q", ok, r.Credential, r.Header.Get("Anthropic-Beta"))
	}
}

func TestShapesTheTableCannotHoldAreUnknown(t *testing.T) {
	raw := func(id, s string) fakeapi.Model {
		return fakeapi.Model{ID: id, Lifecycle: fakeapi.LifecycleActive, Raw: json.RawMessage(s)}
	}
	_, u := startFake(t, fakeapi.WithModels(
		raw("m-null-caps", `{"type":"model","id":"m-null-caps","lifecycle":"active","capabilities":null}`),
		raw("m-cm-off", `{"type":"model","id":"m-cm-off","lifecycle":"active","capabilities":{"context_management":{"supported":false,"clear_thinking_20251015":{"supported":true}},"thinking":{"supported":true,"types":{"between_tools":{"supported":true}}}}}`),
		raw("m-missing", `{"type":"model","id":"m-missing","capabilities":{"context_management":{"supported":true,"clear_tool_uses_20250919":{"supported":"yes"}}}}`),
		raw("x", `{"type":"model","id":""}`),
	))
	c := New(Options{Upstream: u, Tenants: tenants(Tenant{Name: "t", Key: "k"})})
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string][4]Support{
		"m-null-caps": {Unknown, Unknown, Unknown, Unknown},
		"m-cm-off":    {No, No, No, Yes},
		"m-missing":   {Unknown, Unknown, Unknown, Unknown},
	} {
		m := c.Model("t", model)
		if got := [4]Support{m.ClearThinking, m.ClearToolUses, m.Compact, m.BetweenTools}; got != want {
			t.Errorf("%s: %v, want %v", model, got, want)
		}
	}
	if len(c.Models("t")) != 3 {
		t.Errorf("models without an id are kept: %d", len(c.Models("t")))
	}
}

func TestReadsEveryPage(t *testing.T) {
	var models []fakeapi.Model
	for i := range 1500 { // the endpoint gives at most 1000 a page
		models = append(models, fakeapi.Model{ID: "m-" + time.Unix(int64(i), 0).UTC().Format("150405"),
			CreatedAt: time.Unix(int64(i), 0).UTC().Format(time.RFC3339), Lifecycle: fakeapi.LifecycleActive})
	}
	fake, u := startFake(t, fakeapi.WithModels(models...))
	c := New(Options{Upstream: u, Tenants: tenants(Tenant{Name: "t", Key: "k"})})
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(c.Models("t")); n != 1500 {
		t.Fatalf("%d models read, want 1500", n)
	}
	pages := 0
	for _, r := range fake.Requests() {
		if r.Path == "/v1/models" {
			pages++
		}
	}
	if pages != 2 {
		t.Errorf("%d pages read, want 2", pages)
	}
}

// flaky answers the models routes with fake until fail is set.
type flaky struct {
	fake   http.Handler
	fail   atomic.Int32 // status to answer instead, 0: none
	mu     sync.Mutex
	creds  []string
	models int
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.creds = append(f.creds, r.Header.Get("X-Api-Key"))
	f.models++
	f.mu.Unlock()
	if s := f.fail.Load(); s != 0 {
		w.WriteHeader(int(s))
		_, _ = w.Write([]byte(`{"type":"error","error":{"type":"api_error","message":"down"}}`))
		return
	}
	f.fake.ServeHTTP(w, r)
}

func TestAFailedReadKeepsTheLastGoodOneForAnHourThenFallsBack(t *testing.T) {
	f := &flaky{fake: fakeapi.New()}
	srv := httptest.NewServer(f)
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	c := New(Options{Upstream: u, Tenants: tenants(Tenant{Name: "t", Key: "k"}), Now: func() time.Time { return now }})

	f.fail.Store(http.StatusInternalServerError)
	if err := c.Refresh(context.Background()); err == nil || c.Known("t") {
		t.Fatalf("a failing endpoint: err %v, known %v", err, c.Known("t"))
	}
	f.fail.Store(0)
	if err := c.Refresh(context.Background()); err != nil || c.Model("t", "claude-haiku-5-5").Compact != No {
		t.Fatalf("read: %v", err)
	}
	f.fail.Store(http.StatusServiceUnavailable)
	now = now.Add(50 * time.Minute)
	if err := c.Refresh(context.Background()); err == nil || c.Model("t", "claude-haiku-5-5").Compact != No {
		t.Fatalf("within the hour the last good read stands: %v", err)
	}
	now = now.Add(11 * time.Minute)
	if err := c.Refresh(context.Background()); err == nil || c.Known("t") || c.Model("t", "claude-haiku-5-5").Compact != Unknown {
		t.Fatal("past the hour the built-in lists decide")
	}
}

func TestRunReadsAgainOnEveryTick(t *testing.T) {
	fake, u := startFake(t)
	ticks := make(chan time.Time) // unbuffered: a send returns once Run took it
	c := New(Options{Upstream: u, Tenants: tenants(Tenant{Name: "t", Key: "k"}), Ticks: ticks})
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.Model("t", "claude-opus-4-8").Compact != Yes {
		t.Fatal("start read")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	caps := fakeapi.DefaultModels()
	for i := range caps {
		if caps[i].ID == "claude-opus-4-8" {
			caps[i].Capabilities.ContextManagement.Compact = &fakeapi.Support{}
		}
	}
	fake.SetModels(caps)
	if c.Model("t", "claude-opus-4-8").Compact != Yes {
		t.Fatal("read again before the tick")
	}
	ticks <- time.Time{}
	ticks <- time.Time{} // taken only once the first tick's read is done
	if got := c.Model("t", "claude-opus-4-8").Compact; got != No {
		t.Errorf("after a tick: compact %v, want no", got)
	}
}

func TestAPassThroughTenantIsReadWithTheFirstCredentialForwarded(t *testing.T) {
	f := &flaky{fake: fakeapi.New()}
	srv := httptest.NewServer(f)
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	ticks := make(chan time.Time)
	c := New(Options{Upstream: u, Tenants: tenants(Tenant{Name: "pass"}), Ticks: ticks})
	if err := c.Refresh(context.Background()); err != nil || c.Known("pass") {
		t.Fatalf("read without a credential: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	f.fail.Store(http.StatusUnauthorized)
	c.Offer("pass", http.Header{"X-Api-Key": {"sk-bad"}})
	c.Offer("pass", http.Header{"X-Api-Key": {"sk-good"}}) // not taken: one is already offered
	ticks <- time.Time{}                                   // runs after the offer's read ...
	ticks <- time.Time{}                                   // ... and this one's is done: sk-bad is refused and forgotten
	f.fail.Store(0)
	c.Offer("pass", http.Header{"X-Api-Key": {"sk-good"}})
	testwait.Eventually(t, "the pass-through tenant's models read", func() {
		for !c.Known("pass") {
			time.Sleep(time.Millisecond)
		}
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	if last := f.creds[len(f.creds)-1]; last != "sk-good" {
		t.Errorf("last read with %q", last)
	}
	for _, k := range f.creds {
		if k != "sk-bad" && k != "sk-good" {
			t.Errorf("read with %q", k)
		}
	}
}

func TestTenantsShareAReadOfOneCredential(t *testing.T) {
	f := &flaky{fake: fakeapi.New()}
	srv := httptest.NewServer(f)
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	c := New(Options{Upstream: u, Tenants: tenants(Tenant{Name: "a", Key: "k"}, Tenant{Name: "b", Key: "k"}, Tenant{Name: "c", Key: "k2"})})
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.models != 2 || !c.Known("a") || !c.Known("b") || !c.Known("c") {
		t.Errorf("%d reads for two credentials", f.models)
	}
}

func TestModelLooksUpWithoutAllocating(t *testing.T) {
	_, u := startFake(t)
	c := New(Options{Upstream: u, Tenants: tenants(Tenant{Name: "t", Key: "k"})})
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := http.Header{"X-Api-Key": {"k"}}
	if n := testing.AllocsPerRun(100, func() {
		_ = c.Model("t", "claude-opus-4-8-20260601")
		_ = c.Model("t", "unknown")
		c.Offer("t", h)
	}); n != 0 {
		t.Errorf("%v allocations per lookup", n)
	}
}

// headersSeen answers the models routes with fake and keeps the headers of each request.
type headersSeen struct {
	fake http.Handler
	mu   sync.Mutex
	seen []http.Header
}

func (h *headersSeen) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.seen = append(h.seen, r.Header.Clone())
	h.mu.Unlock()
	h.fake.ServeHTTP(w, r)
}

// A models read re-sends the credential the proxy forwarded, both its headers verbatim, and
// nothing else of the client's request: no beta, no user agent (not Go's either), no cookie.
func TestAModelsReadSendsTheForwardedCredentialAndNothingElseOfTheClients(t *testing.T) {
	hs := &headersSeen{fake: fakeapi.New()}
	srv := httptest.NewServer(http.StripPrefix("/base", hs)) // the base URL's path is kept
	defer srv.Close()
	u, _ := url.Parse(srv.URL + "/base/")
	ticks := make(chan time.Time)
	c := New(Options{Upstream: u, Tenants: tenants(Tenant{Name: "pass"}, Tenant{Name: "own", Key: "sk-ant-own"}), Ticks: ticks})
	forwarded := http.Header{"X-Api-Key": {"sk-ant-client"}, "Authorization": {"Bearer tok-client"},
		"Anthropic-Beta": {"context-management-2025-06-27"}, "User-Agent": {"Anthropic/Python 1.0"}, "Cookie": {"s=1"}}
	c.Offer("pass", forwarded)
	if err := c.Refresh(context.Background()); err != nil || !c.Known("pass") || !c.Known("own") {
		t.Fatalf("read: %v, pass known %v, own known %v", err, c.Known("pass"), c.Known("own"))
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	var pass, own int
	for _, h := range hs.seen {
		switch h.Get("X-Api-Key") {
		case "sk-ant-client":
			pass++
			if got := h.Get("Authorization"); got != "Bearer tok-client" {
				t.Errorf("the forwarded bearer token went as %q", got)
			}
		case "sk-ant-own":
			own++
			if got := h.Get("Authorization"); got != "" {
				t.Errorf("the tenant's own key went with Authorization %q", got)
			}
		default:
			t.Errorf("a read with credential %q", h.Get("X-Api-Key"))
		}
		for _, k := range []string{"Anthropic-Beta", "User-Agent", "Cookie"} {
			if v := h.Get(k); v != "" {
				t.Errorf("%s went with the read: %q", k, v)
			}
		}
		if h.Get("Anthropic-Version") != apiVersion {
			t.Errorf("anthropic-version %q", h.Get("Anthropic-Version"))
		}
	}
	if pass == 0 || own == 0 {
		t.Errorf("reads: %d with the forwarded credential, %d with the tenant's key", pass, own)
	}
}
