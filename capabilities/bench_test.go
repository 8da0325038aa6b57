package capabilities

import (
	"context"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
)

// BenchmarkModel is what a request pays for the models endpoint: the rewrite's lookup and the
// proxy's record of the model used.
func BenchmarkModel(b *testing.B) {
	srv := httptest.NewServer(fakeapi.New())
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	c := New(Options{Upstream: u, Tenants: tenants(Tenant{Name: "t", Key: "k"})})
	if err := c.Refresh(context.Background()); err != nil {
		b.Fatal(err)
	}
	at := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		_ = c.Model("t", "claude-opus-4-5-20251101")
		c.Used("t", "claude-opus-4-5-20251101", at)
	}
}

// BenchmarkRefuses is what a request with thinking on pays for the learned refusals the rewrite
// consults before it writes clear_thinking: one atomic load while none is learned, a read lock
// and a map lookup once some are.
func BenchmarkRefuses(b *testing.B) {
	for _, learned := range []int{0, 100} {
		b.Run(map[int]string{0: "none learned", 100: "100 learned"}[learned], func(b *testing.B) {
			c := New(Options{})
			for i := range learned {
				c.refusals.Add(Refusal{Tenant: "t", Model: "m" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Thinking: "between_tools", Edit: "clear_thinking_20251015"})
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = c.Refuses("t", "claude-opus-4-8", "enabled", "clear_thinking_20251015")
			}
		})
	}
}
