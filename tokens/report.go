package tokens

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// How report rows are split within each tenant.
const (
	GroupByModel = "model" // one row per tenant and model name as the upstream reported it
	GroupByDay   = "day"   // one row per tenant and UTC day (YYYY-MM-DD)
	GroupByKey   = "key"   // one row per tenant and key id (first 8 hex of the key's sha256)
	GroupByUser  = "user"  // one row per tenant and user of a ctxproxy key
)

// noGroup names the row of calls without a key id or user.
const noGroup = "(none)"

// ParseGroupBy accepts "model", "day", "key", "user" or "" (model).
func ParseGroupBy(s string) (string, error) {
	switch s {
	case "", GroupByModel:
		return GroupByModel, nil
	case GroupByDay, GroupByKey, GroupByUser:
		return s, nil
	}
	return "", fmt.Errorf("group_by %q: want model, day, key or user", s)
}

// groupOf is the row c belongs to under g.
func groupOf(c *Call, g string) string {
	if g == GroupByDay {
		return c.Time.UTC().Format(time.DateOnly)
	}
	return groupName(dimValue(c, g))
}

// dimValue is c's model, key id or user as the ledger has it ("" for none); g is not day.
func dimValue(c *Call, g string) string {
	switch g {
	case GroupByKey:
		return c.KeyID
	case GroupByUser:
		return c.User
	}
	return c.Model
}

// groupName is the row name of a model, key id or user: noGroup for none.
func groupName(v string) string {
	if v == "" {
		return noGroup
	}
	return v
}

// Totals are the sums over a set of calls.
type Totals struct {
	Calls                    int64 `json:"calls"`
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	ClearedInputTokens       int64 `json:"cleared_input_tokens"`
	ClearedToolUses          int64 `json:"cleared_tool_uses"`
	ClearedThinkingTurns     int64 `json:"cleared_thinking_turns"`
	CostUSD                  Money `json:"cost_usd"` // of priced calls only
	// SavingsUSD is net of the prompt cache: SavingsGrossUSD − CachePenaltyUSD (priced calls only).
	SavingsUSD      Money `json:"savings_usd"`
	SavingsGrossUSD Money `json:"savings_gross_usd"`
	CachePenaltyUSD Money `json:"cache_penalty_usd"`
	// CacheMissedInputTokens sums the lines' cache_missed_input_tokens, whatever the cause.
	CacheMissedInputTokens int64 `json:"cache_missed_input_tokens"`
	// CacheEffectUnknownCalls counts calls whose edits met the cache in a conversation this
	// proxy had not seen before (cache_effect unknown): no penalty could be measured for them.
	CacheEffectUnknownCalls int64 `json:"cache_effect_unknown_calls"`
	// CacheHitRate is cache_read / (input + cache_read + cache_creation), 0 without input.
	CacheHitRate      float64 `json:"cache_hit_rate"`
	PriceUnknownCalls int64   `json:"price_unknown_calls"`
	WebSearchRequests int64   `json:"web_search_requests"`
	Compactions       int64   `json:"compactions"`
	CompactionCostUSD Money   `json:"compaction_cost_usd"` // part of cost_usd
	// CompactionSavingsUSD is what measured compactions spared (compact.measure_savings).
	CompactionSavingsUSD Money `json:"compaction_savings_usd"`
}

// Add adds one call.
func (t *Totals) Add(c *Call) {
	t.addCall(c)
	t.setHitRate()
}

// addCall is Add without the hit rate.
func (t *Totals) addCall(c *Call) {
	t.Calls++
	t.InputTokens += c.Usage.InputTokens
	t.OutputTokens += c.Usage.OutputTokens
	t.CacheCreationInputTokens += c.Usage.CacheCreationInputTokens
	t.CacheReadInputTokens += c.Usage.CacheReadInputTokens
	for _, e := range c.Edits {
		t.ClearedInputTokens += e.ClearedInputTokens
		t.ClearedToolUses += e.ClearedToolUses
		t.ClearedThinkingTurns += e.ClearedThinkingTurns
	}
	t.CostUSD += c.Cost
	t.SavingsUSD += c.Savings
	t.SavingsGrossUSD += c.SavingsGross
	t.CachePenaltyUSD += c.CachePenalty
	t.CacheMissedInputTokens += c.CacheMissedInputTokens
	if c.CacheEffect == CacheUnknown {
		t.CacheEffectUnknownCalls++
	}
	if c.PriceUnknown {
		t.PriceUnknownCalls++
	}
	t.WebSearchRequests += c.Usage.WebSearchRequests
	t.Compactions += c.Compactions
	t.CompactionCostUSD += c.CompactionCost
}

// addTotals adds o's sums: every field of rollupSums (TestAddTotalsAddsEverySum), written out
// since the ledger's writer adds each line to three rollup rows.
func (t *Totals) addTotals(o *Totals) {
	t.addSums(o)
	t.setHitRate()
}

// addSums is addTotals without the hit rate (a rollup row's, never read).
func (t *Totals) addSums(o *Totals) {
	t.Calls += o.Calls
	t.InputTokens += o.InputTokens
	t.OutputTokens += o.OutputTokens
	t.CacheCreationInputTokens += o.CacheCreationInputTokens
	t.CacheReadInputTokens += o.CacheReadInputTokens
	t.ClearedInputTokens += o.ClearedInputTokens
	t.ClearedToolUses += o.ClearedToolUses
	t.ClearedThinkingTurns += o.ClearedThinkingTurns
	t.CostUSD += o.CostUSD
	t.SavingsUSD += o.SavingsUSD
	t.SavingsGrossUSD += o.SavingsGrossUSD
	t.CachePenaltyUSD += o.CachePenaltyUSD
	t.CacheMissedInputTokens += o.CacheMissedInputTokens
	t.CacheEffectUnknownCalls += o.CacheEffectUnknownCalls
	t.PriceUnknownCalls += o.PriceUnknownCalls
	t.WebSearchRequests += o.WebSearchRequests
	t.Compactions += o.Compactions
	t.CompactionCostUSD += o.CompactionCostUSD
	t.CompactionSavingsUSD += o.CompactionSavingsUSD
}

// setHitRate derives the cache hit rate from the token sums.
func (t *Totals) setHitRate() {
	t.CacheHitRate = 0
	if all := t.InputTokens + t.CacheReadInputTokens + t.CacheCreationInputTokens; all > 0 {
		t.CacheHitRate = float64(t.CacheReadInputTokens) / float64(all)
	}
}

// lineTotals is what one ledger line adds to its report row; ok is false for a line reports
// leave out (lineCounts).
func lineTotals(c *Call) (t Totals, ok bool) {
	if !lineCounts(c) {
		return Totals{}, false
	}
	t.addLine(c)
	t.setHitRate()
	return t, true
}

// lineCounts says whether a ledger line counts in reports: not a policy-lab measurement (billed
// nothing, never the tenant's spend), nor a count_tokens call (billed nothing) but the one that
// measured a compaction, which counts for what the compaction spared.
func lineCounts(c *Call) bool {
	return c.Shadow == nil && (c.CountTokens == nil || c.CompactionSavings != 0)
}

// addLine adds what a line that counts (lineCounts) adds to its report row, but the hit rate.
func (t *Totals) addLine(c *Call) {
	if c.CountTokens != nil {
		t.CompactionSavingsUSD += c.CompactionSavings
		return
	}
	t.addCall(c)
}

// Row is the totals of one tenant and group (a model name or a day).
type Row struct {
	Tenant string `json:"tenant"`
	Group  string `json:"group"`
	Totals
}

// TenantTotals is the totals of one tenant.
type TenantTotals struct {
	Tenant string `json:"tenant"`
	Totals
}

// Report is the ledger summed per tenant and group.
type Report struct {
	GroupBy string         `json:"group_by"`
	Tenant  string         `json:"tenant,omitempty"` // the filter, "" for all
	Since   *time.Time     `json:"since,omitempty"`
	Until   *time.Time     `json:"until,omitempty"`
	Rows    []Row          `json:"rows"`    // by tenant, then model name or day
	Tenants []TenantTotals `json:"tenants"` // by tenant name
	Total   Totals         `json:"total"`
	// Caps is spend against the tenants' caps in their current periods (from the limits store,
	// when the report can reach it).
	Caps []CapRow `json:"caps,omitempty"`
}

// BuildReport sums calls per tenant and model, or per tenant and UTC day, key id or user as
// groupBy says (anything unknown means model; check user input with ParseGroupBy).
func BuildReport(calls []Call, groupBy string) Report {
	b := newReportBuilder(groupBy)
	for i := range calls {
		b.addCall(&calls[i])
	}
	return b.report()
}

// reportBuilder sums a report's rows, from lines one by one or from a store's rollups.
type reportBuilder struct {
	groupBy string
	rows    map[rowKey]*Row
}

type rowKey struct{ tenant, group string }

func newReportBuilder(groupBy string) *reportBuilder {
	g, err := ParseGroupBy(groupBy)
	if err != nil {
		g = GroupByModel
	}
	return &reportBuilder{groupBy: g, rows: map[rowKey]*Row{}}
}

// addCall adds one ledger line.
func (b *reportBuilder) addCall(c *Call) {
	if t, ok := lineTotals(c); ok {
		b.add(c.Tenant, groupOf(c, b.groupBy), &t)
	}
}

// add adds t to the row of tenant and group.
func (b *reportBuilder) add(tenant, group string, t *Totals) {
	k := rowKey{tenant: tenant, group: group}
	r := b.rows[k]
	if r == nil {
		r = &Row{Tenant: k.tenant, Group: k.group}
		b.rows[k] = r
	}
	r.addTotals(t)
}

// report is the rows sorted, with each tenant's totals and the grand total.
func (b *reportBuilder) report() Report {
	rep := Report{GroupBy: b.groupBy, Rows: make([]Row, 0, len(b.rows)), Tenants: []TenantTotals{}}
	for _, r := range b.rows {
		rep.Rows = append(rep.Rows, *r)
	}
	sort.Slice(rep.Rows, func(i, j int) bool {
		a, b := rep.Rows[i], rep.Rows[j]
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		return a.Group < b.Group
	})
	for i := range rep.Rows {
		r := &rep.Rows[i]
		if n := len(rep.Tenants); n == 0 || rep.Tenants[n-1].Tenant != r.Tenant {
			rep.Tenants = append(rep.Tenants, TenantTotals{Tenant: r.Tenant})
		}
		rep.Tenants[len(rep.Tenants)-1].addTotals(&r.Totals)
		rep.Total.addTotals(&r.Totals)
	}
	return rep
}

// RunReport sums the lines of l that f selects. A ledger that keeps rollups (both stores do)
// answers from them (reportFromRollups); any other is read line by line.
func RunReport(ctx context.Context, l Ledger, f Filter, groupBy string) (Report, error) {
	var r Report
	if rl, ok := l.(rollupLedger); ok {
		var err error
		if r, err = reportFromRollups(ctx, rl, f, groupBy); err != nil {
			return Report{}, fmt.Errorf("report: %w", err)
		}
	} else {
		calls, err := l.Query(ctx, f)
		if err != nil {
			return Report{}, fmt.Errorf("report: %w", err)
		}
		r = BuildReport(calls, groupBy)
	}
	r.Tenant = f.Tenant
	if !f.Since.IsZero() {
		s := f.Since.UTC()
		r.Since = &s
	}
	if !f.Until.IsZero() {
		u := f.Until.UTC()
		r.Until = &u
	}
	return r, nil
}

// ParseFilter reads report parameters as the admin endpoint and the CLI take them. since and
// until are RFC 3339 times or YYYY-MM-DD (UTC); a date as until includes that whole day.
func ParseFilter(tenant, since, until string) (Filter, error) {
	f := Filter{Tenant: tenant}
	var err error
	if since != "" {
		if f.Since, err = parseReportTime(since, false); err != nil {
			return Filter{}, fmt.Errorf("since: %w", err)
		}
	}
	if until != "" {
		if f.Until, err = parseReportTime(until, true); err != nil {
			return Filter{}, fmt.Errorf("until: %w", err)
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return Filter{}, fmt.Errorf("since %s is not before until %s", since, until)
	}
	return f, nil
}

func parseReportTime(s string, endOfDay bool) (time.Time, error) {
	if d, err := time.Parse(time.DateOnly, s); err == nil {
		if endOfDay {
			d = d.AddDate(0, 0, 1)
		}
		return d, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither RFC 3339 (2026-03-01T10:00:00Z) nor a date (2026-03-01)", s)
	}
	return t, nil
}

// WriteReportJSON writes r as indented JSON.
func WriteReportJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// WriteReportTable writes r as an aligned table: one line per row, a total line per tenant with
// more than one row, and a grand total. Amounts are USD rounded to 6 decimals (the JSON form is
// exact); an amount marked * leaves out calls whose model has no price.
func WriteReportTable(w io.Writer, r Report) error {
	groupHdr := map[string]string{GroupByDay: "DAY", GroupByKey: "KEY_ID", GroupByUser: "USER"}[r.GroupBy]
	if groupHdr == "" {
		groupHdr = "MODEL"
	}
	header := []string{"TENANT", groupHdr, "CALLS", "INPUT", "OUTPUT", "CACHE_WRITE", "CACHE_READ",
		"CLEARED_INPUT", "CLEARED_TOOLS", "CLEARED_THINK"}
	// Compaction columns only when the period had a compaction: most ledgers have none.
	compactions := r.Total.Compactions > 0
	if compactions {
		header = append(header, "COMPACTIONS", "COMPACTION_USD", "COMPACTION_SAVED_USD")
	}
	header = append(header, "COST_USD", "GROSS_USD", "CACHE_PENALTY_USD", "SAVINGS_USD", "CACHE_HIT_RATE")
	var lines [][]string
	cells := func(tenant, group string, t *Totals) []string {
		mark := "" // keeps the decimals aligned when some amounts are marked
		if r.Total.PriceUnknownCalls > 0 {
			mark = " "
		}
		if t.PriceUnknownCalls > 0 {
			mark = "*"
		}
		l := []string{tenant, group, num(t.Calls), num(t.InputTokens), num(t.OutputTokens),
			num(t.CacheCreationInputTokens), num(t.CacheReadInputTokens), num(t.ClearedInputTokens),
			num(t.ClearedToolUses), num(t.ClearedThinkingTurns)}
		if compactions {
			l = append(l, num(t.Compactions), t.CompactionCostUSD.Fixed(6)+mark, t.CompactionSavingsUSD.Fixed(6)+mark)
		}
		return append(l, t.CostUSD.Fixed(6)+mark, t.SavingsGrossUSD.Fixed(6)+mark, t.CachePenaltyUSD.Fixed(6)+mark,
			t.SavingsUSD.Fixed(6)+mark, strconv.FormatFloat(100*t.CacheHitRate, 'f', 1, 64)+"%")
	}
	rowsOf := map[string]int{}
	for _, row := range r.Rows {
		rowsOf[row.Tenant]++
	}
	ti := 0
	for i := range r.Rows {
		row := &r.Rows[i]
		lines = append(lines, cells(row.Tenant, row.Group, &row.Totals))
		last := i == len(r.Rows)-1 || r.Rows[i+1].Tenant != row.Tenant
		if last {
			for ti < len(r.Tenants) && r.Tenants[ti].Tenant != row.Tenant {
				ti++
			}
			if ti < len(r.Tenants) && rowsOf[row.Tenant] > 1 {
				lines = append(lines, cells(row.Tenant, "(all)", &r.Tenants[ti].Totals))
			}
		}
	}
	lines = append(lines, cells("TOTAL", "", &r.Total))

	width := make([]int, len(header))
	for _, l := range append([][]string{header}, lines...) {
		for i, c := range l {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	writeLine := func(l []string) {
		var line strings.Builder
		for i, c := range l {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i < 2 { // text columns left-aligned
				line.WriteString(c + pad)
			} else {
				line.WriteString(pad + c)
			}
			line.WriteString("  ")
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteString("\n")
	}
	writeLine(header)
	for _, l := range lines {
		writeLine(l)
	}
	if r.Total.PriceUnknownCalls > 0 {
		fmt.Fprintf(&b, "* %s call(s) of models without a price in prices.yaml are not in COST_USD or SAVINGS_USD.\n", num(r.Total.PriceUnknownCalls))
	}
	if r.Total.CachePenaltyUSD != 0 {
		b.WriteString("SAVINGS_USD is net: GROSS_USD (cleared tokens at the price they would have cost) less CACHE_PENALTY_USD (the cache the edits invalidated, written again).\n")
	}
	if n := r.Total.CacheEffectUnknownCalls; n > 0 {
		fmt.Fprintf(&b, "%s call(s) cleared cached prompts of conversations this proxy had not seen before (cache_effect_unknown_calls): their cache penalty is unknown and not in CACHE_PENALTY_USD.\n", num(n))
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return WriteCapsTable(w, r.Caps)
}

// num renders n with thousands separators: 1234567 → 1,234,567.
func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
