package tokens

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// Call is one upstream Messages call: what the ledger records and reports sum.
type Call struct {
	Time         time.Time
	Tenant       string
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
		if strings.HasPrefix(path, "//") { // file:///abs/path
			path = strings.TrimPrefix(path, "//")
		}
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
func (e AppliedEdit) MarshalJSON() ([]byte, error) {
	if e.Raw != "" && json.Valid([]byte(e.Raw)) {
		return []byte(e.Raw), nil
	}
	b := []byte(`{"type":`)
	t, _ := json.Marshal(e.Type)
	b = append(b, t...)
	switch e.Type {
	case EditClearThinking:
		b = fmt.Appendf(b, `,"cleared_thinking_turns":%d`, e.ClearedThinkingTurns)
	case EditClearToolUses:
		b = fmt.Appendf(b, `,"cleared_tool_uses":%d`, e.ClearedToolUses)
	default:
		if e.ClearedToolUses != 0 {
			b = fmt.Appendf(b, `,"cleared_tool_uses":%d`, e.ClearedToolUses)
		}
		if e.ClearedThinkingTurns != 0 {
			b = fmt.Appendf(b, `,"cleared_thinking_turns":%d`, e.ClearedThinkingTurns)
		}
	}
	b = fmt.Appendf(b, `,"cleared_input_tokens":%d}`, e.ClearedInputTokens)
	return b, nil
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

func marshalEdits(edits []AppliedEdit) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(edits))
	for _, e := range edits {
		b, _ := e.MarshalJSON()
		out = append(out, b)
	}
	return out
}

// MarshalCall renders c as one ledger JSON line (without the newline).
func MarshalCall(c *Call) ([]byte, error) {
	r := record{
		V:            LedgerVersion,
		Time:         c.Time.UTC().Format(time.RFC3339Nano),
		Tenant:       c.Tenant,
		Model:        c.Model,
		RequestID:    c.RequestID,
		MessageID:    c.MessageID,
		Stream:       c.Stream,
		Status:       c.Status,
		Usage:        c.Usage,
		AppliedEdits: marshalEdits(c.Edits),
		Cleared:      c.ClearedInputTokens(),
		CostUSD:      c.Cost,
		SavingsUSD:   c.Savings,
		PriceUnknown: c.PriceUnknown,
	}
	b, err := json.Marshal(&r)
	if err != nil {
		return nil, fmt.Errorf("marshal ledger record: %w", err)
	}
	return b, nil
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
		Time: t, Tenant: r.Tenant, Model: r.Model, RequestID: r.RequestID, MessageID: r.MessageID,
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
