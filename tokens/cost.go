package tokens

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// Ratio is a price factor in thousandths (1250 = 1.25×), so factors apply to Money exactly up to
// one rounding.
type Ratio int64

// apply is m × r, rounded half away from zero to the nano-dollar; an amount past int64
// saturates (Money.Times).
func (r Ratio) apply(m Money) Money {
	v := m.Times(int64(r))
	if v == MaxMoney || v == MinMoney {
		return v
	}
	q, rem := v/1000, v%1000
	switch {
	case rem >= 500:
		q++
	case rem <= -500:
		q--
	}
	return q
}

// Apply is m × r (a price factor on an amount), as the price table applies it.
func (r Ratio) Apply(m Money) Money { return r.apply(m) }

// Factors are the price table's factors (prices.yaml `factors:` and `web_search_per_1000`),
// from the public pricing page (the 2026 API reference's usage-pricing section).
type Factors struct {
	CacheWrite   Ratio // 5-minute cache write × input, for entries without cache_write
	CacheWrite1h Ratio // 1-hour cache write × input, for entries without cache_write_1h
	CacheRead    Ratio // cache read × input, for entries without cache_read
	Batch        Ratio // × the token cost of a call with usage.service_tier "batch"
	WebSearch    Money // per web search (server_tool_use.web_search_requests)
}

// DefaultFactors are the list-price factors: cache writes 1.25× (5 minutes) and 2× (1 hour)
// input, reads 0.1×, the batch tier half price, web search $10 per 1,000.
var DefaultFactors = Factors{CacheWrite: 1250, CacheWrite1h: 2000, CacheRead: 100, Batch: 500, WebSearch: 10_000_000}

// CostBreakdown is how a call's cost is made: each token kind at its price (every iteration at
// its own model's), web searches, and the batch tier's discount (negative). Cost is their sum.
type CostBreakdown struct {
	Input, Output, CacheWrite5m, CacheWrite1h, CacheRead Money
	WebSearch                                            Money
	BatchDiscount                                        Money
}

// Total is the sum of the parts.
func (b CostBreakdown) Total() Money {
	return b.Input.Plus(b.Output).Plus(b.CacheWrite5m).Plus(b.CacheWrite1h).Plus(b.CacheRead).Plus(b.WebSearch).Plus(b.BatchDiscount)
}

func (b *CostBreakdown) addTokens(pr Price, u Usage) {
	oneHour := min(max(u.CacheCreation1hInputTokens, 0), u.CacheCreationInputTokens)
	b.Input = b.Input.Plus(pr.Input.Times(u.InputTokens))
	b.Output = b.Output.Plus(pr.Output.Times(u.OutputTokens))
	b.CacheWrite5m = b.CacheWrite5m.Plus(pr.CacheWrite.Times(u.CacheCreationInputTokens - oneHour))
	b.CacheWrite1h = b.CacheWrite1h.Plus(pr.CacheWrite1h.Times(oneHour))
	b.CacheRead = b.CacheRead.Plus(pr.CacheRead.Times(u.CacheReadInputTokens))
}

// TierBatch is usage.service_tier of a Message Batches call.
const TierBatch = "batch"

// priceCall prices c at entry e (the call's model): every iteration at its own model's price
// (found by lookup) when the reply had usage.iterations (the top-level usage leaves out compaction steps), else
// the usage; web searches per search; the batch tier's factor on the token cost and savings.
// ok is false when an iteration names a model without a price.
func (p *Prices) priceCall(c *Call, e *PriceEntry, lookup func(string) (*PriceEntry, bool)) (ok bool) {
	f := p.Factors()
	var b CostBreakdown
	var compaction CostBreakdown
	if c.Iterations == nil {
		b.addTokens(e.For(c.Usage), c.Usage)
	}
	for i := range c.Iterations {
		it := &c.Iterations[i]
		pe := e
		if it.Model != "" && it.Model != c.Model {
			if pe, ok = lookup(it.Model); !ok {
				return false
			}
		}
		var ib CostBreakdown
		ib.addTokens(pe.For(it.Usage), it.Usage)
		it.Cost = ib.Total()
		if c.ServiceTier == TierBatch {
			it.Cost = f.Batch.apply(it.Cost)
		}
		b.add(ib)
		if it.Type == IterationCompaction {
			compaction.add(ib)
		}
	}
	tokens := b.Total()
	c.CompactionCost = compaction.Total()
	if c.ServiceTier == TierBatch {
		b.BatchDiscount = f.Batch.apply(tokens).Plus(-tokens)
		c.CompactionCost = f.Batch.apply(c.CompactionCost)
	}
	b.WebSearch = f.WebSearch.Times(c.Usage.WebSearchRequests)
	c.Breakdown = b
	c.Cost = b.Total()
	priceSavings(c, e.Price, f)
	return true
}

func (b *CostBreakdown) add(o CostBreakdown) {
	b.Input = b.Input.Plus(o.Input)
	b.Output = b.Output.Plus(o.Output)
	b.CacheWrite5m = b.CacheWrite5m.Plus(o.CacheWrite5m)
	b.CacheWrite1h = b.CacheWrite1h.Plus(o.CacheWrite1h)
	b.CacheRead = b.CacheRead.Plus(o.CacheRead)
	b.WebSearch = b.WebSearch.Plus(o.WebSearch)
	b.BatchDiscount = b.BatchDiscount.Plus(o.BatchDiscount)
}

// countCompactions is the number of compaction steps in the call's iterations.
func countCompactions(its []Iteration) int64 {
	var n int64
	for _, it := range its {
		if it.Type == IterationCompaction {
			n++
		}
	}
	return n
}

// parseFactors reads prices.yaml's factors mapping onto f.
func parseFactors(n *yaml.Node, f *Factors) error {
	if n.Kind != yaml.MappingNode {
		return lineErr(n, "factors must be a mapping of cache_write, cache_write_1h, cache_read, batch")
	}
	return fields(n, "factors", []string{"cache_write", "cache_write_1h", "cache_read", "batch"}, func(key string, k, v *yaml.Node) error {
		dst := map[string]*Ratio{"cache_write": &f.CacheWrite, "cache_write_1h": &f.CacheWrite1h, "cache_read": &f.CacheRead, "batch": &f.Batch}[key]
		r, err := parseNumber(v, 3)
		if err != nil {
			return lineErr(v, "factors.%s: %v (a factor such as 1.25, at most 3 decimals)", key, err)
		}
		*dst = Ratio(r)
		return nil
	})
}

// parseWebSearch reads web_search_per_1000 (USD per 1,000 searches) as Money per search.
func parseWebSearch(v *yaml.Node) (Money, error) {
	n, err := parseNumber(v, 6) // USD per 1,000 with 6 decimals = nano-USD per search
	if err != nil {
		return 0, lineErr(v, "web_search_per_1000: %v (USD per 1,000 searches, at most 6 decimals)", err)
	}
	return Money(n), nil
}

func parseNumber(v *yaml.Node, scale int) (int64, error) {
	if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") {
		return 0, fmt.Errorf("want a number, got %q", v.Value)
	}
	n, err := parseDecimal(v.Value, scale)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("negative")
	}
	return n, nil
}

// PriceCompactionMeasure fills c.CompactionSavings on the count_tokens call that measured a
// compaction: the input tokens compaction spared (what the request counts without it, less what
// the compacted call read) at the model's input price; 0 when compaction spared nothing or the
// model has no price.
func (p *Prices) PriceCompactionMeasure(c *Call) {
	c.CompactionSavings = 0
	e, ok := p.Lookup(c.Model)
	if !ok || c.CountTokens == nil || c.CountTokens.InputTokens <= c.CompactedInputTokens {
		return
	}
	c.CompactionSavings = e.Price.Savings(c.CountTokens.InputTokens - c.CompactedInputTokens)
}
