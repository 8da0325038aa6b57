package tokens

import "math/bits"

// The savings of context editing net of the prompt cache, defined once here: the
// ledger, the reports, the metrics and the caps all read what Price puts in a Call.
//
// For a call that cleared C input tokens (the sum over applied_edits) and whose edits the proxy
// charged M missed cache tokens (Call.AttributedMissTokens):
//   - gross = C × (cache read price if the call read or wrote the cache, else input price): a
//     cleared token of a cached prompt would mostly have been a read;
//   - penalty = M × (write price − read price), M split between 5m and 1h writes in the
//     proportion of the call's own cache writes (all 5m when it wrote none);
//   - savings = gross − penalty, which may be negative.

// cached reports whether a call read or wrote the prompt cache.
func cached(u Usage) bool { return u.CacheReadInputTokens+u.CacheCreationInputTokens > 0 }

// settleCacheEffect is the call's cache_effect: none when it had no edits or no cache (this
// wins), else what the proxy measured, unknown when it could not.
func settleCacheEffect(c *Call) string {
	if len(c.Edits) == 0 || !cached(c.Usage) {
		return CacheNone
	}
	if c.CacheEffect == CacheMeasured {
		return CacheMeasured
	}
	return CacheUnknown
}

// GrossSavings is what clearing cleared tokens saved at this price: at the cache read price when
// the call used the cache, else at the input price.
func (pr Price) GrossSavings(cleared int64, u Usage) Money {
	if cached(u) {
		return pr.CacheRead.Times(cleared)
	}
	return pr.Input.Times(cleared)
}

// CachePenalty is what re-writing missed tokens to the cache cost over reading them: the 1h part
// (⌊missed × 1h writes ÷ all writes⌋ of the call's own writes) at the 1h write price, the rest at
// the 5m write price, each less the read price.
func (pr Price) CachePenalty(missed int64, u Usage) Money {
	if missed <= 0 {
		return 0
	}
	m1h := splitFloor(missed, min(max(u.CacheCreation1hInputTokens, 0), u.CacheCreationInputTokens), u.CacheCreationInputTokens)
	p := (pr.CacheWrite1h - pr.CacheRead).Times(m1h)
	return p.Plus((pr.CacheWrite - pr.CacheRead).Times(missed - m1h))
}

// splitFloor is ⌊m × part ÷ whole⌋ without overflow (0 when whole ≤ 0; 0 ≤ part ≤ whole).
func splitFloor(m, part, whole int64) int64 {
	if whole <= 0 || part <= 0 || m <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(m), uint64(part))
	q, _ := bits.Div64(hi, lo, uint64(whole)) // q ≤ m since part ≤ whole: no overflow
	return int64(q)
}

// priceSavings fills c's gross savings, cache penalty, net savings and cache effect at price pr,
// the batch tier's factor applied to each part.
func priceSavings(c *Call, pr Price, f Factors) {
	c.CacheEffect = settleCacheEffect(c)
	gross := pr.GrossSavings(ClearedInputTokens(c.Edits), c.Usage)
	var penalty Money
	if c.CacheEffect == CacheMeasured {
		penalty = pr.CachePenalty(c.AttributedMissTokens(), c.Usage)
	}
	if c.ServiceTier == TierBatch {
		gross, penalty = f.Batch.apply(gross), f.Batch.apply(penalty)
	}
	c.SavingsGross, c.CachePenalty = gross, penalty
	c.Savings = gross.Plus(-penalty)
}
