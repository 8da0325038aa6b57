// Package advise reads a tenant's ledger and says which context-management policy it should run:
// the tenant's own policy, scored from its real usage, beside each shadow candidate the policy
// lab measured (package shadow; the estimate is package tokens'), with a verdict naming the
// cheapest and how sure it is, how often the tenant's conversations pause past the 5-minute
// cache TTL, and whether a 1-hour TTL would have been cheaper. `ctxproxy advise` and the
// console's tenant page show it.
package advise

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/ctxproxy/ctxproxy/tokens"
)

// MinCalls is the fewest measured calls of every row below which the verdict is "not enough
// data".
const MinCalls = 30

// Own names the tenant's own policy's row.
const Own = "current policy"

// Advice is the advisor's answer for one tenant and window.
type Advice struct {
	Tenant  string     `json:"tenant"`
	Since   *time.Time `json:"since,omitempty"`
	Until   *time.Time `json:"until,omitempty"`
	Rows    []Row      `json:"rows"` // the tenant's own policy first, then the candidates by name
	Verdict Verdict    `json:"verdict"`
	Gaps    Gaps       `json:"gaps"`
	TTL     TTL        `json:"ttl"`
	// Note says what the cost figures are: estimates.
	Note string `json:"note"`
}

// Row is one policy's figures over the shadowed calls.
type Row struct {
	Policy string `json:"policy"`
	Own    bool   `json:"own,omitempty"`
	Calls  int    `json:"calls_measured"`
	// MeanInputTokens is the mean input after the policy's edits (input + cache read + cache
	// write for the own policy, the candidate's count for a candidate).
	MeanInputTokens float64 `json:"mean_input_tokens"`
	// EstimatedCostPer1000 and NetSavingsPer1000 (against no edits) are per 1,000 calls; the
	// own policy's are its real cost and net savings.
	EstimatedCostPer1000 tokens.Money `json:"estimated_cost_per_1000_usd"`
	NetSavingsPer1000    tokens.Money `json:"estimated_net_savings_per_1000_usd"`
	// CacheHitRate is cache_read ÷ all input, known for the own policy only (nil otherwise).
	CacheHitRate *float64 `json:"cache_hit_rate,omitempty"`
	// CompactNotMeasured: the candidate writes compact_20260112, which count_tokens never
	// applies: its compact settings are not in its figures.
	CompactNotMeasured bool `json:"compact_not_measured,omitempty"`
}

// Verdict names the cheapest policy and how sure the advisor is.
type Verdict struct {
	// EnoughData is false when a row has fewer than MinCalls measured calls.
	EnoughData bool   `json:"enough_data"`
	Cheapest   string `json:"cheapest,omitempty"`
	// Against is the policy the difference is taken against: the own policy when a candidate
	// is cheapest, else the cheapest candidate.
	Against string `json:"against,omitempty"`
	// DifferencePer1000 is how much less Cheapest costs than Against per 1,000 calls, with its
	// 95% interval over the calls both measured (paired).
	DifferencePer1000 tokens.Money `json:"estimated_difference_per_1000_usd"`
	Low95             tokens.Money `json:"low_95_usd"`
	High95            tokens.Money `json:"high_95_usd"`
	// Sure: the interval excludes 0.
	Sure bool   `json:"sure"`
	Text string `json:"text"`
}

// Gaps is how often the gap between a conversation's calls exceeds the 5-minute TTL.
type Gaps struct {
	Gaps      int     `json:"gaps"` // pairs of consecutive calls of a conversation
	Over5m    int     `json:"over_5m"`
	Over1h    int     `json:"over_1h"`
	Share5m   float64 `json:"share_over_5m"`
	Conversat int     `json:"conversations"`
}

// TTL is the 1h-versus-5m arithmetic: the cache writes W and reads R of the conversations'
// calls, and E, the tokens re-written after a gap of 5 minutes to an hour that a 1-hour entry
// would have kept (read instead); at 5m writes 1.25×, 1h writes 2×, reads 0.1× the input price.
type TTL struct {
	Writes    int64        `json:"cache_write_tokens"`
	Reads     int64        `json:"cache_read_tokens"`
	Kept1h    int64        `json:"rewritten_a_1h_ttl_keeps"`
	Cost5m    tokens.Money `json:"estimated_cost_5m_usd"`
	Cost1h    tokens.Money `json:"estimated_cost_1h_usd"`
	Cheaper1h bool         `json:"cheaper_1h"`
}

// Factors of the TTL arithmetic, in thousandths of the input price.
const (
	write5m = tokens.Ratio(1250)
	write1h = tokens.Ratio(2000)
	read    = tokens.Ratio(100)
)

// Build makes the advice for tenant from its ledger lines calls (the window's), at prices (for
// the TTL arithmetic; nil: the built-in table).
func Build(tenant string, calls []tokens.Call, prices *tokens.Prices) Advice {
	if prices == nil {
		prices = tokens.BuiltinPrices()
	}
	a := Advice{Tenant: tenant, Note: "cost figures are estimates (the policy lab's estimate; the current policy's from its real usage)"}
	real := map[string]*tokens.Call{}
	for i := range calls {
		c := &calls[i]
		if c.Tenant == tenant && c.Shadow == nil && c.CountTokens == nil && c.RequestID != "" {
			real[c.RequestID] = c
		}
	}
	// The measurements, by candidate, of calls whose own line is in the window.
	byCand := map[string]map[string]*tokens.Shadow{}
	shadowed := map[string]bool{}
	compacts := map[string]bool{}
	for i := range calls {
		c := &calls[i]
		if c.Tenant != tenant || c.Shadow == nil || real[c.Shadow.Shadows] == nil {
			continue
		}
		m := byCand[c.Shadow.Name]
		if m == nil {
			m = map[string]*tokens.Shadow{}
			byCand[c.Shadow.Name] = m
		}
		m[c.Shadow.Shadows] = c.Shadow
		shadowed[c.Shadow.Shadows] = true
		compacts[c.Shadow.Name] = compacts[c.Shadow.Name] || c.Shadow.CompactNotMeasured
	}
	own := ownRow(real, shadowed)
	a.Rows = append(a.Rows, own)
	names := make([]string, 0, len(byCand))
	for n := range byCand {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		a.Rows = append(a.Rows, candidateRow(n, byCand[n], compacts[n]))
	}
	a.Verdict = verdict(a.Rows, real, byCand)
	a.Gaps, a.TTL = timing(tenant, calls, prices)
	return a
}

func ownRow(real map[string]*tokens.Call, shadowed map[string]bool) Row {
	r := Row{Policy: Own, Own: true}
	var in, read, all int64
	var cost, savings tokens.Money
	for id := range shadowed {
		c := real[id]
		r.Calls++
		in += c.Usage.TotalInput()
		read += c.Usage.CacheReadInputTokens
		all += c.Usage.TotalInput()
		cost = cost.Plus(c.Cost)
		savings = savings.Plus(c.Savings)
	}
	if r.Calls > 0 {
		r.MeanInputTokens = float64(in) / float64(r.Calls)
		r.EstimatedCostPer1000, r.NetSavingsPer1000 = per1000(cost, r.Calls), per1000(savings, r.Calls)
	}
	if all > 0 {
		h := float64(read) / float64(all)
		r.CacheHitRate = &h
	}
	return r
}

func candidateRow(name string, m map[string]*tokens.Shadow, compacts bool) Row {
	r := Row{Policy: name, Calls: len(m), CompactNotMeasured: compacts}
	var in int64
	var cost, savings tokens.Money
	for _, s := range m {
		in += s.InputTokens
		cost = cost.Plus(s.EstimatedCost)
		savings = savings.Plus(s.EstimatedSavings)
	}
	if r.Calls > 0 {
		r.MeanInputTokens = float64(in) / float64(r.Calls)
		r.EstimatedCostPer1000, r.NetSavingsPer1000 = per1000(cost, r.Calls), per1000(savings, r.Calls)
	}
	return r
}

// per1000 is total ÷ n × 1,000, rounded to the nano-dollar.
func per1000(total tokens.Money, n int) tokens.Money {
	if n == 0 {
		return 0
	}
	return tokens.Money(math.Round(float64(total) * 1000 / float64(n)))
}

// verdict names the cheapest row and compares it, call by call, with the own policy (or, when
// the own policy is cheapest, with the cheapest candidate).
func verdict(rows []Row, real map[string]*tokens.Call, byCand map[string]map[string]*tokens.Shadow) Verdict {
	var v Verdict
	if len(rows) < 2 {
		v.Text = "not enough data: no candidate measured (a shadow block in the tenant's policy measures some)"
		return v
	}
	v.EnoughData = true
	var short []string
	for _, r := range rows {
		if r.Calls < MinCalls {
			v.EnoughData = false
			short = append(short, r.Policy)
		}
	}
	if !v.EnoughData {
		v.Text = "not enough data: fewer than 30 measured calls for " + joinNames(short)
		return v
	}
	cheapest := slices.MinFunc(rows, func(a, b Row) int { return cmpMoney(a.EstimatedCostPer1000, b.EstimatedCostPer1000) })
	v.Cheapest = cheapest.Policy
	var against Row
	if cheapest.Own {
		cands := rows[1:]
		against = slices.MinFunc(cands, func(a, b Row) int { return cmpMoney(a.EstimatedCostPer1000, b.EstimatedCostPer1000) })
	} else {
		against = rows[0]
	}
	v.Against = against.Policy
	costOf := func(policy, id string) (tokens.Money, bool) {
		if policy == Own {
			return real[id].Cost, true
		}
		s, ok := byCand[policy][id]
		if !ok {
			return 0, false
		}
		return s.EstimatedCost, true
	}
	// Paired differences (against − cheapest) over the calls both were measured on.
	var diffs []float64
	for id := range real {
		a, ok1 := costOf(against.Policy, id)
		c, ok2 := costOf(cheapest.Policy, id)
		if !ok1 || !ok2 {
			continue
		}
		diffs = append(diffs, float64(a-c))
	}
	mean, half := interval95(diffs)
	v.DifferencePer1000 = tokens.Money(math.Round(mean * 1000))
	v.Low95, v.High95 = tokens.Money(math.Round((mean-half)*1000)), tokens.Money(math.Round((mean+half)*1000))
	v.Sure = mean-half > 0
	how := "not sure: the interval includes zero"
	if v.Sure {
		how = "sure at 95%: the interval excludes zero"
	}
	v.Text = cheapest.Policy + " is cheapest: $" + v.DifferencePer1000.Fixed(4) + " per 1,000 calls less than " + against.Policy +
		" (estimate; 95% interval $" + v.Low95.Fixed(4) + " to $" + v.High95.Fixed(4) + "; " + how + ")"
	return v
}

// interval95 is the mean of xs and the half-width of its 95% interval (1.96 standard errors).
func interval95(xs []float64) (mean, half float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, math.Inf(1)
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	sd := math.Sqrt(ss / float64(len(xs)-1))
	return mean, 1.96 * sd / math.Sqrt(float64(len(xs)))
}

func cmpMoney(a, b tokens.Money) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func joinNames(ns []string) string {
	out := ""
	for i, n := range ns {
		if i > 0 {
			out += ", "
		}
		out += n
	}
	return out
}

// timing reads each conversation's calls in time order: the gaps between them, and the TTL
// arithmetic at each call's model's input price.
func timing(tenant string, calls []tokens.Call, prices *tokens.Prices) (Gaps, TTL) {
	byConv := map[string][]*tokens.Call{}
	for i := range calls {
		c := &calls[i]
		if c.Tenant != tenant || c.Shadow != nil || c.CountTokens != nil || c.Conversation == "" || c.Status != 200 {
			continue
		}
		byConv[c.Conversation] = append(byConv[c.Conversation], c)
	}
	var g Gaps
	var t TTL
	g.Conversat = len(byConv)
	for _, cs := range byConv {
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].Time.Before(cs[j].Time) })
		for i, c := range cs {
			in := tokens.Money(0)
			if e, ok := prices.Lookup(c.Model); ok {
				in = e.Price.Input
			}
			w, r := c.Usage.CacheCreationInputTokens, c.Usage.CacheReadInputTokens
			t.Writes += w
			t.Reads += r
			var kept int64
			if i > 0 {
				gap := c.Time.Sub(cs[i-1].Time)
				g.Gaps++
				if gap > 5*time.Minute {
					g.Over5m++
					if gap <= time.Hour {
						// What the previous call cached and this one wrote again: a 1-hour entry
						// would still have been there to read.
						p := cs[i-1].Usage.CacheReadInputTokens + cs[i-1].Usage.CacheCreationInputTokens
						kept = min(p, w)
					} else {
						g.Over1h++
					}
				}
			}
			t.Kept1h += kept
			t.Cost5m = t.Cost5m.Plus(write5m.Apply(in.Times(w))).Plus(read.Apply(in.Times(r)))
			t.Cost1h = t.Cost1h.Plus(write1h.Apply(in.Times(w - kept))).Plus(read.Apply(in.Times(r + kept)))
		}
	}
	if g.Gaps > 0 {
		g.Share5m = float64(g.Over5m) / float64(g.Gaps)
	}
	t.Cheaper1h = t.Cost1h < t.Cost5m
	return g, t
}
