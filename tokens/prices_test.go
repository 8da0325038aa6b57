package tokens

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func shippedPrices(t testing.TB) *Prices {
	t.Helper()
	p, err := LoadPrices("builtin_prices.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// usd parses a dollar amount for expectations.
func usd(t testing.TB, s string) Money {
	t.Helper()
	m, err := ParseMoney(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestShippedPrices(t *testing.T) {
	p := shippedPrices(t)
	// USD per million tokens: input, output, 5m write, read.
	tests := []struct {
		model, label                 string
		in, out, write, read, write1 string
	}{
		{"claude-opus-4-5-20251101", "claude-opus-4-5", "5", "25", "6.25", "0.5", "10"},
		{"claude-opus-4-6", "claude-opus-4-6", "5", "25", "6.25", "0.5", "10"},
		{"claude-opus-4-7", "claude-opus-4-7", "5", "25", "6.25", "0.5", "10"},
		{"claude-opus-4-8", "claude-opus-4-8", "5", "25", "6.25", "0.5", "10"},
		{"claude-opus-5", "claude-opus-5", "5", "25", "6.25", "0.5", "10"},
		{"claude-opus-4-1-20250805", "claude-opus-4-1", "15", "75", "18.75", "1.5", "30"},
		{"claude-opus-4-20250514", "claude-opus-4-20250514", "15", "75", "18.75", "1.5", "30"},
		{"claude-opus-4-0", "claude-opus-4-0", "15", "75", "18.75", "1.5", "30"},
		{"claude-sonnet-4-20250514", "claude-sonnet-4-20250514", "3", "15", "3.75", "0.3", "6"},
		{"claude-sonnet-4-5-20250929", "claude-sonnet-4-5", "3", "15", "3.75", "0.3", "6"},
		{"claude-sonnet-4-5@20250929", "claude-sonnet-4-5", "3", "15", "3.75", "0.3", "6"},
		{"claude-sonnet-4-6", "claude-sonnet-4-6", "3", "15", "3.75", "0.3", "6"},
		{"claude-haiku-4-5-20251001", "claude-haiku-4-5", "1", "5", "1.25", "0.1", "2"},
		{"claude-3-haiku-20240307", "claude-3-haiku", "0.25", "1.25", "0.3", "0.03", "0.5"},
		{"claude-fable-5", "claude-fable-5", "10", "50", "12.5", "1", "20"},
		{"claude-mythos-5", "claude-mythos-5", "10", "50", "12.5", "1", "20"},
		{"claude-fable-5-1", "claude-fable-5-1", "10", "50", "12.5", "0.25", "20"},
		{"claude-mythos-5-1-20260101", "claude-mythos-5-1", "10", "50", "12.5", "0.25", "20"},
		{"claude-opus-5-5", "claude-opus-5-5", "4", "20", "5", "0.2", "8"},
		{"claude-opus-5-5-20260916", "claude-opus-5-5", "4", "20", "5", "0.2", "8"},
		{"claude-sonnet-5", "claude-sonnet-5", "2", "10", "2.5", "0.2", "4"},
		{"claude-sonnet-5-5", "claude-sonnet-5-5", "2", "10", "2.5", "0.1", "4"},
		{"claude-haiku-5-5", "claude-haiku-5-5", "0.1", "0.5", "0.125", "0.01", "0.2"},
		{"claude-fable-5-2", "claude-fable-5-2", "8", "40", "10", "0.2", "16"},
		{"claude-mythos-5-2@20261118", "claude-mythos-5-2", "8", "40", "10", "0.2", "16"},
	}
	perMTok := func(s string) Money { return usd(t, s) / 1_000_000 }
	for _, tt := range tests {
		t.Run(tt.model+" is priced as "+tt.label, func(t *testing.T) {
			e, ok := p.Lookup(tt.model)
			if !ok {
				t.Fatal("no price")
			}
			want := Price{Input: perMTok(tt.in), Output: perMTok(tt.out), CacheWrite: perMTok(tt.write),
				CacheRead: perMTok(tt.read), CacheWrite1h: perMTok(tt.write1)}
			if e.Price != want || e.Label() != tt.label || p.Label(tt.model) != tt.label {
				t.Errorf("got %+v label %q, want %+v label %q", e.Price, e.Label(), want, tt.label)
			}
		})
	}
	// A model whose name starts with a priced one is not that one: claude-opus-5-6 is unknown,
	// never claude-opus-5's price.
	for _, m := range []string{"claude-sonnet-4-50", "gpt-4o", "", "claude-opus-4", "claude-2.1",
		"claude-opus-5-6", "claude-sonnet-5-7", "claude-fable-5-3", "claude-haiku-5-5-mini", "claude-opus-4-8-fast"} {
		t.Run(m+" is unknown", func(t *testing.T) {
			if e, ok := p.Lookup(m); ok {
				t.Errorf("priced as %s", e.Label())
			}
			if p.Label(m) != OtherLabel {
				t.Errorf("label %q", p.Label(m))
			}
		})
	}
}

const testPrices = `models:
  - prefix: claude-x
    input: 1
    output: 2
    cache_write: 3
    cache_read: 0.1
  - prefix: claude-x-big
    input: 10
    output: 20
    cache_write: 30
    cache_read: 1
  - model: claude-x-big-exact
    input: 100
    output: 200
    cache_write: 300
    cache_read: 10
`

func TestLookupPrecedence(t *testing.T) {
	p, err := ParsePrices([]byte(testPrices))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ model, label string }{
		{"claude-x", "claude-x"},
		{"claude-x-20250101", "claude-x"},
		{"claude-x@20250101", "claude-x"},
		{"claude-x-big-20250101", "claude-x-big"},    // a snapshot of the longer name is its own
		{"claude-x-big", "claude-x-big"},             // a prefix entry names its own model
		{"claude-x-big-exact", "claude-x-big-exact"}, // exact beats prefix
		{"claude-x-big-2", OtherLabel},               // another model, not claude-x-big's
		{"claude-x-big-exact-20250101", OtherLabel},  // exact entries name no snapshot
		{"claude-xy", OtherLabel},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			if got := p.Label(tt.model); got != tt.label {
				t.Errorf("label %q, want %q", got, tt.label)
			}
		})
	}
	if got := strings.Join(p.Models(), ","); got != "claude-x,claude-x-big,claude-x-big-exact" {
		t.Errorf("Models() = %s", got)
	}
}

func TestPriceCallToTheCent(t *testing.T) {
	p := shippedPrices(t)
	tests := []struct {
		name          string
		call          Call
		cost, savings string
		unknown       bool
	}{
		{
			// 1,000,000×3 + 200,000×15 + 100,000×3.75 + 2,000,000×0.30 per million
			// = 3 + 3 + 0.375 + 0.6 = 6.975; savings 50,000+1,800 cleared × the read price 0.30/M
			// = 0.01554 (the call used the cache: a cleared token would have been a read)
			name: "sonnet 4.5 with cache writes, reads and two edits",
			call: Call{Model: "claude-sonnet-4-5-20250929",
				Usage: Usage{InputTokens: 1_000_000, OutputTokens: 200_000, CacheCreationInputTokens: 100_000, CacheReadInputTokens: 2_000_000},
				Edits: []AppliedEdit{{Type: EditClearToolUses, ClearedToolUses: 8, ClearedInputTokens: 50_000}, {Type: EditClearThinking, ClearedThinkingTurns: 2, ClearedInputTokens: 1_800}}},
			cost: "6.975", savings: "0.01554",
		},
		{
			// 1 input token of Haiku 3 = $0.00000025; 1 cache read = $0.00000003
			name: "single tokens of the cheapest model are exact",
			call: Call{Model: "claude-3-haiku-20240307", Usage: Usage{InputTokens: 1, CacheReadInputTokens: 1}},
			cost: "0.00000028", savings: "0",
		},
		{
			// 4200×5 + 350×25 + 12000×0.5 = 21000+8750+6000 = 35750 / 1e6 = 0.03575; savings
			// 12000 × the read price 0.5 = 0.006
			name: "opus 4.8 typical agent turn",
			call: Call{Model: "claude-opus-4-8", Usage: Usage{InputTokens: 4200, OutputTokens: 350, CacheReadInputTokens: 12000},
				Edits: []AppliedEdit{{Type: EditClearToolUses, ClearedInputTokens: 12000}}},
			cost: "0.03575", savings: "0.006",
		},
		{
			// no cache_control, so no cache: the cleared tokens are saved at the input price
			name: "a call without the cache saves at the input price",
			call: Call{Model: "claude-opus-4-8", Usage: Usage{InputTokens: 4200, OutputTokens: 350},
				Edits: []AppliedEdit{{Type: EditClearToolUses, ClearedInputTokens: 12000}}},
			cost: "0.02975", savings: "0.06",
		},
		{
			// 100 5m writes × 3.75 + 200 1h writes × 6 = 375 + 1200 = 1575 / 1e6
			name: "1h cache writes are priced at the 1h price",
			call: Call{Model: "claude-sonnet-4-6", Usage: Usage{CacheCreationInputTokens: 300, CacheCreation1hInputTokens: 200}},
			cost: "0.001575", savings: "0",
		},
		{
			// the December models at their own read prices: 1M reads of Opus 5.5 = $0.20 (not
			// Opus 5's $0.50), of Fable 5.1 = $0.25, of Sonnet 5.5 = $0.10
			name: "opus 5.5 reads the cache at 0.05x input",
			call: Call{Model: "claude-opus-5-5", Usage: Usage{InputTokens: 1_000_000, CacheReadInputTokens: 1_000_000}},
			cost: "4.2", savings: "0",
		},
		{
			name: "fable 5.1 reads the cache at 0.025x input",
			call: Call{Model: "claude-fable-5-1", Usage: Usage{CacheReadInputTokens: 1_000_000}},
			cost: "0.25", savings: "0",
		},
		{
			name: "sonnet 5.5 reads the cache at 0.05x input",
			call: Call{Model: "claude-sonnet-5-5-20261028", Usage: Usage{CacheReadInputTokens: 1_000_000}},
			cost: "0.1", savings: "0",
		},
		{
			// 100,000 prompt tokens is not over the threshold: 50,000×0.10 + 50,000×0.01 +
			// 10,000×0.50 = 5000+500+5000 = 10500 / 1e6
			name: "haiku 5.5 at 100,000 prompt tokens is at the short-prompt price",
			call: Call{Model: "claude-haiku-5-5", Usage: Usage{InputTokens: 50_000, CacheReadInputTokens: 50_000, OutputTokens: 10_000}},
			cost: "0.0105", savings: "0",
		},
		{
			// one more prompt token (a cache write) moves every token of the call to the long
			// price: 50,000×0.50 + 50,000×0.05 + 1×0.625 + 10,000×2.50
			// = 25000+2500+0.625+25000 = 52500.625 / 1e6
			name: "haiku 5.5 over 100,000 prompt tokens is at the long-prompt price, output included",
			call: Call{Model: "claude-haiku-5-5", Usage: Usage{InputTokens: 50_000, CacheReadInputTokens: 50_000, CacheCreationInputTokens: 1, OutputTokens: 10_000}},
			cost: "0.052500625", savings: "0",
		},
		{
			name: "unknown model is marked, not priced at zero silently",
			call: Call{Model: "gpt-4o", Usage: Usage{InputTokens: 1000}, Edits: []AppliedEdit{{ClearedInputTokens: 5}}, Cost: 77},
			cost: "0", savings: "0", unknown: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.call
			p.Price(&c)
			if c.Cost != usd(t, tt.cost) || c.Savings != usd(t, tt.savings) || c.PriceUnknown != tt.unknown {
				t.Errorf("cost %s savings %s unknown %v, want %s %s %v", c.Cost, c.Savings, c.PriceUnknown, tt.cost, tt.savings, tt.unknown)
			}
		})
	}
	t.Run("a thousand calls sum exactly", func(t *testing.T) {
		var sum Money
		for i := 0; i < 1000; i++ {
			c := Call{Model: "claude-3-haiku", Usage: Usage{InputTokens: 1, CacheReadInputTokens: 1}}
			p.Price(&c)
			sum += c.Cost
		}
		if sum.String() != "0.00028" {
			t.Errorf("sum = %s", sum)
		}
	})
}

func TestParsePricesErrors(t *testing.T) {
	entry := "    input: 1\n    output: 2\n    cache_write: 3\n    cache_read: 0.1\n"
	tests := []struct{ name, yaml, want string }{
		{"unknown top-level key", "models: []\nextra: 1\n", "line 2: unknown key \"extra\""},
		{"unknown entry key", "models:\n  - model: a\n" + entry + "    cache_hit: 1\n", "line 7: unknown key \"cache_hit\""},
		{"both model and prefix", "models:\n  - model: a\n    prefix: b\n" + entry, "line 2: entry has both model and prefix"},
		{"neither model nor prefix", "models:\n  -\n" + entry, "line 3: entry needs model or prefix"},
		{"missing price", "models:\n  - model: a\n    input: 1\n", "line 2: a: missing output"},
		{"more than 3 decimals", "models:\n  - model: a\n    input: 0.0001\n", "line 3: input \"0.0001\""},
		{"negative price", "models:\n  - model: a\n    input: -1\n", "line 3: input \"-1\": negative"},
		{"price as a string", "models:\n  - model: a\n    input: \"1\"\n", "line 3: input must be a number"},
		{"exponent", "models:\n  - model: a\n    input: 1e3\n", "line 3: input \"1e3\""},
		{"duplicate model", "models:\n  - model: a\n" + entry + "  - model: a\n" + entry, "line 7: model \"a\" already priced on line 2"},
		{"duplicate prefix", "models:\n  - prefix: a\n" + entry + "  - prefix: a\n" + entry, "line 7: prefix \"a\" already priced on line 2"},
		{"duplicate key", "models:\n  - model: a\n    input: 1\n    input: 2\n", "line 4: a models entry: duplicate key \"input\" (first at line 3)"},
		{"duplicate top-level key", "models: []\nmodels: []\n", "line 2: the prices file: duplicate key \"models\" (first at line 1)"},
		{"merge key", "base: &b\n  input: 1\nmodels:\n  - model: a\n    <<: *b\n    output: 2\n", "line 1: unknown key \"base\""},
		{"merge key in an entry", "models:\n  - model: a\n    <<: {input: 1}\n    output: 2\n", "line 3: a models entry: merge keys (<<) are not supported"},
		{"a key that is not a name", "models:\n  - model: a\n    [input]: 1\n", "line 3: a models entry: keys must be plain names"},
		{"unknown factor", "models: []\nfactors:\n  cache_hit: 1\n", "line 3: unknown key \"cache_hit\" in factors (known: cache_write, cache_write_1h, cache_read, batch)"},
		{"the first problem in the file is the one named", "models:\n  - model: a\n    input: -1\n    colour: red\n", "line 3: input \"-1\": negative"},
		{"long_prompt without threshold", "models:\n  - model: a\n" + entry + "    long_prompt:\n      input: 1\n      output: 2\n", "line 8: a: long_prompt: missing threshold_tokens"},
		{"long_prompt without output", "models:\n  - model: a\n" + entry + "    long_prompt:\n      threshold_tokens: 10\n      input: 1\n", "line 8: a: long_prompt: missing output"},
		{"long_prompt threshold not a count", "models:\n  - model: a\n" + entry + "    long_prompt:\n      threshold_tokens: 1.5\n", "line 8: threshold_tokens must be a positive whole number"},
		{"long_prompt unknown key", "models:\n  - model: a\n" + entry + "    long_prompt:\n      model: b\n", "line 8: unknown key \"model\" in long_prompt (known: threshold_tokens, input"},
		{"long_prompt not a mapping", "models:\n  - model: a\n" + entry + "    long_prompt: 5\n", "line 7: a: long_prompt must be a mapping"},
		{"models not a list", "models: {}\n", "models must be a list"},
		{"not yaml", "models: [\n", "line 1: invalid YAML: "},
		{"two documents", "models: []\n---\nmodels: []\n", "line 2: a policy or prices file holds one YAML document"},
		{"empty", "", "file is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePrices([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestMoney(t *testing.T) {
	tests := []struct {
		in, str, fixed2, fixed6 string
	}{
		{"0", "0.00", "0.00", "0.000000"},
		{"12.5", "12.50", "12.50", "12.500000"},
		{"0.1", "0.10", "0.10", "0.100000"},
		{"7.00000001", "7.00000001", "7.00", "7.000000"},
		{"0.000075", "0.000075", "0.00", "0.000075"},
		{"0.005", "0.005", "0.01", "0.005000"},
		{"-1.234567891", "-1.234567891", "-1.23", "-1.234568"},
		{"123456789.000000001", "123456789.000000001", "123456789.00", "123456789.000000"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			m := usd(t, tt.in)
			if m.String() != tt.str || m.Fixed(2) != tt.fixed2 || m.Fixed(6) != tt.fixed6 {
				t.Errorf("%q: String %s Fixed2 %s Fixed6 %s", tt.in, m, m.Fixed(2), m.Fixed(6))
			}
			b, _ := m.MarshalJSON()
			var back Money
			if err := back.UnmarshalJSON(b); err != nil || back != m {
				t.Errorf("JSON round trip %s -> %s (%v)", b, back, err)
			}
		})
	}
	for _, bad := range []string{"", ".", "1.2.3", "abc", "1e5", "0.0000000001", "99999999999999999999"} {
		if _, err := ParseMoney(bad); err == nil {
			t.Errorf("ParseMoney(%q) accepted", bad)
		}
	}
}

func TestMoneyDecimalsAreExact(t *testing.T) {
	// ref is m in dollars as fmt writes it, rounded half away from zero to decimals (0..9),
	// or every digit but the trailing zeros after the cents (-1).
	ref := func(m Money, decimals int) string {
		v := int64(m)
		u := uint64(v)
		if v < 0 {
			u = uint64(-v)
		}
		if decimals >= 0 {
			unit := uint64(math.Pow10(9 - decimals))
			u = (u + unit/2) / unit * unit
		}
		s := fmt.Sprintf("%d.%09d", u/NanosPerUSD, u%NanosPerUSD)
		if decimals >= 0 {
			s = strings.TrimSuffix(s[:len(s)-9+decimals], ".")
		} else {
			for strings.HasSuffix(s, "0") && len(s)-strings.IndexByte(s, '.') > 3 {
				s = s[:len(s)-1]
			}
		}
		if v < 0 && u != 0 {
			s = "-" + s
		}
		return s
	}
	values := []Money{0, 1, -1, 9, 10, 99, 100, NanosPerUSD - 1, NanosPerUSD, NanosPerUSD + 1, -NanosPerUSD,
		123_456_789, 100_000_000, 10_000_000, 1_000_000, 990_000_000, 999_999_999_999, math.MaxInt64, math.MinInt64, math.MinInt64 + 1}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		m := Money(rng.Int64N(int64(math.Pow10(1 + rng.IntN(18)))))
		if rng.IntN(2) == 0 {
			m = -m
		}
		values = append(values, m)
	}
	for _, m := range values {
		for decimals := -1; decimals <= 9; decimals++ {
			if got, want := string(m.appendDecimal([]byte("x"), decimals)), "x"+ref(m, decimals); got != want {
				t.Fatalf("%d nano-USD to %d decimals: %s, want %s", int64(m), decimals, got, want)
			}
		}
	}
}

func TestMoneyArithmeticSaturates(t *testing.T) {
	tests := []struct {
		name string
		got  Money
		want Money
	}{
		{"tokens at a price", Money(15_000).Times(4096), 61_440_000},
		{"a product past int64 stops at the top", Money(9_000_000_000_000_000).Times(4096), MaxMoney},
		{"a negative product past int64 stops at the bottom", Money(-9_000_000_000_000_000).Times(4096), MinMoney},
		{"MinMoney times -1 stops at the top", MinMoney.Times(-1), MaxMoney},
		{"zero tokens cost nothing", MaxMoney.Times(0), 0},
		{"a sum past int64 stops at the top", MaxMoney.Plus(1), MaxMoney},
		{"a negative sum past int64 stops at the bottom", MinMoney.Plus(-1), MinMoney},
		{"an ordinary sum", Money(7).Plus(-9), -2},
		{"a factor on a saturated amount stays saturated", Ratio(500).Apply(MaxMoney), MaxMoney},
		{"a factor rounds half away from zero", Ratio(500).Apply(3), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %d, want %d", tt.got, tt.want)
			}
		})
	}
	t.Run("a hostile usage prices to a huge cost, never a negative one", func(t *testing.T) {
		p, err := ParsePrices([]byte("models:\n  - model: m\n    input: 5\n    output: 25\n"))
		if err != nil {
			t.Fatal(err)
		}
		c := Call{Model: "m", Usage: Usage{InputTokens: 1 << 62, OutputTokens: 1 << 62}}
		p.Price(&c)
		if c.Cost != MaxMoney {
			t.Errorf("cost %d, want MaxMoney", c.Cost)
		}
	})
}

// exactTranscriptUsage is one call of a transcript with a compaction, a fallback
// to another model and cache writes of both TTLs, as the API reports it (the
// top-level usage leaves out the compaction step).
const exactTranscriptUsage = `{"input_tokens":1500,"output_tokens":800,"cache_creation_input_tokens":2000,"cache_read_input_tokens":0,` +
	`"cache_creation":{"ephemeral_5m_input_tokens":2000,"ephemeral_1h_input_tokens":0},"server_tool_use":{"web_search_requests":3},` +
	`"iterations":[` +
	`{"type":"compaction","input_tokens":180000,"output_tokens":3000,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},` +
	`{"type":"fallback_message","model":"claude-sonnet-4-5","input_tokens":2000,"output_tokens":500,"cache_creation_input_tokens":10000,"cache_read_input_tokens":50000,"cache_creation":{"ephemeral_5m_input_tokens":6000,"ephemeral_1h_input_tokens":4000}},` +
	`{"type":"message","model":"claude-opus-4-6","input_tokens":1500,"output_tokens":800,"cache_creation_input_tokens":2000,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":2000,"ephemeral_1h_input_tokens":0}}]}`

// Every figure by hand, USD per million tokens (opus 4.6: 5 in, 25 out,
// 6.25 5m write, 0.50 read; sonnet 4.5: 3, 15, 3.75, 6 (1h), 0.30):
//
//	compaction (opus)  180,000×5 + 3,000×25                               = 0.900 + 0.075         = 0.975
//	fallback (sonnet)  2,000×3 + 500×15 + 6,000×3.75 + 4,000×6 + 50,000×0.3 = 0.006+0.0075+0.0225+0.024+0.015 = 0.075
//	message (opus)     1,500×5 + 800×25 + 2,000×6.25                        = 0.0075 + 0.02 + 0.0125 = 0.04
//	web search         3 × $0.01                                                                     = 0.03
//	total 1.12; with service_tier batch the tokens are half: 1.09/2 + 0.03 = 0.575
//	savings: 10,000 cleared of a cached call at opus 4.6's read price 0.50 = 0.005 (batch 0.0025)
func TestPriceIterationsToTheCent(t *testing.T) {
	p := shippedPrices(t)
	for _, tier := range []string{"", "batch"} {
		t.Run("tier="+tier, func(t *testing.T) {
			u := exactTranscriptUsage
			if tier != "" {
				u = u[:len(u)-1] + `,"service_tier":"batch"}`
			}
			r := ParseReply([]byte(`{"id":"msg_1","model":"claude-opus-4-6","usage":` + u + `}`))
			c := Call{Model: r.Model, Usage: r.Billed(), Iterations: r.Iterations, ServiceTier: r.ServiceTier,
				Edits: []AppliedEdit{{Type: EditClearToolUses, ClearedInputTokens: 10000}}}
			p.Price(&c)
			want := map[string][5]string{ // cost, compaction cost, savings, web search, batch discount
				"":      {"1.12", "0.975", "0.005", "0.03", "0"},
				"batch": {"0.575", "0.4875", "0.0025", "0.03", "-0.545"},
			}[tier]
			got := [5]string{c.Cost.String(), c.CompactionCost.String(), c.Savings.String(), c.Breakdown.WebSearch.String(), c.Breakdown.BatchDiscount.String()}
			for i := range got {
				if usd(t, got[i]) != usd(t, want[i]) {
					t.Errorf("figure %d = %s, want %s (all %v)", i, got[i], want[i], got)
				}
			}
			if c.Compactions != 1 || c.PriceUnknown || c.Breakdown.Total() != c.Cost {
				t.Errorf("compactions %d unknown %v breakdown %+v", c.Compactions, c.PriceUnknown, c.Breakdown)
			}
			// Billed tokens: every iteration, the compaction included.
			if c.Usage.InputTokens != 183500 || c.Usage.OutputTokens != 4300 || c.Usage.CacheCreationInputTokens != 12000 ||
				c.Usage.CacheCreation1hInputTokens != 4000 || c.Usage.CacheReadInputTokens != 50000 || c.Usage.WebSearchRequests != 3 {
				t.Errorf("billed usage %+v", c.Usage)
			}
			if b := c.Breakdown; b.CacheWrite1h != usd(t, "0.024") || b.CacheWrite5m != usd(t, "0.035") || b.CacheRead != usd(t, "0.015") {
				t.Errorf("cache breakdown %+v", b)
			}
		})
	}
	t.Run("an iteration on a model without a price makes the call unknown", func(t *testing.T) {
		c := Call{Model: "claude-opus-4-6", Iterations: []Iteration{{Type: IterationAdvisorMessage, Model: "mystery-1", Usage: Usage{InputTokens: 5}}}}
		p.Price(&c)
		if !c.PriceUnknown || c.Cost != 0 {
			t.Errorf("cost %s unknown %v", c.Cost, c.PriceUnknown)
		}
	})
}

func TestPriceFactors(t *testing.T) {
	p, err := ParsePrices([]byte("factors:\n  cache_write: 1.5\n  cache_read: 0.2\n  batch: 0.4\nweb_search_per_1000: 12.5\nmodels:\n  - model: m\n    input: 2\n    output: 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	e, _ := p.Lookup("m")
	// 2 × 1.5 = 3 (5m write), 2 × 2 = 4 (1h write, the default factor), 2 × 0.2 = 0.4 (read)
	if e.Price.CacheWrite != usd(t, "0.000003") || e.Price.CacheWrite1h != usd(t, "0.000004") || e.Price.CacheRead != usd(t, "0.0000004") {
		t.Errorf("derived cache prices %+v", e.Price)
	}
	c := Call{Model: "m", ServiceTier: "batch", Usage: Usage{InputTokens: 1_000_000, WebSearchRequests: 2}}
	p.Price(&c)
	// 2 × 0.4 = 0.8 for the tokens, 2 × 0.0125 = 0.025 for the searches
	if c.Cost != usd(t, "0.825") {
		t.Errorf("cost %s, want 0.825", c.Cost)
	}
	for _, bad := range []string{"factors: {batch: x}\nmodels: []\n", "factors: {surge: 2}\nmodels: []\n", "web_search_per_1000: -1\nmodels: []\n"} {
		if _, err := ParsePrices([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// Charge is what a spend cap is charged: the ledger's cost_usd for a priced call, every
// iteration included; a call the table cannot price at its dearest prices, not at zero.
func TestChargeIsTheLedgersCost(t *testing.T) {
	p, err := ParsePrices([]byte("models:\n  - model: m\n    input: 1\n    output: 10\n  - model: dear\n    input: 5\n    output: 25\n"))
	if err != nil {
		t.Fatal(err)
	}
	its := []Iteration{
		{Type: IterationCompaction, Usage: Usage{InputTokens: 180_000, OutputTokens: 3000}},
		{Type: IterationMessage, Usage: Usage{InputTokens: 1500, OutputTokens: 800}},
	}
	t.Run("a priced call: its cost_usd, iterations and batch tier included", func(t *testing.T) {
		c := Call{Model: "m", Usage: Usage{InputTokens: 181_500, OutputTokens: 3800}, Iterations: slices.Clone(its), ServiceTier: TierBatch}
		p.Price(&c)
		if c.Cost != 109_750_000 || p.Charge(&c) != c.Cost { // ($0.18 + $0.03 + $0.0015 + $0.008) / 2
			t.Errorf("cost %s, charge %s", c.Cost, p.Charge(&c))
		}
	})
	t.Run("an unpriced model: charged at the dearest prices, the call unchanged", func(t *testing.T) {
		c := Call{Model: "unknown", Usage: Usage{InputTokens: 181_500, OutputTokens: 3800}, Iterations: slices.Clone(its)}
		p.Price(&c)
		got := p.Charge(&c)
		if !c.PriceUnknown || c.Cost != 0 || c.Iterations[0].Cost != 0 {
			t.Errorf("Charge changed the call: %+v", c)
		}
		// The dearest input is dear's 1-hour cache write, 2 × $5; the dearest output $25.
		if want := Money(181_500*10_000 + 3800*25_000); got != want {
			t.Errorf("charge %s, want %s", got, want)
		}
	})
	t.Run("an iteration on an unpriced model", func(t *testing.T) {
		c := Call{Model: "m", Usage: Usage{InputTokens: 1500, OutputTokens: 800}, Iterations: []Iteration{
			{Type: IterationFallbackMessage, Model: "unknown", Usage: Usage{InputTokens: 1000}}, its[1]}}
		p.Price(&c)
		if want := Money(1000*10_000 + 1500*1_000 + 800*10_000); !c.PriceUnknown || p.Charge(&c) != want {
			t.Errorf("charge %s, want %s", p.Charge(&c), want)
		}
	})
}

func TestLongPromptCeilingHoldsTheDearerPrice(t *testing.T) {
	p := shippedPrices(t)
	e, ok := p.Lookup("claude-haiku-5-5")
	if !ok || e.LongPrompt == nil || e.LongPrompt.ThresholdTokens != 100_000 {
		t.Fatalf("haiku 5.5 entry %+v", e)
	}
	want := Price{Input: usd(t, "0.5") / 1e6, Output: usd(t, "2.5") / 1e6, CacheWrite: usd(t, "0.625") / 1e6,
		CacheWrite1h: usd(t, "1") / 1e6, CacheRead: usd(t, "0.05") / 1e6}
	if got := e.Ceiling(); got != want {
		t.Errorf("ceiling %+v, want the long-prompt prices %+v", got, want)
	}
	if e, _ := p.Lookup("claude-opus-5-5"); e.Ceiling() != e.Price {
		t.Error("an entry without long_prompt has its own price as ceiling")
	}
}

func TestMetricsModelLabelsMatchLikePrices(t *testing.T) {
	p := shippedPrices(t)
	m := NewMetrics(nil, p.Models())
	for _, model := range []string{"claude-opus-5", "claude-opus-5-5", "claude-opus-5-5-20260916", "claude-opus-5-6",
		"claude-sonnet-4-5@20250929", "claude-sonnet-4-50", "gpt-4o"} {
		t.Run(model, func(t *testing.T) {
			if got, want := m.ModelLabel(model), p.Label(model); got != want {
				t.Errorf("metrics label %q, price label %q", got, want)
			}
		})
	}
}
