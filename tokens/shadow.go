package tokens

// The policy lab's estimate, defined once here: the ledger's shadow lines carry it, and
// `ctxproxy advise` and the console read it from them.
//
// For a shadowed call with actual input after the tenant's edits T (input + cache read + cache
// write), the candidate's count T′ and the call's actual cost and cache activity, at the
// model's own prices (as the net savings are):
//   - D = T − T′ is priced at the cache-read price when the call was cached (read or wrote the
//     cache), else at the input price: estimate = actual cost − D × that price (D may be
//     negative: the candidate keeps more);
//   - on a new clearing point of the candidate (its cleared′ = original − input tokens grew
//     since its latest earlier measurement in the conversation), a cached call is also charged
//     the re-write of the conversation's previous cached prefix P: P × (5m write − read);
//   - with no new clearing point there, the candidate is credited the real call's cache
//     penalty (it would not have paid it): the pessimistic case, where the cache falls back
//     to tools and system;
//   - output tokens are assumed equal.
// Against no edits (the same call with T′ = the count before edits, never a clearing point):
// savings = that estimate − the candidate's.

// EndpointShadow is the ledger's "endpoint" of a policy-lab measurement.
const EndpointShadow = "shadow"

// Shadow is one policy-lab measurement: a candidate's count_tokens answer for a shadowed call,
// and the estimate made of it. Its ledger line is left out of the tenant's spend (reports,
// metrics, caps): the call is billed nothing.
type Shadow struct {
	Name    string // the candidate
	Shadows string // the shadowed call's request_id, as its own line has it
	// InputTokens and OriginalInputTokens are the candidate's count after and before its
	// edits (original = input when the request had no context_management).
	InputTokens, OriginalInputTokens int64
	// CompactNotMeasured: the candidate writes compact_20260112, which count_tokens never
	// applies; its estimate is of its other edits only.
	CompactNotMeasured bool

	// What the estimate reads of the shadowed call (its ledger line), and of the
	// conversation; not written to the shadow line but the new clearing point.
	Actual           ShadowedCall
	NewClearingPoint bool
	PrevCached       int64 // P: the conversation's previous call's cache read + creation; 0 unknown

	// EstimatedCost and EstimatedSavings (against no edits) are filled by Prices.PriceShadow.
	EstimatedCost, EstimatedSavings Money
}

// ShadowedCall is what the estimate takes from the shadowed call's priced ledger line.
type ShadowedCall struct {
	Usage        Usage
	Cost         Money
	CachePenalty Money
	PriceUnknown bool
}

// ShadowedCallOf is the part of a priced line the estimate reads.
func ShadowedCallOf(c *Call) ShadowedCall {
	return ShadowedCall{Usage: c.Usage, Cost: c.Cost, CachePenalty: c.CachePenalty, PriceUnknown: c.PriceUnknown}
}

// ClearedTokens is cleared′: what the candidate's edits cleared (before − after).
func (s *Shadow) ClearedTokens() int64 { return max(0, s.OriginalInputTokens-s.InputTokens) }

// PriceShadow fills c.Shadow's estimate at the model's price; a model without a price (or a
// shadowed call that had none) leaves it zero and marks the line price_unknown.
func (p *Prices) PriceShadow(c *Call) {
	s := c.Shadow
	e, ok := p.Lookup(c.Model)
	if s == nil || !ok || s.Actual.PriceUnknown {
		c.PriceUnknown = true
		if s != nil {
			s.EstimatedCost, s.EstimatedSavings = 0, 0
		}
		return
	}
	c.PriceUnknown = false
	s.EstimatedCost, s.EstimatedSavings = e.Price.ShadowEstimate(s)
}

// ShadowEstimate is the estimate of s at price pr: the candidate's cost, and its savings
// against no edits.
func (pr Price) ShadowEstimate(s *Shadow) (cost, savings Money) {
	a := &s.Actual
	unit := pr.Input
	if cached(a.Usage) {
		unit = pr.CacheRead
	}
	t := a.Usage.TotalInput()
	cost = a.Cost.Plus(-unit.Times(t - s.InputTokens))
	if s.NewClearingPoint {
		if cached(a.Usage) {
			cost = cost.Plus((pr.CacheWrite - pr.CacheRead).Times(max(s.PrevCached, 0)))
		}
	} else {
		cost = cost.Plus(-a.CachePenalty)
	}
	noEdits := a.Cost.Plus(-unit.Times(t - s.OriginalInputTokens)).Plus(-a.CachePenalty)
	return cost, noEdits.Plus(-cost)
}
