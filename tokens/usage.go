// Package tokens turns the usage and context_management.applied_edits of upstream replies into
// per-tenant figures: parsing (non-streaming bodies and SSE events: ParseReply, StreamMeter),
// prices (a built-in table, prices.yaml), Prometheus metrics, a ledger of upstream calls (a file
// or PostgreSQL, written by the Recorder off the request path) and the reports built from it
// (`ctxproxy report`, /admin/report, the console).
//
// Savings are net of the prompt cache, defined once (savings.go): what clearing saved at the
// price the cleared tokens would have cost, less what re-writing the cache misses the edits
// caused cost over reading them (the miss causes, MissCauses, are package cachetrack's
// diagnosis). Net savings may be negative.
//
// Reports over long periods read rollups (rollup.go): sums per hour (the file ledger: per day)
// and tenant, model, key id or user that each ledger keeps as it appends, the lines themselves
// read only for the parts of a bucket at either end of the period.
package tokens

import (
	"strconv"
	"strings"
	"unsafe"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/tidwall/gjson"
)

// Usage is the token usage of one upstream call.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	// CacheCreation1hInputTokens is the part of CacheCreationInputTokens written with the 1-hour
	// TTL (usage.cache_creation.ephemeral_1h_input_tokens); it is priced at the 1h write price.
	CacheCreation1hInputTokens int64 `json:"cache_creation_1h_input_tokens,omitempty"`
	// WebSearchRequests is usage.server_tool_use.web_search_requests, priced per search.
	WebSearchRequests int64 `json:"web_search_requests,omitempty"`
}

// Iteration types of usage.iterations (the compaction reference's applied_edits and usage section).
const (
	IterationMessage         = "message"
	IterationCompaction      = "compaction"
	IterationAdvisorMessage  = "advisor_message"
	IterationFallbackMessage = "fallback_message"
)

// Iteration is one entry of usage.iterations: one sampling step of a call, with its own model
// when it names one (advisor and fallback steps run on another model than the call's).
type Iteration struct {
	Type  string
	Model string // "" when the entry names none: the call's model
	Usage Usage
	Cost  Money // filled by Prices.Price
}

// Add adds o to u field by field.
func (u *Usage) Add(o Usage) {
	u.InputTokens += o.InputTokens
	u.OutputTokens += o.OutputTokens
	u.CacheCreationInputTokens += o.CacheCreationInputTokens
	u.CacheReadInputTokens += o.CacheReadInputTokens
	u.CacheCreation1hInputTokens += o.CacheCreation1hInputTokens
	u.WebSearchRequests += o.WebSearchRequests
}

// TotalInput is input + cache creation + cache read: everything the model read.
func (u Usage) TotalInput() int64 {
	return u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
}

// Edit types the API documents; others are kept as raw JSON.
const (
	EditClearToolUses = "clear_tool_uses_20250919"
	EditClearThinking = "clear_thinking_20251015"
)

// AppliedEdit is one entry of context_management.applied_edits.
type AppliedEdit struct {
	Type                 string
	ClearedToolUses      int64
	ClearedThinkingTurns int64
	ClearedInputTokens   int64
	// Raw is the entry's JSON, kept only for types this package does not know
	// (their cleared_input_tokens is still read when present).
	Raw string
}

// ClearedInputTokens sums cleared_input_tokens over edits.
func ClearedInputTokens(edits []AppliedEdit) int64 {
	var n int64
	for _, e := range edits {
		n += e.ClearedInputTokens
	}
	return n
}

// Reply is what this package reads from one Messages reply.
type Reply struct {
	ID, Model, StopReason string
	// Usage is the top-level usage. It leaves out compaction steps; Billed sums the iterations.
	Usage Usage
	// Iterations is usage.iterations (nil when the reply has none).
	Iterations []Iteration
	// ServiceTier is usage.service_tier (standard, priority, batch; "" when absent).
	ServiceTier string
	Edits       []AppliedEdit
	// ErrorType is the error.type of an SSE error event (streams only).
	ErrorType string
	// Cut: the client cut the stream before its message_delta, so Usage is an estimate
	// (StreamMeter.CutReply).
	Cut bool
	// Transformations is input_transformations: what the API did to the request's thinking
	// blocks (thinking block binding), nil when the reply did not say.
	Transformations []Transformation
}

// Transformation is one input_transformations entry, without its path.
type Transformation struct {
	Type, Reason string
}

// parseTransformations reads an input_transformations array; entries without a string type
// are left out.
func parseTransformations(v gjson.Result) []Transformation {
	if !v.IsArray() {
		return nil
	}
	out := []Transformation{}
	v.ForEach(func(_, e gjson.Result) bool {
		if t := e.Get("type"); t.Type == gjson.String {
			out = append(out, Transformation{Type: strings.Clone(t.Str), Reason: strings.Clone(e.Get("reason").Str)})
		}
		return true
	})
	return out
}

// ParseMessage reads usage and applied_edits from a non-streaming Messages reply body.
func ParseMessage(body []byte) (Usage, []AppliedEdit) {
	r := ParseReply(body)
	return r.Usage, r.Edits
}

// ParseReply reads id, model, stop_reason, usage and applied_edits from a non-streaming Messages
// reply body in one pass over its top-level keys. body is not retained.
func ParseReply(body []byte) Reply { return ParseReplyAnd(body, nil) }

// ParseReplyAnd is ParseReply handing every other top-level member to also (when not nil), in
// the same pass: a caller that reads the reply too reads it once. v is a view of body: what also
// keeps of it must be copied.
func ParseReplyAnd(body []byte, also func(key string, v gjson.Result)) Reply {
	var r Reply
	gjson.Parse(bytesView(body)).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "id":
			r.ID = strings.Clone(v.Str)
		case "model":
			r.Model = strings.Clone(v.Str)
		case "stop_reason":
			r.StopReason = strings.Clone(v.Str)
		case "usage":
			r.Usage = parseUsage(v)
			r.Iterations, r.ServiceTier = parseIterations(v)
		case "context_management":
			r.Edits = parseEdits(v)
		case "input_transformations":
			r.Transformations = parseTransformations(v)
		default:
			if also != nil {
				also(k.Str, v)
			}
		}
		return true
	})
	return r
}

// Billed is what the call was billed for: the sum of usage.iterations when the reply has them
// (the top-level usage leaves out compaction), else the top-level usage. Web searches are
// counted at the top level only.
func (r *Reply) Billed() Usage {
	if r.Iterations == nil {
		return r.Usage
	}
	var u Usage
	for _, it := range r.Iterations {
		u.Add(it.Usage)
	}
	u.WebSearchRequests = r.Usage.WebSearchRequests
	return u
}

// parseIterations reads usage.iterations and usage.service_tier.
func parseIterations(v gjson.Result) ([]Iteration, string) {
	if !v.IsObject() {
		return nil, ""
	}
	tier := strings.Clone(v.Get("service_tier").Str)
	list := v.Get("iterations")
	if !list.IsArray() {
		return nil, tier
	}
	its := []Iteration{}
	list.ForEach(func(_, e gjson.Result) bool {
		if !e.IsObject() {
			return true
		}
		it := Iteration{Type: iterationType(e.Get("type").Str), Model: strings.Clone(e.Get("model").Str), Usage: parseUsage(e)}
		its = append(its, it)
		return true
	})
	return its, tier
}

func iterationType(t string) string {
	switch t {
	case IterationMessage, IterationCompaction, IterationAdvisorMessage, IterationFallbackMessage:
		return t
	}
	return strings.Clone(t)
}

// CountTokens is a count_tokens reply.
type CountTokens struct {
	InputTokens         int64 // after edits
	OriginalInputTokens int64 // before edits; 0 unless HasOriginal
	HasOriginal         bool
}

// Cleared is the number of input tokens context editing removed (0 when unknown).
func (c CountTokens) Cleared() int64 {
	if !c.HasOriginal || c.OriginalInputTokens < c.InputTokens {
		return 0
	}
	return c.OriginalInputTokens - c.InputTokens
}

// ParseCountTokens reads a /v1/messages/count_tokens reply body.
func ParseCountTokens(body []byte) CountTokens {
	s := bytesView(body)
	var c CountTokens
	c.InputTokens = gjson.Get(s, "input_tokens").Int()
	if o := gjson.Get(s, "context_management.original_input_tokens"); o.Exists() && o.Type == gjson.Number {
		c.OriginalInputTokens, c.HasOriginal = o.Int(), true
	}
	return c
}

func parseUsage(v gjson.Result) Usage {
	var u Usage
	if !v.IsObject() {
		return u
	}
	v.ForEach(func(k, f gjson.Result) bool {
		switch k.Str {
		case "input_tokens":
			u.InputTokens = f.Int()
		case "output_tokens":
			u.OutputTokens = f.Int()
		case "cache_creation_input_tokens":
			u.CacheCreationInputTokens = f.Int()
		case "cache_read_input_tokens":
			u.CacheReadInputTokens = f.Int()
		case "cache_creation":
			u.CacheCreation1hInputTokens = f.Get("ephemeral_1h_input_tokens").Int()
		case "server_tool_use":
			u.WebSearchRequests = f.Get("web_search_requests").Int()
		}
		return true
	})
	return u
}

// parseEdits reads context_management (object, null or absent) into its applied edits.
func parseEdits(cm gjson.Result) []AppliedEdit {
	if !cm.IsObject() {
		return nil
	}
	list := cm.Get("applied_edits")
	if !list.IsArray() {
		return nil
	}
	var edits []AppliedEdit
	list.ForEach(func(_, e gjson.Result) bool {
		if ed, ok := parseEdit(e); ok {
			edits = append(edits, ed)
		}
		return true
	})
	return edits
}

func parseEdit(e gjson.Result) (AppliedEdit, bool) {
	if !e.IsObject() {
		return AppliedEdit{}, false
	}
	var ed AppliedEdit
	e.ForEach(func(k, f gjson.Result) bool {
		switch k.Str {
		case "type":
			ed.Type = f.Str
		case "cleared_tool_uses":
			ed.ClearedToolUses = f.Int()
		case "cleared_thinking_turns":
			ed.ClearedThinkingTurns = f.Int()
		case "cleared_input_tokens":
			ed.ClearedInputTokens = f.Int()
		}
		return true
	})
	switch ed.Type {
	case EditClearToolUses:
		ed.Type = EditClearToolUses // constant: no reference into the body
	case EditClearThinking:
		ed.Type = EditClearThinking
	default:
		ed.Type = strings.Clone(ed.Type)
		ed.Raw = strings.Clone(e.Raw)
	}
	return ed, true
}

// StreamMeter accumulates usage and applied_edits from the SSE events of one streamed reply.
// The zero value is ready; it is not safe for concurrent use.
type StreamMeter struct {
	r     Reply
	start Usage // from message_start
	delta Usage // latest non-zero values from message_delta
	// produced is the bytes of text, thinking and tool input the content_block_delta events
	// carried (Delta), JSON escapes included.
	produced int64
}

// meterUsage reads the parts of a usage object that are not counters the meter merges:
// iterations (message_delta carries them) and service_tier.
func (m *StreamMeter) meterUsage(v gjson.Result) {
	its, tier := parseIterations(v)
	if its != nil {
		m.r.Iterations = its
	}
	if tier != "" {
		m.r.ServiceTier = tier
	}
}

// Event feeds one SSE event: its name (the `event:` line; may be empty, then data's type is used)
// and its data. Unknown events are ignored. data is not retained.
func (m *StreamMeter) Event(name string, data []byte) {
	s := bytesView(data)
	if name == "" {
		name = gjson.Get(s, "type").Str
	}
	switch name {
	case "message_start":
		gjson.Get(s, "message").ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "id":
				m.r.ID = strings.Clone(v.Str)
			case "model":
				m.r.Model = strings.Clone(v.Str)
			case "usage":
				m.start = parseUsage(v)
				m.meterUsage(v)
			case "context_management":
				if e := parseEdits(v); e != nil {
					m.r.Edits = e
				}
			case "input_transformations":
				m.r.Transformations = parseTransformations(v)
			}
			return true
		})
	case "message_delta":
		gjson.Parse(s).ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "usage":
				// Cumulative counts; some relays send zeros in message_start and the real
				// figures here, others omit input fields here: prefer non-zero values.
				u := parseUsage(v)
				preferNonZero(&m.delta.InputTokens, u.InputTokens)
				preferNonZero(&m.delta.OutputTokens, u.OutputTokens)
				preferNonZero(&m.delta.CacheCreationInputTokens, u.CacheCreationInputTokens)
				preferNonZero(&m.delta.CacheReadInputTokens, u.CacheReadInputTokens)
				preferNonZero(&m.delta.CacheCreation1hInputTokens, u.CacheCreation1hInputTokens)
				preferNonZero(&m.delta.WebSearchRequests, u.WebSearchRequests)
				m.meterUsage(v)
			case "context_management":
				if v.IsObject() {
					m.r.Edits = parseEdits(v)
				}
			case "input_transformations":
				// Only after a server-side fallback mid-stream: the serving model's entries
				// replace message_start's.
				if v.IsArray() {
					m.r.Transformations = parseTransformations(v)
				}
			case "delta":
				if sr := v.Get("stop_reason"); sr.Type == gjson.String {
					m.r.StopReason = strings.Clone(sr.Str)
				}
			}
			return true
		})
	case "error":
		m.r.ErrorType = strings.Clone(gjson.Get(s, "error.type").Str)
	}
}

func preferNonZero(dst *int64, v int64) {
	if v != 0 {
		*dst = v
	}
}

// Delta feeds the data of a content_block_delta event: the text, thinking and partial tool input
// it carries are output the model produced (OutputEstimate). data is not retained.
func (m *StreamMeter) Delta(data []byte) {
	d := gjson.Get(bytesView(data), "delta")
	// The delta's own bytes less its envelope: no string of it is read, since gjson unescapes
	// (allocates) a string it returns, and this runs on every delta of every stream.
	var envelope int
	switch d.Get("type").Str {
	case "text_delta":
		envelope = len(`{"type":"text_delta","text":""}`)
	case "thinking_delta":
		envelope = len(`{"type":"thinking_delta","thinking":""}`)
	case "input_json_delta":
		envelope = len(`{"type":"input_json_delta","partial_json":""}`)
	default: // signatures and citations are not output the model wrote
		return
	}
	m.produced += int64(max(len(d.Raw)-envelope, 0))
}

// OutputEstimate is the output tokens the deltas fed to Delta carry, at four bytes a token
// (rounded up), as the input of a request is estimated before its reply says.
func (m *StreamMeter) OutputEstimate() int64 { return m.produced/4 + min(m.produced%4, 1) }

// CutReply is the reply of a stream its client cut before message_delta, which would have
// said the output tokens: they are the most of what message_start said, OutputEstimate, and
// floor (what the request held for its output against a spend cap, 0 for none). Cut is set;
// usage.iterations, which come with message_delta, are not known.
func (m *StreamMeter) CutReply(floor int64) Reply {
	r := m.Reply()
	r.Usage.OutputTokens = max(r.Usage.OutputTokens, m.OutputEstimate(), floor)
	r.Iterations, r.Cut = nil, true
	return r
}

// Result is the usage and applied edits seen so far.
func (m *StreamMeter) Result() (Usage, []AppliedEdit) {
	r := m.Reply()
	return r.Usage, r.Edits
}

// Reply is everything read so far: message_delta values win over message_start ones when non-zero.
func (m *StreamMeter) Reply() Reply {
	r := m.r
	u := m.start
	preferNonZero(&u.InputTokens, m.delta.InputTokens)
	preferNonZero(&u.OutputTokens, m.delta.OutputTokens)
	preferNonZero(&u.CacheCreationInputTokens, m.delta.CacheCreationInputTokens)
	preferNonZero(&u.CacheReadInputTokens, m.delta.CacheReadInputTokens)
	preferNonZero(&u.CacheCreation1hInputTokens, m.delta.CacheCreation1hInputTokens)
	preferNonZero(&u.WebSearchRequests, m.delta.WebSearchRequests)
	r.Usage = u
	return r
}

// Model is the model named in message_start.
func (m *StreamMeter) Model() string { return m.r.Model }

// ID is the message id named in message_start.
func (m *StreamMeter) ID() string { return m.r.ID }

// bytesView lets gjson read b without copying it; every string kept from the results is cloned.
func bytesView(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// appendTokenCounts appends u's four token counts as JSON members, in the
// API's order (the ledger and usage.iterations write them alike).
func appendTokenCounts(b []byte, u Usage) []byte {
	b = append(b, `"input_tokens":`...)
	b = strconv.AppendInt(b, u.InputTokens, 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, u.OutputTokens, 10)
	b = append(b, `,"cache_creation_input_tokens":`...)
	b = strconv.AppendInt(b, u.CacheCreationInputTokens, 10)
	b = append(b, `,"cache_read_input_tokens":`...)
	return strconv.AppendInt(b, u.CacheReadInputTokens, 10)
}

// AppendIterations appends its as the API's usage.iterations array (what a client that is
// handed several upstream calls as one message gets: every call's steps, in order).
func AppendIterations(b []byte, its []Iteration) []byte {
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
		u := it.Usage
		b = appendTokenCounts(append(b, ','), u)
		b = append(b, `,"cache_creation":{"ephemeral_5m_input_tokens":`...)
		b = strconv.AppendInt(b, u.CacheCreationInputTokens-u.CacheCreation1hInputTokens, 10)
		b = append(b, `,"ephemeral_1h_input_tokens":`...)
		b = strconv.AppendInt(b, u.CacheCreation1hInputTokens, 10)
		b = append(b, "}}"...)
	}
	return append(b, ']')
}
