package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/policy"
)

// countingPool is an idle pool that counts its trims.
type countingPool struct{ n atomic.Int64 }

func (p *countingPool) CloseIdleConnections() { p.n.Add(1) }

// fakeClock is a monotonic clock the test moves.
type fakeClock struct{ d atomic.Int64 }

func (c *fakeClock) now() time.Duration      { return time.Duration(c.d.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.d.Add(int64(d)) }

func newTestTrim(pool any) (*idleTrim, *fakeClock) {
	t := newIdleTrim(pool)
	c := &fakeClock{}
	t.now = c.now
	return t, c
}

// window runs one trim window: n requests in flight at once, then done,
// then the clock past the window and one request, whose end checks.
func (c *fakeClock) window(t *idleTrim, n int) {
	for range n {
		t.begin()
	}
	for range n {
		t.end()
	}
	c.advance(trimWindow)
	t.begin()
	t.end()
}

func TestIdleTrim(t *testing.T) {
	t.Run("empties the pool once the load fell well below what it grew to", func(t *testing.T) {
		pool := &countingPool{}
		tr, clock := newTestTrim(pool)
		clock.window(tr, 500) // the burst: its window's own check sees it
		if n := pool.n.Load(); n != 0 {
			t.Fatalf("trimmed %d times during the burst's window", n)
		}
		clock.window(tr, 1) // one client after the burst
		if n := pool.n.Load(); n != 1 {
			t.Fatalf("trims after the burst: %d, want 1", n)
		}
		clock.window(tr, 1)
		clock.window(tr, 1)
		if n := pool.n.Load(); n != 1 {
			t.Fatalf("trims while the load stayed low: %d, want still 1 (the pool was already small)", n)
		}
	})
	t.Run("leaves a steady or wavering load's pool alone", func(t *testing.T) {
		pool := &countingPool{}
		tr, clock := newTestTrim(pool)
		for i := range 20 {
			clock.window(tr, []int{60, 40, 25, 60}[i%4])
		}
		if n := pool.n.Load(); n != 0 {
			t.Fatalf("trimmed %d times under a load between 25 and 60", n)
		}
	})
	t.Run("leaves a small pool alone", func(t *testing.T) {
		pool := &countingPool{}
		tr, clock := newTestTrim(pool)
		clock.window(tr, trimSlack)
		clock.window(tr, 0)
		if n := pool.n.Load(); n != 0 {
			t.Fatalf("trimmed a pool of %d: %d times", trimSlack, n)
		}
	})
	t.Run("counts requests still in flight at a check", func(t *testing.T) {
		pool := &countingPool{}
		tr, clock := newTestTrim(pool)
		for range 100 { // 100 long streams open across the windows
			tr.begin()
		}
		clock.window(tr, 0)
		clock.window(tr, 0)
		if n := pool.n.Load(); n != 0 {
			t.Fatalf("trimmed %d times while 100 requests were in flight", n)
		}
	})
	t.Run("does nothing before a window has passed", func(t *testing.T) {
		pool := &countingPool{}
		tr, clock := newTestTrim(pool)
		clock.window(tr, 500)
		for range 1000 {
			tr.begin()
			tr.end()
		}
		if n := pool.n.Load(); n != 0 {
			t.Fatalf("trimmed %d times inside one window", n)
		}
	})
	t.Run("a transport without an idle pool is never trimmed", func(t *testing.T) {
		tr, clock := newTestTrim(roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, nil }))
		clock.window(tr, 500)
		clock.window(tr, 1) // must not panic
		if tr.pool != nil {
			t.Fatal("a pool for a RoundTripper without CloseIdleConnections")
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestBurstUpstreamConnectionsAreReleased drives the real upstream transport:
// a burst of concurrent requests opens one upstream connection each; once
// the load is down to one client, the proxy closes the ones it no longer
// needs instead of keeping them for IdleConnTimeout.
func TestBurstUpstreamConnectionsAreReleased(t *testing.T) {
	const burst = 40
	var open atomic.Int64
	arrived := make(chan struct{}, burst)
	release := make(chan struct{})
	fake := fakeapi.New(fakeapi.WithRecordLimit(1))
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test-Burst") == "1" {
			arrived <- struct{}{}
			<-release
		}
		fake.ServeHTTP(w, r)
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)

	srv := newTrimTestServer(t, up.URL)
	clock := &fakeClock{}
	srv.trim.now = clock.now
	px := httptest.NewServer(srv)
	t.Cleanup(px.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: burst}}
	t.Cleanup(client.CloseIdleConnections)

	var wg sync.WaitGroup
	errs := make(chan error, burst)
	for range burst {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- postMessage(client, px.URL, true) }()
	}
	for range burst {
		<-arrived
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, fmt.Sprintf("%d upstream connections open after the burst", burst), func() {
		for open.Load() != burst {
			time.Sleep(10 * time.Millisecond)
		}
	})

	clock.advance(trimWindow) // the burst's window: its peak was the burst
	if err := postMessage(client, px.URL, false); err != nil {
		t.Fatal(err)
	}
	if n := srv.trim.trims.Load(); n != 0 {
		t.Fatalf("trimmed %d times in the burst's own window", n)
	}
	clock.advance(trimWindow) // a window of one client
	if err := postMessage(client, px.URL, false); err != nil {
		t.Fatal(err)
	}
	if n := srv.trim.trims.Load(); n != 1 {
		t.Fatalf("trims after a window of one client: %d, want 1", n)
	}
	eventually(t, "the idle upstream connections closed", func() {
		for open.Load() > 1 {
			time.Sleep(10 * time.Millisecond)
		}
	})
	if err := postMessage(client, px.URL, false); err != nil {
		t.Fatalf("a request after the trim: %v", err)
	}
}

// newTrimTestServer is a Server on upstream with the real transport and
// one tenant whose policy is off.
func newTrimTestServer(t *testing.T, upstream string) *Server {
	t.Helper()
	dir := t.TempDir()
	writePolicies(t, dir, map[string]string{
		"default.yaml": "tenant: default\ncontext_management:\n  mode: off\nmemory:\n  mode: off\n",
	})
	pols, err := policy.NewStore(dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(withLimits(Config{Upstream: u, Policies: pols}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.trim.pool.CloseIdleConnections)
	return srv
}

// postMessage sends a small Messages request through the proxy; burst
// marks it for the upstream to hold until the whole burst arrived.
func postMessage(c *http.Client, base string, burst bool) error {
	body := `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	req, err := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("X-Api-Key", "sk-ant-test-trim")
	if burst {
		req.Header.Set("X-Test-Burst", "1")
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read reply: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return nil
}
