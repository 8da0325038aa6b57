package tokens

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/tidwall/gjson"
)

// Call is one upstream Messages call: what the ledger records and reports sum.
type Call struct {
	Time         time.Time
	Tenant       string
	KeyID        string // first 8 hex of the sha256 of the key the client presented
	User         string // the user of a ctxproxy key ("" for other keys)
	Model        string
	RequestID    string // upstream request-id header
	MessageID    string // msg_… id of the reply, when there was one
	Stream       bool
	Status       int // upstream HTTP status
	Usage        Usage
	Edits        []AppliedEdit
	Cost         Money // filled by Prices.Price
	Savings      Money // filled by Prices.Price
	PriceUnknown bool  // the model has no price: Cost and Savings are 0 but unknown
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

// DefaultLedgerSpec is the --ledger default.
const DefaultLedgerSpec = "file:./data/ledger.jsonl"

// OpenLedger opens the ledger named by spec: "file:PATH" (JSON lines, created with its
// directory) or "postgres://…" / "postgresql://…" (table created or migrated).
func OpenLedger(ctx context.Context, spec string) (Ledger, error) {
	switch {
	case strings.HasPrefix(spec, "file:"):
		path := strings.TrimPrefix(spec, "file:")
		path = strings.TrimPrefix(path, "//") // file:///abs/path
		if path == "" {
			return nil, fmt.Errorf("open ledger %q: empty path", spec)
		}
		l, err := OpenFileLedger(path)
		if err != nil {
			return nil, err
		}
		return l, nil
	case strings.HasPrefix(spec, "postgres://"), strings.HasPrefix(spec, "postgresql://"):
		l, err := OpenPGLedger(ctx, spec)
		if err != nil {
			return nil, err
		}
		return l, nil
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
	PriceUnknown bool              `json:"price_unknown"`
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
	b = append(b, `},"applied_edits":`...)
	b = appendEdits(b, c.Edits)
	num("cleared_input_tokens", c.ClearedInputTokens())
	b = append(b, `,"cost_usd":`...)
	b = c.Cost.appendDecimal(b, -1)
	b = append(b, `,"savings_usd":`...)
	b = c.Savings.appendDecimal(b, -1)
	flag("price_unknown", c.PriceUnknown)
	return append(b, '}')
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
		Cost: r.CostUSD, Savings: r.SavingsUSD, PriceUnknown: r.PriceUnknown,
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
