package proxy

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// Known usage and applied_edits go through the proxy (the memory loop
// included) and come out in the metrics, the ledger and the report, to the
// token and the cent.
func TestAccountingToTheTokenAndCent(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			prices, err := tokens.LoadPrices("../tokens/builtin_prices.yaml")
			if err != nil {
				t.Fatal(err)
			}
			metrics := tokens.NewMetrics([]string{"acme", "beta", "default"}, prices.Models())
			ledger, err := tokens.OpenLedger(t.Context(), "file:"+filepath.Join(t.TempDir(), "ledger.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			defer ledger.Close()
			rec := tokens.NewRecorder(prices, metrics, ledger, nil)
			h := newHarness(t, func(c *Config) { c.Recorder, c.Metrics = rec, metrics })
			// claude-sonnet-4-5: $3 in, $15 out, $3.75 cache write, $0.30 cache read per million.
			h.fake.SetResponder(fakeapi.Script(
				fakeapi.Reply{
					Content:      []json.RawMessage{fakeapi.MemoryView("/memories")},
					Usage:        &fakeapi.Usage{InputTokens: 1000, OutputTokens: 100, CacheCreationInputTokens: 200, CacheReadInputTokens: 3000},
					AppliedEdits: []json.RawMessage{fakeapi.AppliedEdit("clear_tool_uses_20250919", 2, 5000)},
				},
				fakeapi.Reply{
					Content:      []json.RawMessage{fakeapi.Text("done")},
					Usage:        &fakeapi.Usage{InputTokens: 2000, OutputTokens: 300},
					AppliedEdits: []json.RawMessage{fakeapi.AppliedEdit("clear_thinking_20251015", 1, 1000)},
				},
			))
			body := simpleBody
			if stream {
				body = withStream(body)
			}
			resp := h.post("/v1/messages", keyAcme, body)
			if got := readAll(t, resp.Body); resp.StatusCode != 200 {
				t.Fatalf("status %d %s", resp.StatusCode, got)
			}
			if err := rec.Close(t.Context()); err != nil {
				t.Fatal(err)
			}

			calls, err := ledger.Query(t.Context(), tokens.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			if len(calls) != 2 {
				t.Fatalf("ledger has %d calls, want one per upstream call (2)", len(calls))
			}
			// 1000×3 + 100×15 + 200×3.75 + 3000×0.30 = 6150 µ$; savings 5000 × the read price
			// 0.30 = 1500 µ$ (the call used the cache). 2000×3 + 300×15 = 10500 µ$; savings
			// 1000×3 = 3000 µ$ (no cache: the input price).
			want := []struct{ cost, savings string }{{"0.00615", "0.0015"}, {"0.0105", "0.003"}}
			for i, c := range calls {
				if c.Tenant != "acme" || c.Model != "claude-sonnet-4-5" || c.Stream != stream || c.RequestID == "" {
					t.Errorf("call %d = %+v", i, c)
				}
				if c.Cost.String() != want[i].cost || c.Savings.String() != want[i].savings {
					t.Errorf("call %d cost %s savings %s, want %s %s", i, c.Cost, c.Savings, want[i].cost, want[i].savings)
				}
			}
			rep := tokens.BuildReport(calls, tokens.GroupByModel)
			tot := rep.Total
			if tot.Calls != 2 || tot.InputTokens != 3000 || tot.OutputTokens != 400 || tot.CacheCreationInputTokens != 200 ||
				tot.CacheReadInputTokens != 3000 || tot.ClearedInputTokens != 6000 || tot.ClearedToolUses != 2 || tot.ClearedThinkingTurns != 1 {
				t.Errorf("report totals = %+v", tot)
			}
			if tot.CostUSD.Fixed(2) != "0.02" || tot.CostUSD.String() != "0.01665" || tot.SavingsUSD.String() != "0.0045" {
				t.Errorf("report cost %s savings %s, want 0.01665 and 0.0045", tot.CostUSD, tot.SavingsUSD)
			}

			reg := metrics.Registry()
			check := func(name string, want float64, labels ...string) {
				t.Helper()
				got, err := counterValue(reg, name, labels...)
				if err != nil || got != want {
					t.Errorf("%s%v = %v (%v), want %v", name, labels, got, err, want)
				}
			}
			check("ctxproxy_requests_total", 1, "tenant", "acme", "status", "200")
			check("ctxproxy_upstream_calls_total", 2, "tenant", "acme")
			check("ctxproxy_tokens_total", 3000, "tenant", "acme", "kind", "input")
			check("ctxproxy_tokens_total", 400, "tenant", "acme", "kind", "output")
			check("ctxproxy_tokens_total", 200, "tenant", "acme", "kind", "cache_creation")
			check("ctxproxy_tokens_total", 3000, "tenant", "acme", "kind", "cache_read")
			check("ctxproxy_cleared_input_tokens_total", 5000, "tenant", "acme", "edit", "clear_tool_uses_20250919")
			check("ctxproxy_cleared_input_tokens_total", 1000, "tenant", "acme", "edit", "clear_thinking_20251015")
			check("ctxproxy_cleared_tool_uses_total", 2, "tenant", "acme")
			check("ctxproxy_memory_commands_total", 1, "tenant", "acme", "command", "view")
			check("ctxproxy_cost_usd_total", 0.01665, "tenant", "acme")
			check("ctxproxy_savings_usd_total", tokens.Money(1_500_000).USD()+tokens.Money(3_000_000).USD(), "tenant", "acme") // as the counter adds them
		})
	}
}

// counterValue sums the samples of a counter family whose labels include
// the given name/value pairs.
func counterValue(g prometheus.Gatherer, name string, labels ...string) (float64, error) {
	fams, err := g.Gather()
	if err != nil {
		return 0, err
	}
	var sum float64
	found := false
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				ok := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						ok = true
					}
				}
				if !ok {
					continue metrics
				}
			}
			found = true
			sum += m.GetCounter().GetValue()
		}
	}
	if !found {
		return 0, fmt.Errorf("no sample")
	}
	return sum, nil
}
