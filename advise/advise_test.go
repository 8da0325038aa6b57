package advise

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/tokens"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// ledger is n shadowed calls of tenant lab, each costing $0.01 (saving $0.002), measured for
// cheap (estimated $0.008 ± $0.0001 alternating) and dear ($0.012).
func ledger(n int) []tokens.Call {
	var out []tokens.Call
	for i := range n {
		id := "req_" + strconv.Itoa(i)
		out = append(out, tokens.Call{Time: t0.Add(time.Duration(i) * time.Minute), Tenant: "lab", Model: "claude-opus-4-8", RequestID: id, Status: 200,
			Usage: tokens.Usage{InputTokens: 1000, CacheReadInputTokens: 3000}, Cost: 10_000_000, Savings: 2_000_000})
		jitter := tokens.Money(100_000)
		if i%2 == 1 {
			jitter = -jitter
		}
		out = append(out,
			tokens.Call{Time: t0.Add(time.Duration(i) * time.Minute), Tenant: "lab", RequestID: "c" + id, Status: 200,
				Shadow: &tokens.Shadow{Name: "cheap", Shadows: id, InputTokens: 3000, OriginalInputTokens: 5000, EstimatedCost: 8_000_000 + jitter, EstimatedSavings: 4_000_000}},
			tokens.Call{Time: t0.Add(time.Duration(i) * time.Minute), Tenant: "lab", RequestID: "d" + id, Status: 200,
				Shadow: &tokens.Shadow{Name: "dear", Shadows: id, InputTokens: 5000, OriginalInputTokens: 5000, EstimatedCost: 12_000_000, CompactNotMeasured: true}},
			// another tenant's lines never count
			tokens.Call{Time: t0, Tenant: "other", RequestID: "o" + id, Status: 200, Cost: 1})
	}
	return out
}

func TestTheTableAndTheVerdict(t *testing.T) {
	a := Build("lab", ledger(30), nil)
	if len(a.Rows) != 3 || !a.Rows[0].Own || a.Rows[1].Policy != "cheap" || a.Rows[2].Policy != "dear" {
		t.Fatalf("rows %+v", a.Rows)
	}
	own, cheap, dear := a.Rows[0], a.Rows[1], a.Rows[2]
	if own.Calls != 30 || own.MeanInputTokens != 4000 || own.EstimatedCostPer1000 != 10_000_000_000 || own.NetSavingsPer1000 != 2_000_000_000 ||
		own.CacheHitRate == nil || *own.CacheHitRate != 0.75 {
		t.Errorf("own row %+v", own)
	}
	if cheap.Calls != 30 || cheap.MeanInputTokens != 3000 || cheap.EstimatedCostPer1000 != 8_000_000_000 || cheap.CacheHitRate != nil {
		t.Errorf("cheap row %+v", cheap)
	}
	if !dear.CompactNotMeasured || dear.EstimatedCostPer1000 != 12_000_000_000 {
		t.Errorf("dear row %+v", dear)
	}
	v := a.Verdict
	if !v.EnoughData || v.Cheapest != "cheap" || v.Against != Own || v.DifferencePer1000 != 2_000_000_000 || !v.Sure {
		t.Errorf("verdict %+v", v)
	}
	// differences 1.9 or 2.1 m$: sd ≈ 0.1017 m$, half-width 1.96 sd/√30 ≈ 0.0364 m$ a call.
	if v.Low95 >= v.DifferencePer1000 || v.High95 <= v.DifferencePer1000 || v.High95-v.Low95 < 70_000_000 || v.High95-v.Low95 > 76_000_000 {
		t.Errorf("interval %s .. %s", v.Low95, v.High95)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, a); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"(estimate)", "cheap is cheapest: $2.0000 per 1,000 calls less than current policy", "dear (compact not measured)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestFewerThan30CallsIsNotEnoughData(t *testing.T) {
	a := Build("lab", ledger(29), nil)
	if a.Verdict.EnoughData || a.Verdict.Cheapest != "" || !strings.HasPrefix(a.Verdict.Text, "not enough data") {
		t.Errorf("verdict %+v", a.Verdict)
	}
	if a := Build("lab", nil, nil); a.Verdict.EnoughData || len(a.Rows) != 1 {
		t.Errorf("no lines: %+v", a)
	}
}

// Gaps and the TTL arithmetic by hand, at claude-opus-4-8's $5 input price (5,000 nano-dollars a
// token).
func TestGapsAndTheTTLArithmetic(t *testing.T) {
	call := func(at time.Duration, conv string, read, write int64) tokens.Call {
		return tokens.Call{Time: t0.Add(at), Tenant: "lab", Model: "claude-opus-4-8", RequestID: conv + at.String(), Status: 200, Conversation: conv,
			Usage: tokens.Usage{CacheReadInputTokens: read, CacheCreationInputTokens: write}}
	}
	calls := []tokens.Call{
		call(0, "a", 0, 10_000),
		call(time.Minute, "a", 10_000, 1_000),               // 1m: read
		call(11*time.Minute, "a", 0, 12_000),                // 10m gap: 11,000 cached before, re-written: E += 11,000
		call(3*time.Hour, "a", 0, 12_000),                   // over an hour: expired either way
		call(0, "b", 0, 5_000),                              // another conversation
		call(2*time.Minute, "b", 5_000, 0),                  // 2m
		{Time: t0, Tenant: "lab", Model: "claude-opus-4-8"}, // no conversation: not timed
	}
	a := Build("lab", calls, nil)
	g := a.Gaps
	if g.Gaps != 4 || g.Over5m != 2 || g.Over1h != 1 || g.Share5m != 0.5 || g.Conversat != 2 {
		t.Errorf("gaps %+v", g)
	}
	tt := a.TTL
	// W = 40,000, R = 15,000, E = 11,000.
	// 5m: (1.25 × 40,000 + 0.1 × 15,000) × 5,000 = 51,500 × 5,000 = 257,500,000
	// 1h: (2 × 29,000 + 0.1 × 26,000) × 5,000 = 60,600 × 5,000 = 303,000,000
	if tt.Writes != 40_000 || tt.Reads != 15_000 || tt.Kept1h != 11_000 || tt.Cost5m != 257_500_000 || tt.Cost1h != 303_000_000 || tt.Cheaper1h {
		t.Errorf("ttl %+v", tt)
	}
}
