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
