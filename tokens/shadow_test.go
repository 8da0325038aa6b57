package tokens

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
)

// The estimate, by hand, at $3 input, $0.30 read and $3.75 5m write per million tokens (3000,
// 300 and 3750 nano-dollars a token).
func TestShadowEstimate(t *testing.T) {
	pr := Price{Input: 3000, Output: 15000, CacheWrite: 3750, CacheWrite1h: 6000, CacheRead: 300}
	cachedCall := ShadowedCall{
		// T = 1,000 + 50,000 + 9,000 = 60,000
		Usage: Usage{InputTokens: 1000, CacheReadInputTokens: 50000, CacheCreationInputTokens: 9000, OutputTokens: 500},
		Cost:  3_000_000 + 15_000_000 + 33_750_000 + 7_500_000, // 59,250,000
	}
	uncached := ShadowedCall{Usage: Usage{InputTokens: 60000, OutputTokens: 500}, Cost: 180_000_000 + 7_500_000}
	tests := []struct {
		name          string
		s             Shadow
		cost, savings Money
	}{
		{"a cached call prices D at the read price; no new clearing point credits the real call's penalty",
			Shadow{InputTokens: 40000, OriginalInputTokens: 70000, Actual: withPenalty(cachedCall, 1_000_000)},
			// 59,250,000 − 20,000×300 − 1,000,000; no edits: 59,250,000 + 10,000×300 − 1,000,000 = 61,250,000
			52_250_000, 9_000_000},
		{"a new clearing point of a cached call re-writes the previous prefix P at write − read",
			Shadow{InputTokens: 40000, OriginalInputTokens: 70000, NewClearingPoint: true, PrevCached: 45000, Actual: withPenalty(cachedCall, 1_000_000)},
			// 59,250,000 − 6,000,000 + 45,000×3,450; no penalty credited
			208_500_000, 61_250_000 - 208_500_000},
		{"a candidate that keeps more (D < 0) costs more",
			Shadow{InputTokens: 70000, OriginalInputTokens: 70000, Actual: cachedCall},
			59_250_000 + 3_000_000, 0},
		{"an uncached call prices D at the input price and pays no re-write",
			Shadow{InputTokens: 50000, OriginalInputTokens: 60000, NewClearingPoint: true, PrevCached: 45000, Actual: uncached},
			187_500_000 - 30_000_000, 30_000_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cost, savings := pr.ShadowEstimate(&tt.s)
			if cost != tt.cost || savings != tt.savings {
				t.Errorf("estimate = %s (saves %s), want %s (saves %s)", cost, savings, tt.cost, tt.savings)
			}
		})
	}
}

func withPenalty(c ShadowedCall, p Money) ShadowedCall {
	c.CachePenalty = p
	return c
}

// A shadow line is priced by the estimate and kept out of the tenant's spend: no report row,
// no request or cost metric.
func TestShadowLinesAreNotSpend(t *testing.T) {
	ctx := context.Background()
	p := shippedPrices(t)
	m := NewMetrics([]string{"acme"}, p.Models())
	l, err := OpenFileLedger(filepath.Join(t.TempDir(), "l.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := NewRecorder(p, m, l, zap.NewNop())
	real := r.Record(ctx, Call{Tenant: "acme", Model: "claude-opus-4-8", RequestID: "req_1", Status: 200, Usage: Usage{InputTokens: 1_000_000}})
	got := r.Record(ctx, Call{Tenant: "acme", Model: "claude-opus-4-8", RequestID: "req_2", Status: 200,
		Shadow: &Shadow{Name: "half", Shadows: "req_1", InputTokens: 500_000, OriginalInputTokens: 1_000_000, Actual: ShadowedCallOf(&real)}})
	if got.Shadow.EstimatedCost.String() != "2.50" || got.Shadow.EstimatedSavings.String() != "2.50" || got.Cost != 0 {
		t.Errorf("shadow line priced %s (saves %s), cost %s; want 2.50, 2.50, 0", got.Shadow.EstimatedCost, got.Shadow.EstimatedSavings, got.Cost)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := RunReport(ctx, l, Filter{}, "model")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total.Calls != 1 || rep.Total.CostUSD != real.Cost {
		t.Errorf("report counts %d calls costing %s, want the real call alone (%s)", rep.Total.Calls, rep.Total.CostUSD, real.Cost)
	}
	if v := testutil.ToFloat64(m.upstreamCalls.WithLabelValues("acme", "claude-opus-4-8", "200")); v != 1 {
		t.Errorf("upstream calls metric %v, want 1 (the lab's call counts in no request metric)", v)
	}
	calls, err := l.Query(ctx, Filter{})
	if err != nil || len(calls) != 2 || calls[1].Shadow == nil || calls[1].Shadow.EstimatedCost != got.Shadow.EstimatedCost {
		t.Fatalf("ledger = %+v, %v", calls, err)
	}
}
