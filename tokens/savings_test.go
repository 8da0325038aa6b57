package tokens

import "testing"

// Every figure by hand at claude-sonnet-4-5's list prices, USD per million tokens: input 3,
// 5m write 3.75, 1h write 6, read 0.30 (nano-USD per token: 3000, 3750, 6000, 300).
func TestNetSavingsToTheNanoDollar(t *testing.T) {
	p := shippedPrices(t)
	clear := func(n int64) []AppliedEdit {
		return []AppliedEdit{{Type: EditClearToolUses, ClearedToolUses: 1, ClearedInputTokens: n}}
	}
	tests := []struct {
		name                  string
		call                  Call
		gross, penalty, saved Money
		effect                string
	}{
		{
			name:  "without the cache the cleared tokens are saved at the input price",
			call:  Call{Usage: Usage{InputTokens: 9000}, Edits: clear(1000), CacheEffect: CacheMeasured},
			gross: 3_000_000, saved: 3_000_000, effect: CacheNone,
		},
		{
			name:  "with the cache they are saved at the read price",
			call:  Call{Usage: Usage{InputTokens: 10, CacheReadInputTokens: 9000}, Edits: clear(1000), CacheEffect: CacheMeasured},
			gross: 300_000, saved: 300_000, effect: CacheMeasured,
		},
		{
			// 1000 × 300 − 4000 × (3750 − 300) = 300,000 − 13,800,000
			name: "a miss the edits caused is charged at write − read and can make savings negative",
			call: Call{Usage: Usage{CacheReadInputTokens: 2000, CacheCreationInputTokens: 4100}, Edits: clear(1000),
				CacheEffect: CacheMeasured, CacheMissCause: CauseEdits, CacheMissedInputTokens: 4000},
			gross: 300_000, penalty: 13_800_000, saved: -13_500_000, effect: CacheMeasured,
		},
		{
			// M = 1001 split as the call's writes (1h 1 of 3): M1h = ⌊1001/3⌋ = 333, M5m = 668;
			// 333 × (6000 − 300) + 668 × (3750 − 300) = 1,898,100 + 2,304,600
			name: "the missed tokens split between 1h and 5m writes as the call's own writes, 1h rounded down",
			call: Call{Usage: Usage{CacheReadInputTokens: 10, CacheCreationInputTokens: 3000, CacheCreation1hInputTokens: 1000}, Edits: clear(10),
				CacheEffect: CacheMeasured, CacheMissCause: CauseEdits, CacheMissedInputTokens: 1001},
			gross: 3_000, penalty: 4_202_700, saved: 3_000 - 4_202_700, effect: CacheMeasured,
		},
		{
			name: "a miss of another cause is recorded, not charged",
			call: Call{Usage: Usage{CacheCreationInputTokens: 5000}, Edits: clear(1000),
				CacheEffect: CacheMeasured, CacheMissCause: CauseExpiry, CacheMissedInputTokens: 4000},
			gross: 300_000, saved: 300_000, effect: CacheMeasured,
		},
		{
			name:  "an unknown conversation is charged nothing",
			call:  Call{Usage: Usage{CacheCreationInputTokens: 5000}, Edits: clear(1000), CacheMissCause: CauseEdits, CacheMissedInputTokens: 4000},
			gross: 300_000, saved: 300_000, effect: CacheUnknown,
		},
		{
			name:   "a call without edits has no cache effect",
			call:   Call{Usage: Usage{CacheReadInputTokens: 5000}, CacheEffect: CacheMeasured, CacheMissCause: CauseSystem, CacheMissedInputTokens: 70},
			effect: CacheNone,
		},
		{
			// (300,000 − 13,800,000) each halved
			name: "the batch tier halves gross and penalty alike",
			call: Call{ServiceTier: TierBatch, Usage: Usage{CacheReadInputTokens: 2000, CacheCreationInputTokens: 4100}, Edits: clear(1000),
				CacheEffect: CacheMeasured, CacheMissCause: CauseEdits, CacheMissedInputTokens: 4000},
			gross: 150_000, penalty: 6_900_000, saved: -6_750_000, effect: CacheMeasured,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.call
			c.Model = "claude-sonnet-4-5"
			p.Price(&c)
			if c.SavingsGross != tt.gross || c.CachePenalty != tt.penalty || c.Savings != tt.saved || c.CacheEffect != tt.effect {
				t.Errorf("gross %s penalty %s savings %s effect %q, want %s %s %s %q",
					c.SavingsGross, c.CachePenalty, c.Savings, c.CacheEffect, tt.gross, tt.penalty, tt.saved, tt.effect)
			}
		})
	}
}

func TestSplitFloorNeverOverflows(t *testing.T) {
	for _, tt := range []struct{ m, part, whole, want int64 }{
		{1001, 1000, 3000, 333},
		{1 << 62, 1 << 61, 1 << 62, 1 << 61},
		{5, 0, 0, 0},
		{5, 3, 3, 5},
	} {
		if got := splitFloor(tt.m, tt.part, tt.whole); got != tt.want {
			t.Errorf("splitFloor(%d, %d, %d) = %d, want %d", tt.m, tt.part, tt.whole, got, tt.want)
		}
	}
}

func TestALedgerLineFromBeforeNetSavingsReadsAsRecorded(t *testing.T) {
	line := `{"v":1,"time":"2026-03-01T10:00:00Z","tenant":"acme","model":"claude-sonnet-4-5","request_id":"req_1","stream":false,"status":200,` +
		`"usage":{"input_tokens":10,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":500},` +
		`"applied_edits":[{"type":"clear_tool_uses_20250919","cleared_tool_uses":1,"cleared_input_tokens":1000}],` +
		`"cleared_input_tokens":1000,"cost_usd":0.001,"savings_usd":0.003,"price_unknown":false}`
	c, err := UnmarshalCall([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if c.Savings != 3_000_000 || c.SavingsGross != 3_000_000 || c.CachePenalty != 0 || c.CacheEffect != CacheNone {
		t.Errorf("savings %s gross %s penalty %s effect %q", c.Savings, c.SavingsGross, c.CachePenalty, c.CacheEffect)
	}
}
