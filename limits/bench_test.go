package limits

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctxproxy/ctxproxy/tokens"
)

// BenchmarkAdmitSettle is what enforcement adds to one request: the per-minute checks (requests
// and input tokens), the spend check with its hold on three counters (tenant daily and monthly,
// the user's daily), and the settle, with the counters in each store.
func BenchmarkAdmitSettle(b *testing.B) {
	prices, err := tokens.ParsePrices([]byte(testPrices))
	if err != nil {
		b.Fatal(err)
	}
	pg := func(b *testing.B) (SpendStore, RateStore) { s := openPG(b); return s, s.Rate() }
	stores := []struct {
		name string
		open func(b *testing.B) (SpendStore, RateStore)
	}{
		{"memory", func(*testing.B) (SpendStore, RateStore) { return NewMemoryStore(), NewMemoryRate() }},
		{"postgres", pg},
		{"postgres+redis", func(b *testing.B) (SpendStore, RateStore) { s, _ := pg(b); return s, openRedis(b) }},
	}
	pol, err := parsePolicyB(b, limitsYAML)
	if err != nil {
		b.Fatal(err)
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			spend, rate := st.open(b)
			e := New(Config{Spend: spend, Rate: rate, Prices: prices, Metrics: NewMetrics(prometheus.NewRegistry())})
			req := Request{Policy: pol, User: "0a1b2c3d", Model: "m", BodyBytes: 2048, MaxTokens: 1024}
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				t, ref := e.Admit(ctx, req)
				if ref != nil {
					b.Fatal(ref.Message)
				}
				t.Settle(ctx, 1_500_000) // 500 input and 100 output tokens at $1 and $10 per million
			}
		})
	}
}
