package tokens

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/ctxproxy/ctxproxy/internal/pgurl"
	"github.com/tidwall/gjson"
)

// Call is one upstream Messages call: what the ledger records and reports sum.
type Call struct {
	Time      time.Time
	Tenant    string
	KeyID     string // first 8 hex of the sha256 of the key the client presented
	User      string // the user of a ctxproxy key ("" for other keys)
	Model     string
	RequestID string // upstream request-id header
	MessageID string // msg_… id of the reply, when there was one
	Stream    bool
	Status    int // upstream HTTP status
	// Usage is what the call was billed for: the sum of its iterations when the reply had
	// usage.iterations (Reply.Billed), else the top-level usage.
	Usage       Usage
	Iterations  []Iteration // usage.iterations; nil when the reply had none
	ServiceTier string      // usage.service_tier
	Edits       []AppliedEdit
	// Transformations is what the API did to the call's thinking blocks (input_transformations);
	// counted in the metrics, not written to the ledger.
	Transformations []Transformation
	Cost            Money         // the call's total, every iteration included; filled by Prices.Price
	Breakdown       CostBreakdown // how Cost is made; filled by Prices.Price
	Savings         Money         // filled by Prices.Price
	// Compactions counts the compaction iterations, CompactionCost their cost (part of Cost).
	Compactions    int64
	CompactionCost Money
	PriceUnknown   bool // the model has no price: Cost and Savings are 0 but unknown
	// Cut: the client cut the stream before its message_delta; Usage's output tokens are an
	// estimate (StreamMeter.CutReply).
	Cut bool
	// BatchID and CustomID name the Message Batch request this call was (its result, read as it
	// passed through the proxy); "" for a call of its own.
	BatchID, CustomID string
	// CountTokens is set for a count_tokens call: what the API counted (input_tokens after the
	// policy's edits, original_input_tokens before). Such a call is billed nothing: Usage, Cost
	// and Savings stay zero and reports leave it out; the ledger keeps it so an operator sees
	// what editing would save before a call is made.
	CountTokens *CountTokens
	// CompactedInputTokens is set on the count_tokens call that measured a compaction
	// (compact.measure_savings): what the call that compacted read (its last message step's
	// input, cache reads and writes included), against CountTokens.InputTokens, what the same
	// request counts without compaction. CompactionSavings is the difference at the model's
	// input price, filled by Prices.Price.
	CompactedInputTokens int64
	CompactionSavings    Money

	// What the call's edits did to the prompt cache (the net-savings rules). The
	// proxy sets the first three from its record of the conversation's previous call (package
	// cachetrack); Prices.Price turns them into money and settles CacheEffect.
	//
	// CacheMissedInputTokens is max(0, P_previous − cache_read) where the previous call cached
	// P_previous tokens; CacheMissCause names why (CauseEdits, CauseExpiry, …), "" for no miss.
	CacheMissedInputTokens int64
	CacheMissCause         string
	// CacheEffect is CacheMeasured (the conversation's previous call was known), CacheUnknown
	// (it was not) or CacheNone (no edits or no cache); Price makes it CacheNone where that
	// rule wins and CacheUnknown where the proxy left it "".
	CacheEffect string
	// SavingsGross is the cleared tokens at the price they would have been billed at (the cache
	// read price when the call cached, else input); CachePenalty the attributed misses re-written
	// to the cache (write price − read price). Savings is SavingsGross − CachePenalty and may be
	// negative. Filled by Prices.Price.
	SavingsGross Money
	CachePenalty Money

	// Conversation names the conversation the call belongs to, as this replica tracks it (its
	// first call's message id); "" when not tracked. The policy lab and `ctxproxy advise`
	// read a conversation's calls by it.
	Conversation string
	// Shadow is set for a policy-lab measurement (endpoint "shadow"): billed nothing, left out
	// of reports, metrics and caps like a count_tokens call.
	Shadow *Shadow
}

// CacheEffect values of a ledger line.
const (
	CacheNone     = "none"
	CacheMeasured = "measured"
	CacheUnknown  = "unknown"
)

// Causes of a cache miss (cache_miss_cause).
const (
	CauseEdits  = "edits"
	CauseExpiry = "expiry"
	CauseModel  = "model"
	CauseSystem = "system"
	CauseTools  = "tools"
	CauseClient = "client"
)

// MissCauses lists every cause, in the order metrics and reports show them.
var MissCauses = [...]string{CauseEdits, CauseExpiry, CauseModel, CauseSystem, CauseTools, CauseClient}

// AttributedMissTokens is M, the cache misses charged to the call's edits: its missed tokens
// when their cause is the edits, else 0.
func (c *Call) AttributedMissTokens() int64 {
	if c.CacheMissCause != CauseEdits {
		return 0
	}
	return max(c.CacheMissedInputTokens, 0)
}

// ClearedInputTokens sums cleared input tokens over the call's applied edits.
func (c *Call) ClearedInputTokens() int64 { return ClearedInputTokens(c.Edits) }

// Filter selects ledger records: Tenant "" means all; Since is inclusive, Until exclusive,
// zero times are open ends.
type Filter struct {
	Tenant       string
	Since, Until time.Time
}

// Match reports whether c passes f.
func (f Filter) Match(c *Call) bool {
	if f.Tenant != "" && c.Tenant != f.Tenant {
		return false
	}
	if !f.Since.IsZero() && c.Time.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && !c.Time.Before(f.Until) {
		return false
	}
	return true
}

// Ledger stores one record per upstream call. Two implementations: file (JSON lines) and
// PostgreSQL.
type Ledger interface {
	Append(ctx context.Context, c Call) error
	Query(ctx context.Context, f Filter) ([]Call, error)
	Close() error
}

// BatchLedger is a Ledger that stores several records in one write (one write(2), one
// INSERT). The Recorder hands it whatever is queued at once.
type BatchLedger interface {
	Ledger
	// AppendBatch stores cs in order and returns how many of them, from the first, were
	// stored; it is len(cs) when err is nil. An error with len(cs) stored is the ledger's
	// upkeep failing beside them (the PostgreSQL ledger's rollup fold): nothing was lost.
	AppendBatch(ctx context.Context, cs []Call) (int, error)
}

// FileLedgerPath is the path of a "file:PATH" ledger spec; ok is false for another spec.
func FileLedgerPath(spec string) (path string, ok bool) {
	rest, ok := strings.CutPrefix(spec, "file:")
	return strings.TrimPrefix(rest, "//"), ok // file:///abs/path
}

// OpenLedger opens the ledger named by spec: "file:PATH" (JSON lines, created with its
// directory) or "postgres://…" / "postgresql://…" (table created or migrated).
func OpenLedger(ctx context.Context, spec string) (Ledger, error) {
	switch {
	case strings.HasPrefix(spec, "file:"):
		path, _ := FileLedgerPath(spec)
		if path == "" {
			return nil, fmt.Errorf("open ledger %q: empty path", spec)
		}
		l, err := OpenFileLedger(path)
		if err != nil {
			return nil, err
		}
		return l, nil
	case pgurl.Is(spec):
		l, err := OpenPGLedger(ctx, spec)
		if err != nil {
			return nil, err
		}
		return l, nil
	default:
		return nil, fmt.Errorf("open ledger %q: want file:PATH or postgres://…", spec)
	}
}

// ReadLedger opens the ledger named by spec to read it, as OpenLedger but writing nothing: a
// file ledger must exist, a PostgreSQL one must hold the ledger's tables at this build's
// version (ReadPGLedger).
func ReadLedger(ctx context.Context, spec string) (Ledger, error) {
	switch {
	case strings.HasPrefix(spec, "file:"):
		path, _ := FileLedgerPath(spec)
		if path == "" {
			return nil, fmt.Errorf("open ledger %q: empty path", spec)
		}
		if _, err := os.Stat(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("no ledger at %s", path)
			}
			return nil, fmt.Errorf("open ledger: %w", err)
		}
		return OpenFileLedger(path)
	case pgurl.Is(spec):
		return ReadPGLedger(ctx, spec)
	default:
		return nil, fmt.Errorf("open ledger %q: want file:PATH or postgres://…", spec)
	}
}

// LedgerVersion is written as "v" in every record.
const LedgerVersion = 1

// record is the JSON line of one call.
type record struct {
	V            int               `json:"v"`
	Time         string            `json:"time"`
	Tenant       string            `json:"tenant"`
	KeyID        string            `json:"key_id,omitempty"`
	User         string            `json:"user,omitempty"`
	Model        string            `json:"model"`
	RequestID    string            `json:"request_id"`
	MessageID    string            `json:"message_id,omitempty"`
	Stream       bool              `json:"stream"`
	Status       int               `json:"status"`
	Usage        Usage             `json:"usage"`
	AppliedEdits []json.RawMessage `json:"applied_edits"`
	Cleared      int64             `json:"cleared_input_tokens"`
	CostUSD      Money             `json:"cost_usd"`
	SavingsUSD   Money             `json:"savings_usd"`
	// The parts of savings_usd, on every Messages call's line. A line written before
	// them has none and reads as savings_gross_usd = savings_usd, no penalty, cache_effect none.
	SavingsGrossUSD        *Money `json:"savings_gross_usd,omitempty"`
	CachePenaltyUSD        *Money `json:"cache_penalty_usd,omitempty"`
	CacheMissedInputTokens *int64 `json:"cache_missed_input_tokens,omitempty"`
	CacheEffect            string `json:"cache_effect,omitempty"`
	CacheMissCause         string `json:"cache_miss_cause,omitempty"`
	PriceUnknown           bool   `json:"price_unknown"`
	Cut                    bool   `json:"cut,omitempty"`
	BatchID                string `json:"batch_id,omitempty"`
	CustomID               string `json:"custom_id,omitempty"`

	// The breakdown of cost_usd: written only when there is one.
	ServiceTier       string            `json:"service_tier,omitempty"`
	Iterations        []iterationRecord `json:"iterations,omitempty"`
	CostBreakdown     *breakdownRecord  `json:"cost_breakdown,omitempty"`
	Compactions       int64             `json:"compactions,omitempty"`
	CompactionCostUSD Money             `json:"compaction_cost_usd,omitempty"`
	Endpoint          string            `json:"endpoint,omitempty"`
	CountTokens       *countRecord      `json:"count_tokens,omitempty"`

	CompactedInputTokens int64 `json:"compacted_input_tokens,omitempty"`
	CompactionSavingsUSD Money `json:"compaction_savings_usd,omitempty"`

	Conversation string `json:"conversation,omitempty"`
	// A policy-lab measurement (endpoint "shadow").
	Name                string `json:"name,omitempty"`
	Shadows             string `json:"shadows,omitempty"`
	InputTokens         *int64 `json:"input_tokens,omitempty"`
	OriginalInputTokens *int64 `json:"original_input_tokens,omitempty"`
	EstimatedCostUSD    *Money `json:"estimated_cost_usd,omitempty"`
	EstimatedSavingsUSD *Money `json:"estimated_savings_usd,omitempty"`
	NewClearingPoint    *bool  `json:"new_clearing_point,omitempty"`
	CompactNotMeasured  bool   `json:"compact_not_measured,omitempty"`
}

// EndpointCountTokens is the ledger's "endpoint" of a count_tokens call.
const EndpointCountTokens = "count_tokens"

// countRecord is the count_tokens reply as the ledger keeps it, in the API's own shape.
type countRecord struct {
	InputTokens       int64 `json:"input_tokens"`
	ContextManagement *struct {
		OriginalInputTokens int64 `json:"original_input_tokens"`
	} `json:"context_management"`
}

// iterationRecord is one usage.iterations entry of a ledger line, with its cost.
type iterationRecord struct {
	Type    string `json:"type"`
	Model   string `json:"model,omitempty"`
	Usage   Usage  `json:"usage"`
	CostUSD Money  `json:"cost_usd"`
}

// breakdownRecord is CostBreakdown in a ledger line.
type breakdownRecord struct {
	Input         Money `json:"input_usd"`
	Output        Money `json:"output_usd"`
	CacheWrite5m  Money `json:"cache_write_5m_usd"`
	CacheWrite1h  Money `json:"cache_write_1h_usd"`
	CacheRead     Money `json:"cache_read_usd"`
	WebSearch     Money `json:"web_search_usd"`
	BatchDiscount Money `json:"batch_discount_usd"`
}

// MarshalJSON renders one edit the way the API does; unknown types as their raw JSON.
func (e AppliedEdit) MarshalJSON() ([]byte, error) { return e.appendJSON(nil), nil }

func (e AppliedEdit) appendJSON(b []byte) []byte {
	if e.Raw != "" && json.Valid([]byte(e.Raw)) {
		return append(b, e.Raw...)
	}
	b = append(b, `{"type":`...)
	b = jsonstr.Append(b, e.Type)
	field := func(name string, v int64) {
		b = append(b, `,"`...)
		b = append(b, name...)
		b = append(b, `":`...)
		b = strconv.AppendInt(b, v, 10)
	}
	switch e.Type {
	case EditClearThinking:
		field("cleared_thinking_turns", e.ClearedThinkingTurns)
	case EditClearToolUses:
		field("cleared_tool_uses", e.ClearedToolUses)
	default:
		if e.ClearedToolUses != 0 {
			field("cleared_tool_uses", e.ClearedToolUses)
		}
		if e.ClearedThinkingTurns != 0 {
			field("cleared_thinking_turns", e.ClearedThinkingTurns)
		}
	}
	field("cleared_input_tokens", e.ClearedInputTokens)
	return append(b, '}')
}

// UnmarshalJSON reads one applied_edits entry as ParseMessage does.
func (e *AppliedEdit) UnmarshalJSON(b []byte) error {
	r := gjson.ParseBytes(b)
	ed, ok := parseEdit(r)
	if !ok {
		return fmt.Errorf("applied edit: not an object: %.40s", b)
	}
	*e = ed
	return nil
}

// appendEdits appends edits as a JSON array.
func appendEdits(b []byte, edits []AppliedEdit) []byte {
	b = append(b, '[')
	for i, e := range edits {
		if i > 0 {
			b = append(b, ',')
		}
		b = e.appendJSON(b)
	}
	return append(b, ']')
}

// MarshalCall renders c as one ledger JSON line (without the newline).
func MarshalCall(c *Call) ([]byte, error) { return AppendCall(nil, c), nil }

// AppendCall appends c's ledger JSON line (without the newline). It is
// written by hand, not by reflection, since every upstream call makes one;
// UnmarshalCall reads it back through the record type.
func AppendCall(b []byte, c *Call) []byte {
	str := func(name, v string) {
		b = append(b, `,"`...)
		b = append(b, name...)
		b = append(b, `":`...)
		b = jsonstr.Append(b, v)
	}
	num := func(name string, v int64) {
		b = append(b, `,"`...)
		b = append(b, name...)
		b = append(b, `":`...)
		b = strconv.AppendInt(b, v, 10)
	}
	flag := func(name string, v bool) {
		b = append(b, `,"`...)
		b = append(b, name...)
		b = append(b, `":`...)
		b = strconv.AppendBool(b, v)
	}
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, LedgerVersion, 10)
	b = append(b, `,"time":"`...)
	b = c.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	str("tenant", c.Tenant)
	if c.KeyID != "" {
		str("key_id", c.KeyID)
	}
	if c.User != "" {
		str("user", c.User)
	}
	str("model", c.Model)
	str("request_id", c.RequestID)
	if c.MessageID != "" {
		str("message_id", c.MessageID)
	}
	flag("stream", c.Stream)
	num("status", int64(c.Status))
	b = append(b, `,"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, c.Usage.InputTokens, 10)
	num("output_tokens", c.Usage.OutputTokens)
	num("cache_creation_input_tokens", c.Usage.CacheCreationInputTokens)
	num("cache_read_input_tokens", c.Usage.CacheReadInputTokens)
	if c.Usage.CacheCreation1hInputTokens != 0 {
		num("cache_creation_1h_input_tokens", c.Usage.CacheCreation1hInputTokens)
	}
	if c.Usage.WebSearchRequests != 0 {
		num("web_search_requests", c.Usage.WebSearchRequests)
	}
	b = append(b, `},"applied_edits":`...)
	b = appendEdits(b, c.Edits)
	num("cleared_input_tokens", c.ClearedInputTokens())
	b = append(b, `,"cost_usd":`...)
	b = c.Cost.appendDecimal(b, -1)
	b = append(b, `,"savings_usd":`...)
	b = c.Savings.appendDecimal(b, -1)
	if c.CountTokens == nil && c.Shadow == nil {
		b = appendSavingsParts(b, c)
	}
	flag("price_unknown", c.PriceUnknown)
	if c.Cut {
		flag("cut", true)
	}
	if c.BatchID != "" {
		str("batch_id", c.BatchID)
		str("custom_id", c.CustomID)
	}
	if c.ServiceTier != "" {
		str("service_tier", c.ServiceTier)
	}
	if len(c.Iterations) > 0 {
		b = append(b, `,"iterations":`...)
		b = appendIterations(b, c.Iterations)
	}
	if c.Breakdown != (CostBreakdown{}) {
		b = append(b, `,"cost_breakdown":`...)
		b = appendBreakdown(b, c.Breakdown)
	}
	if c.Compactions != 0 {
		num("compactions", c.Compactions)
	}
	if c.CompactionCost != 0 {
		b = append(b, `,"compaction_cost_usd":`...)
		b = c.CompactionCost.appendDecimal(b, -1)
	}
	if c.Shadow != nil {
		str("endpoint", EndpointShadow)
	}
	if ct := c.CountTokens; ct != nil {
		str("endpoint", EndpointCountTokens)
		b = append(b, `,"count_tokens":{"input_tokens":`...)
		b = strconv.AppendInt(b, ct.InputTokens, 10)
		b = append(b, `,"context_management":`...)
		if ct.HasOriginal {
			b = append(b, `{"original_input_tokens":`...)
			b = strconv.AppendInt(b, ct.OriginalInputTokens, 10)
			b = append(b, '}')
		} else {
			b = append(b, "null"...)
		}
		b = append(b, '}')
	}
	if c.CompactedInputTokens != 0 {
		num("compacted_input_tokens", c.CompactedInputTokens)
	}
	if c.CompactionSavings != 0 {
		b = append(b, `,"compaction_savings_usd":`...)
		b = c.CompactionSavings.appendDecimal(b, -1)
	}
	if c.Conversation != "" {
		str("conversation", c.Conversation)
	}
	if sh := c.Shadow; sh != nil {
		str("name", sh.Name)
		str("shadows", sh.Shadows)
		num("input_tokens", sh.InputTokens)
		num("original_input_tokens", sh.OriginalInputTokens)
		b = append(b, `,"estimated_cost_usd":`...)
		b = sh.EstimatedCost.appendDecimal(b, -1)
		b = append(b, `,"estimated_savings_usd":`...)
		b = sh.EstimatedSavings.appendDecimal(b, -1)
		flag("new_clearing_point", sh.NewClearingPoint)
		if sh.CompactNotMeasured {
			flag("compact_not_measured", true)
		}
	}
	return append(b, '}')
}

// appendSavingsParts appends the parts of savings_usd: gross, the cache penalty, the missed cache
// tokens, the cache effect and (when there was a miss) its cause.
func appendSavingsParts(b []byte, c *Call) []byte {
	b = append(b, `,"savings_gross_usd":`...)
	b = c.SavingsGross.appendDecimal(b, -1)
	b = append(b, `,"cache_penalty_usd":`...)
	b = c.CachePenalty.appendDecimal(b, -1)
	b = append(b, `,"cache_missed_input_tokens":`...)
	b = strconv.AppendInt(b, c.CacheMissedInputTokens, 10)
	b = append(b, `,"cache_effect":`...)
	effect := c.CacheEffect
	if effect == "" {
		effect = CacheNone
	}
	b = jsonstr.Append(b, effect)
	if c.CacheMissCause != "" {
		b = append(b, `,"cache_miss_cause":`...)
		b = jsonstr.Append(b, c.CacheMissCause)
	}
	return b
}

// appendUsage appends u as the API writes it (the 1h and web search parts when non-zero).
func appendUsage(b []byte, u Usage) []byte {
	b = appendTokenCounts(append(b, '{'), u)
	if u.CacheCreation1hInputTokens != 0 {
		b = append(b, `,"cache_creation_1h_input_tokens":`...)
		b = strconv.AppendInt(b, u.CacheCreation1hInputTokens, 10)
	}
	if u.WebSearchRequests != 0 {
		b = append(b, `,"web_search_requests":`...)
		b = strconv.AppendInt(b, u.WebSearchRequests, 10)
	}
	return append(b, '}')
}

// appendIterations appends the iterations with their costs as a JSON array.
func appendIterations(b []byte, its []Iteration) []byte {
	b = append(b, '[')
	for i, it := range its {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":`...)
		b = jsonstr.Append(b, it.Type)
		if it.Model != "" {
			b = append(b, `,"model":`...)
			b = jsonstr.Append(b, it.Model)
		}
		b = append(b, `,"usage":`...)
		b = appendUsage(b, it.Usage)
		b = append(b, `,"cost_usd":`...)
		b = it.Cost.appendDecimal(b, -1)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendBreakdown appends a cost breakdown as a JSON object.
func appendBreakdown(b []byte, c CostBreakdown) []byte {
	parts := [...]struct {
		name string
		v    Money
	}{{"input_usd", c.Input}, {"output_usd", c.Output}, {"cache_write_5m_usd", c.CacheWrite5m},
		{"cache_write_1h_usd", c.CacheWrite1h}, {"cache_read_usd", c.CacheRead}, {"web_search_usd", c.WebSearch},
		{"batch_discount_usd", c.BatchDiscount}}
	for i, p := range parts {
		if i == 0 {
			b = append(b, '{')
		} else {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, p.name...)
		b = append(b, `":`...)
		b = p.v.appendDecimal(b, -1)
	}
	return append(b, '}')
}

// breakdownFromRecord and iterationsFromRecord read the breakdown of a ledger line back.
func breakdownFromRecord(r *breakdownRecord) CostBreakdown {
	if r == nil {
		return CostBreakdown{}
	}
	return CostBreakdown{Input: r.Input, Output: r.Output, CacheWrite5m: r.CacheWrite5m, CacheWrite1h: r.CacheWrite1h,
		CacheRead: r.CacheRead, WebSearch: r.WebSearch, BatchDiscount: r.BatchDiscount}
}

func iterationsFromRecord(rs []iterationRecord) []Iteration {
	if rs == nil {
		return nil
	}
	out := make([]Iteration, len(rs))
	for i, r := range rs {
		out[i] = Iteration{Type: r.Type, Model: r.Model, Usage: r.Usage, Cost: r.CostUSD}
	}
	return out
}

// UnmarshalCall reads one ledger JSON line.
func UnmarshalCall(line []byte) (Call, error) {
	var r record
	if err := json.Unmarshal(line, &r); err != nil {
		return Call{}, fmt.Errorf("ledger record: %w", err)
	}
	if r.V > LedgerVersion {
		return Call{}, fmt.Errorf("ledger record: version %d is newer than %d", r.V, LedgerVersion)
	}
	t, err := time.Parse(time.RFC3339Nano, r.Time)
	if err != nil {
		return Call{}, fmt.Errorf("ledger record: time: %w", err)
	}
	c := Call{
		Time: t, Tenant: r.Tenant, KeyID: r.KeyID, User: r.User, Model: r.Model, RequestID: r.RequestID, MessageID: r.MessageID,
		Stream: r.Stream, Status: r.Status, Usage: r.Usage,
		Cost: r.CostUSD, Savings: r.SavingsUSD, PriceUnknown: r.PriceUnknown, Cut: r.Cut,
		BatchID: r.BatchID, CustomID: r.CustomID,
		ServiceTier: r.ServiceTier, Iterations: iterationsFromRecord(r.Iterations), Breakdown: breakdownFromRecord(r.CostBreakdown),
		Compactions: r.Compactions, CompactionCost: r.CompactionCostUSD,
		CompactedInputTokens: r.CompactedInputTokens, CompactionSavings: r.CompactionSavingsUSD,
		SavingsGross: r.SavingsUSD, CacheEffect: r.CacheEffect, CacheMissCause: r.CacheMissCause,
	}
	if r.SavingsGrossUSD != nil {
		c.SavingsGross = *r.SavingsGrossUSD
	}
	if r.CachePenaltyUSD != nil {
		c.CachePenalty = *r.CachePenaltyUSD
	}
	if r.CacheMissedInputTokens != nil {
		c.CacheMissedInputTokens = *r.CacheMissedInputTokens
	}
	if ct := r.CountTokens; ct != nil {
		c.CountTokens = &CountTokens{InputTokens: ct.InputTokens}
		if ct.ContextManagement != nil {
			c.CountTokens.OriginalInputTokens, c.CountTokens.HasOriginal = ct.ContextManagement.OriginalInputTokens, true
		}
	}
	c.Conversation = r.Conversation
	if r.Endpoint == EndpointShadow {
		sh := &Shadow{Name: r.Name, Shadows: r.Shadows, NewClearingPoint: r.NewClearingPoint != nil && *r.NewClearingPoint,
			CompactNotMeasured: r.CompactNotMeasured}
		for _, f := range []struct {
			dst *int64
			src *int64
		}{{&sh.InputTokens, r.InputTokens}, {&sh.OriginalInputTokens, r.OriginalInputTokens}} {
			if f.src != nil {
				*f.dst = *f.src
			}
		}
		if r.EstimatedCostUSD != nil {
			sh.EstimatedCost = *r.EstimatedCostUSD
		}
		if r.EstimatedSavingsUSD != nil {
			sh.EstimatedSavings = *r.EstimatedSavingsUSD
		}
		c.Shadow = sh
	}
	if c.CacheEffect == "" && c.CountTokens == nil && c.Shadow == nil {
		c.CacheEffect = CacheNone
	}
	for _, raw := range r.AppliedEdits {
		var e AppliedEdit
		if err := e.UnmarshalJSON(raw); err != nil {
			return Call{}, fmt.Errorf("ledger record: %w", err)
		}
		c.Edits = append(c.Edits, e)
	}
	return c, nil
}
