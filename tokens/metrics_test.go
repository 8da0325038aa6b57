package tokens

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsCountCalls(t *testing.T) {
	p := shippedPrices(t)
	m := NewMetrics([]string{"acme", "beta"}, p.Models())
	calls := []Call{
		{Tenant: "acme", Model: "claude-sonnet-4-5-20250929", Status: 200,
			Usage:       Usage{InputTokens: 1000, OutputTokens: 100, CacheCreationInputTokens: 10, CacheReadInputTokens: 5000},
			Edits:       []AppliedEdit{{Type: EditClearToolUses, ClearedToolUses: 3, ClearedInputTokens: 9000}, {Type: EditClearThinking, ClearedThinkingTurns: 2, ClearedInputTokens: 800}},
			CacheEffect: CacheMeasured, CacheMissCause: CauseEdits, CacheMissedInputTokens: 400},
		{Tenant: "acme", Model: "claude-sonnet-4-5", Status: 200, Usage: Usage{InputTokens: 1, OutputTokens: 1},
			Edits: []AppliedEdit{{Type: "compact_20260112", ClearedInputTokens: 50, Raw: `{}`}}},
		{Tenant: "stranger", Model: "gpt-4o", Status: 200, Usage: Usage{InputTokens: 7}},
		{Tenant: "beta", Model: "claude-opus-4-8", Status: 529},
	}
	for i := range calls {
		p.Price(&calls[i])
		m.ObserveCall(&calls[i])
	}
	checks := []struct {
		name   string
		got    float64
		wanted float64
	}{
		{"input tokens under the prefix label", testutil.ToFloat64(m.tokensTotal.WithLabelValues("acme", "claude-sonnet-4-5", "input")), 1001},
		{"output tokens", testutil.ToFloat64(m.tokensTotal.WithLabelValues("acme", "claude-sonnet-4-5", "output")), 101},
		{"cache_creation tokens", testutil.ToFloat64(m.tokensTotal.WithLabelValues("acme", "claude-sonnet-4-5", "cache_creation")), 10},
		{"cache_read tokens", testutil.ToFloat64(m.tokensTotal.WithLabelValues("acme", "claude-sonnet-4-5", "cache_read")), 5000},
		{"unknown tenant and model go to other", testutil.ToFloat64(m.tokensTotal.WithLabelValues("other", "other", "input")), 7},
		{"cleared input by clear_tool_uses", testutil.ToFloat64(m.clearedInput.WithLabelValues("acme", EditClearToolUses)), 9000},
		{"cleared input by clear_thinking", testutil.ToFloat64(m.clearedInput.WithLabelValues("acme", EditClearThinking)), 800},
		{"cleared input by an unknown edit type", testutil.ToFloat64(m.clearedInput.WithLabelValues("acme", "other")), 50},
		{"cleared tool uses", testutil.ToFloat64(m.clearedToolUses.WithLabelValues("acme", EditClearToolUses)), 3},
		{"cleared thinking turns", testutil.ToFloat64(m.clearedThinking.WithLabelValues("acme", EditClearThinking)), 2},
		{"upstream calls by status", testutil.ToFloat64(m.upstreamCalls.WithLabelValues("beta", "claude-opus-4-8", "529")), 1},
		{"price unknown", testutil.ToFloat64(m.priceUnknown.WithLabelValues("other")), 1},
		// (1000+1)×3 + (100+1)×15 + 10×3.75 + 5000×0.3 = 3003+1515+37.5+1500 = 6055.5 per million
		{"cost in USD", testutil.ToFloat64(m.cost.WithLabelValues("acme", "claude-sonnet-4-5")), 0.0060555},
		// (9000+800) × 0.3 (cached call: read price) + 50 × 3 (no cache: input price), / 1e6
		{"savings in USD", testutil.ToFloat64(m.savings.WithLabelValues("acme", "claude-sonnet-4-5")), 0.00309},
		{"gross savings equal the savings counter", testutil.ToFloat64(m.savingsGross.WithLabelValues("acme", "claude-sonnet-4-5")), 0.00309},
		// 400 missed tokens charged to the edits, all 5m: 400 × (3.75 − 0.30) / 1e6
		{"cache penalty in USD", testutil.ToFloat64(m.cachePenalty.WithLabelValues("acme", "claude-sonnet-4-5")), 0.00138},
		{"missed cache tokens by cause", testutil.ToFloat64(m.cacheMissed.WithLabelValues("acme", "edits")), 400},
		{"missed cache tokens of another cause apart", testutil.ToFloat64(m.cacheMissed.WithLabelValues("acme", "expiry")), 0},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if d := c.got - c.wanted; d > 1e-12 || d < -1e-12 {
				t.Errorf("got %v, want %v", c.got, c.wanted)
			}
		})
	}
}

func TestMetricsRequestsAndMemory(t *testing.T) {
	m := NewMetrics([]string{"acme"}, shippedPrices(t).Models())
	m.ObserveRequest("acme", "claude-opus-4-8", 200, 2*time.Second, 3*time.Millisecond)
	m.ObserveRequest("acme", "claude-opus-4-8", 200, time.Second, time.Millisecond)
	m.ObserveRequest("nobody", "claude-opus-4-8", 429, 0, 0)
	m.ObserveRequest("acme", "x", 0, 0, 0)
	m.MemoryCommand("acme", "view", false)
	m.MemoryCommand("acme", "view", true)
	m.MemoryCommand("acme", "str_replace", false)
	m.MemoryCommand("acme", "hack", false)

	if got := testutil.ToFloat64(m.requests.WithLabelValues("acme", "claude-opus-4-8", "200")); got != 2 {
		t.Errorf("requests 200 = %v", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("other", "claude-opus-4-8", "429")); got != 1 {
		t.Errorf("requests of unknown tenant = %v", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("acme", "other", "0")); got != 1 {
		t.Errorf("requests without status = %v", got)
	}
	for _, c := range []struct {
		cmd, result string
		want        float64
	}{{"view", "ok", 1}, {"view", "error", 1}, {"str_replace", "ok", 1}, {"other", "ok", 1}, {"create", "ok", 0}} {
		if got := testutil.ToFloat64(m.memory.WithLabelValues("acme", c.cmd, c.result)); got != c.want {
			t.Errorf("memory %s %s = %v, want %v", c.cmd, c.result, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.upstream, "ctxproxy_upstream_duration_seconds"); n != 3 {
		t.Errorf("upstream histogram series = %d", n)
	}
	const want = `
# HELP ctxproxy_overhead_seconds Time ctxproxy adds to a request (total minus upstream).
# TYPE ctxproxy_overhead_seconds histogram
ctxproxy_overhead_seconds_bucket{tenant="acme",le="0.0001"} 1
ctxproxy_overhead_seconds_bucket{tenant="acme",le="0.00025"} 1
ctxproxy_overhead_seconds_bucket{tenant="acme",le="0.0005"} 1
ctxproxy_overhead_seconds_bucket{tenant="acme",le="0.001"} 2
ctxproxy_overhead_seconds_bucket{tenant="acme",le="0.0025"} 2
ctxproxy_overhead_seconds_bucket{tenant="acme",le="0.005"} 3
ctxproxy_overhead_seconds_bucket{tenant="acme",le="0.01"} 3
ctxproxy_overhead_seconds_bucket{tenant="acme",le="0.025"} 3
ctxproxy_overhead_seconds_bucket{tenant="acme",le="0.05"} 3
ctxproxy_overhead_seconds_bucket{tenant="acme",le="0.1"} 3
ctxproxy_overhead_seconds_bucket{tenant="acme",le="0.25"} 3
ctxproxy_overhead_seconds_bucket{tenant="acme",le="1"} 3
ctxproxy_overhead_seconds_bucket{tenant="acme",le="+Inf"} 3
ctxproxy_overhead_seconds_sum{tenant="acme"} 0.004
ctxproxy_overhead_seconds_count{tenant="acme"} 3
ctxproxy_overhead_seconds_bucket{tenant="other",le="0.0001"} 1
ctxproxy_overhead_seconds_bucket{tenant="other",le="0.00025"} 1
ctxproxy_overhead_seconds_bucket{tenant="other",le="0.0005"} 1
ctxproxy_overhead_seconds_bucket{tenant="other",le="0.001"} 1
ctxproxy_overhead_seconds_bucket{tenant="other",le="0.0025"} 1
ctxproxy_overhead_seconds_bucket{tenant="other",le="0.005"} 1
ctxproxy_overhead_seconds_bucket{tenant="other",le="0.01"} 1
ctxproxy_overhead_seconds_bucket{tenant="other",le="0.025"} 1
ctxproxy_overhead_seconds_bucket{tenant="other",le="0.05"} 1
ctxproxy_overhead_seconds_bucket{tenant="other",le="0.1"} 1
ctxproxy_overhead_seconds_bucket{tenant="other",le="0.25"} 1
ctxproxy_overhead_seconds_bucket{tenant="other",le="1"} 1
ctxproxy_overhead_seconds_bucket{tenant="other",le="+Inf"} 1
ctxproxy_overhead_seconds_sum{tenant="other"} 0
ctxproxy_overhead_seconds_count{tenant="other"} 1
`
	if err := testutil.CollectAndCompare(m.overhead, strings.NewReader(want), "ctxproxy_overhead_seconds"); err != nil {
		t.Error(err)
	}
}

func TestMetricsSetTenantsOnReload(t *testing.T) {
	m := NewMetrics(nil, nil)
	m.ObserveCall(&Call{Tenant: "newco", Model: "claude-opus-4-8", Usage: Usage{InputTokens: 1}})
	m.SetTenants([]string{"newco"})
	m.SetModels(shippedPrices(t).Models())
	m.ObserveCall(&Call{Tenant: "newco", Model: "claude-opus-4-8", Usage: Usage{InputTokens: 2}})
	if got := testutil.ToFloat64(m.tokensTotal.WithLabelValues("other", "other", "input")); got != 1 {
		t.Errorf("before reload: %v", got)
	}
	if got := testutil.ToFloat64(m.tokensTotal.WithLabelValues("newco", "claude-opus-4-8", "input")); got != 2 {
		t.Errorf("after reload: %v", got)
	}
}

func TestMetricsHandlerServesOwnRegistry(t *testing.T) {
	m := NewMetrics([]string{"acme"}, nil)
	m.ObserveRequest("acme", "m", 200, time.Millisecond, time.Microsecond)
	m.LedgerError()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, s := range []string{`ctxproxy_requests_total{model="other",status="200",tenant="acme"} 1`, "ctxproxy_ledger_errors_total 1", "go_goroutines"} {
		if !strings.Contains(string(b), s) {
			t.Errorf("/metrics lacks %q", s)
		}
	}
	// A second Metrics must not collide with the first (own registry, not the global one).
	_ = NewMetrics(nil, nil)
}

func BenchmarkObserveCall(b *testing.B) {
	p := shippedPrices(b)
	m := NewMetrics([]string{"acme"}, p.Models())
	c := Call{Tenant: "acme", Model: "claude-sonnet-4-5-20250929", Status: 200, Usage: Usage{InputTokens: 1000, OutputTokens: 100, CacheReadInputTokens: 5000},
		Edits: []AppliedEdit{{Type: EditClearToolUses, ClearedToolUses: 3, ClearedInputTokens: 9000}}}
	p.Price(&c)
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveCall(&c)
	}
}

func TestMetricsSeriesExistBeforeTraffic(t *testing.T) {
	m := NewMetrics([]string{"acme"}, nil)
	count := func(name string, labels map[string]string) int {
		mfs, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		series:
			for _, s := range mf.GetMetric() {
				for _, lp := range s.GetLabel() {
					if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
						continue series
					}
				}
				n++
			}
		}
		return n
	}
	t.Run("every edit type of a known tenant is at zero", func(t *testing.T) {
		if n := count("ctxproxy_cleared_input_tokens_total", map[string]string{"tenant": "acme"}); n != len(editLabels) {
			t.Errorf("%d series, want %d", n, len(editLabels))
		}
	})
	t.Run("every memory command and result of a known tenant is at zero", func(t *testing.T) {
		if n := count("ctxproxy_memory_commands_total", map[string]string{"tenant": "acme"}); n != 2*(len(memoryCommands)+1) {
			t.Errorf("%d series, want %d", n, 2*(len(memoryCommands)+1))
		}
	})
	t.Run("a tenant added by a reload gets its series too", func(t *testing.T) {
		m.SetTenants([]string{"acme", "beta"})
		if n := count("ctxproxy_open_streams", map[string]string{"tenant": "beta"}); n != 1 {
			t.Errorf("%d open-stream series for beta, want 1", n)
		}
	})
	t.Run("open streams go up and down", func(t *testing.T) {
		m.StreamOpened("acme")
		m.StreamOpened("acme")
		m.StreamClosed("acme")
		if got := testutil.ToFloat64(m.openStreams.WithLabelValues("acme")); got != 1 {
			t.Errorf("open streams = %v, want 1", got)
		}
	})
}

func TestMetricsCountCompactionsAndWebSearches(t *testing.T) {
	p := shippedPrices(t)
	m := NewMetrics([]string{"acme"}, p.Models())
	r := ParseReply([]byte(`{"model":"claude-opus-4-6","usage":` + exactTranscriptUsage + `}`))
	c := Call{Tenant: "acme", Model: r.Model, Status: 200, Usage: r.Billed(), Iterations: r.Iterations}
	p.Price(&c)
	m.ObserveCall(&c)
	if got := testutil.ToFloat64(m.compactions.WithLabelValues("acme", "claude-opus-4-6")); got != 1 {
		t.Errorf("compactions %v", got)
	}
	if got := testutil.ToFloat64(m.compactionCost.WithLabelValues("acme", "claude-opus-4-6")); got < 0.974999 || got > 0.975001 {
		t.Errorf("compaction cost %v", got)
	}
	if got := testutil.ToFloat64(m.cost.WithLabelValues("acme", "claude-opus-4-6")); got < 1.119999 || got > 1.120001 {
		t.Errorf("cost %v", got)
	}
	if got := testutil.ToFloat64(m.webSearches.WithLabelValues("acme", "claude-opus-4-6")); got != 3 {
		t.Errorf("web searches %v", got)
	}
}

func TestMetricsCountMeasuredCompactionSavings(t *testing.T) {
	p := shippedPrices(t)
	m := NewMetrics([]string{"acme"}, p.Models())
	c := Call{Tenant: "acme", Model: "claude-opus-4-6", Status: 200, CountTokens: &CountTokens{InputTokens: 185000}, CompactedInputTokens: 3500}
	p.PriceCompactionMeasure(&c)
	m.ObserveCall(&c)
	if got := testutil.ToFloat64(m.compactionSaved.WithLabelValues("acme", "claude-opus-4-6")); got < 0.907499 || got > 0.907501 {
		t.Errorf("compaction savings %v, want 0.9075", got)
	}
}
