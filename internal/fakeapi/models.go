package fakeapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/sjson"
)

// Model lifecycles (the API's BetaModelInfo.lifecycle).
const (
	LifecycleActive     = "active"
	LifecycleDeprecated = "deprecated"
	LifecycleRetired    = "retired"
)

// Support is a capability leaf: {"supported": bool}.
type Support struct {
	Supported bool `json:"supported"`
}

// Capabilities is a model's capabilities object, every key the API knows.
// A nil pointer is served as null, which a reader must take as "unknown".
type Capabilities struct {
	Batch         Support `json:"batch"`
	Citations     Support `json:"citations"`
	CodeExecution Support `json:"code_execution"`
	// Compaction is the on-demand compaction parameter; the API serves it on
	// the beta object only (see Options.ModelBetaFieldsAlways).
	Compaction        *CompactionCapability       `json:"compaction"`
	ContextManagement ContextManagementCapability `json:"context_management"`
	Effort            EffortCapability            `json:"effort"`
	ImageInput        Support                     `json:"image_input"`
	PDFInput          Support                     `json:"pdf_input"`
	ServerTools       ServerToolsCapability       `json:"server_tools"`
	StructuredOutputs Support                     `json:"structured_outputs"`
	Thinking          ThinkingCapability          `json:"thinking"`
}

// CompactionCapability is capabilities.compaction.
type CompactionCapability struct {
	Supported bool    `json:"supported"`
	Summarize Support `json:"summarize"`
}

// ContextManagementCapability is capabilities.context_management: one entry
// per edit strategy, null when unknown.
type ContextManagementCapability struct {
	Supported     bool     `json:"supported"`
	ClearThinking *Support `json:"clear_thinking_20251015"`
	ClearToolUses *Support `json:"clear_tool_uses_20250919"`
	Compact       *Support `json:"compact_20260112"`
}

// EffortCapability is capabilities.effort.
type EffortCapability struct {
	Supported bool     `json:"supported"`
	Low       Support  `json:"low"`
	Medium    Support  `json:"medium"`
	High      Support  `json:"high"`
	Max       Support  `json:"max"`
	XHigh     *Support `json:"xhigh"`
}

// ServerToolsCapability is capabilities.server_tools.
type ServerToolsCapability struct {
	Supported     bool    `json:"supported"`
	WebSearch     Support `json:"web_search"`
	CodeExecution Support `json:"code_execution"`
}

// ThinkingCapability is capabilities.thinking.
type ThinkingCapability struct {
	Supported bool          `json:"supported"`
	Types     ThinkingTypes `json:"types"`
}

// ThinkingTypes says which thinking.type values a model takes, each on its own.
type ThinkingTypes struct {
	Enabled      Support `json:"enabled"`
	Adaptive     Support `json:"adaptive"`
	Disabled     Support `json:"disabled"`
	BetweenTools Support `json:"between_tools"`
}

// Model is one entry of the fake's model table, served by GET /v1/models and
// GET /v1/models/{id} and consulted by /v1/messages (a request naming a
// retired model is refused, and a known model's capabilities and max_tokens
// are enforced; a model the table does not know is taken as it comes).
//
// The JSON form is the API's model object plus the fake-only fields below;
// an empty string, 0 or nil is served as null.
type Model struct {
	ID                    string        `json:"id"`
	DisplayName           string        `json:"display_name"`
	CreatedAt             string        `json:"created_at"`
	Lifecycle             string        `json:"lifecycle"`
	DeprecatedAt          string        `json:"deprecated_at,omitempty"`
	RetiresAt             string        `json:"retires_at,omitempty"`
	Line                  string        `json:"line,omitempty"`
	MaxInputTokens        int64         `json:"max_input_tokens,omitempty"`
	MaxTokens             int64         `json:"max_tokens,omitempty"`
	AllowedFallbackModels []string      `json:"allowed_fallback_models"`
	Capabilities          *Capabilities `json:"capabilities"`

	// Aliases resolve to ID in GET /v1/models/{id} and in requests (binding
	// treats them as one model). Fake-only, never served.
	Aliases []string `json:"aliases,omitempty"`
	// FastMode is whether speed "fast" is taken: "" not at all (400), "beta"
	// only with the fast-mode-2026-02-01 beta, "ga" always. Fake-only.
	FastMode string `json:"fast_mode,omitempty"`
	// Raw, when set, is served instead of the object built from the fields
	// above (for shapes the fields cannot express: a missing key, a wrong
	// type). The fields still drive validation. Fake-only.
	Raw json.RawMessage `json:"raw,omitempty"`
}

// servedModel is the API's model object; pointers are the nullable fields.
type servedModel struct {
	Type                  string        `json:"type"`
	ID                    string        `json:"id"`
	DisplayName           string        `json:"display_name"`
	CreatedAt             string        `json:"created_at"`
	Lifecycle             string        `json:"lifecycle"`
	DeprecatedAt          *string       `json:"deprecated_at"`
	RetiresAt             *string       `json:"retires_at"`
	Line                  *string       `json:"line"`
	MaxInputTokens        *int64        `json:"max_input_tokens"`
	MaxTokens             *int64        `json:"max_tokens"`
	AllowedFallbackModels []string      `json:"allowed_fallback_models"`
	Capabilities          *Capabilities `json:"capabilities"`
}

func orNil[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// serve is the model object as the API answers it; without beta the
// beta-only keys (capabilities.compaction, allowed_fallback_models) are left
// out.
func (m *Model) serve(beta bool) []byte {
	if len(m.Raw) > 0 {
		return m.Raw
	}
	created := m.CreatedAt
	if created == "" {
		created = "1970-01-01T00:00:00Z" // the API's "release date unknown"
	}
	b, err := json.Marshal(servedModel{Type: "model", ID: m.ID, DisplayName: m.DisplayName, CreatedAt: created,
		Lifecycle: m.Lifecycle, DeprecatedAt: orNil(m.DeprecatedAt), RetiresAt: orNil(m.RetiresAt), Line: orNil(m.Line),
		MaxInputTokens: orNil(m.MaxInputTokens), MaxTokens: orNil(m.MaxTokens),
		AllowedFallbackModels: m.AllowedFallbackModels, Capabilities: m.Capabilities})
	if err != nil {
		panic("fakeapi: model " + m.ID + ": " + err.Error())
	}
	if !beta {
		// Unverified whether the API leaves these out of a request without
		// any beta header (the December 2026 API reference's unverified list); Options.ModelBetaFieldsAlways
		// switches to serving them always.
		b, _ = sjson.DeleteBytes(b, "allowed_fallback_models")
		if m.Capabilities != nil {
			b, _ = sjson.DeleteBytes(b, "capabilities.compaction")
		}
	}
	return b
}

// modelTable is Options.Models indexed: newest first, and by id and alias.
type modelTable struct {
	list   []*Model
	byName map[string]*Model
}

func newModelTable(models []Model) *modelTable {
	if models == nil {
		models = DefaultModels()
	}
	t := &modelTable{byName: make(map[string]*Model, 2*len(models))}
	for i := range models {
		m := &models[i]
		t.list = append(t.list, m)
		for _, n := range append([]string{m.ID}, m.Aliases...) {
			if _, dup := t.byName[n]; !dup {
				t.byName[n] = m
			}
		}
	}
	// Newest first, as the API lists them; RFC 3339 strings of one form sort
	// as text. Stable, so equal dates keep the table's order.
	slices.SortStableFunc(t.list, func(a, b *Model) int { return strings.Compare(b.CreatedAt, a.CreatedAt) })
	return t
}

// lookup finds a model by id or alias (nil when the table does not know it).
func (t *modelTable) lookup(name string) *Model {
	if t == nil {
		return nil
	}
	return t.byName[name]
}

// resolve is the model id name stands for: its table id, else name itself.
func (t *modelTable) resolve(name string) string {
	if m := t.lookup(name); m != nil {
		return m.ID
	}
	return name
}

// models returns the table in force.
func (a *API) models() *modelTable {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.table
}

// SetModels replaces the model table (nil: DefaultModels). It is
// Options.Models, so POST /_fake/options {"models":[...]} does the same.
func (a *API) SetModels(models []Model) {
	a.mu.Lock()
	a.opts.Models = models
	a.table = newModelTable(models)
	a.mu.Unlock()
}

// WithModels sets Options.Models.
func WithModels(models ...Model) Option {
	return func(a *API) { a.opts.Models = append([]Model{}, models...) }
}

// serveModels answers GET /v1/models and GET /v1/models/{id}; it reports
// false for any other request. The API needs no beta for either route; the
// beta-only keys come with any anthropic-beta header.
func (a *API) serveModels(w http.ResponseWriter, req *http.Request, r *Request) bool {
	p := req.URL.Path
	if req.Method != http.MethodGet || (p != "/v1/models" && !strings.HasPrefix(p, "/v1/models/")) {
		return false
	}
	a.mu.Lock()
	table, always, keyErrs := a.table, a.opts.ModelBetaFieldsAlways, a.opts.KeyErrors
	a.mu.Unlock()
	if code := keyErrs[r.Credential]; code != "" && modelsErrorCodes[code] {
		// The two codes the SDKs document on the models routes.
		a.answerCoded(w, req, r, code)
		return true
	}
	beta := always || len(parseBetas(req.Header)) > 0
	var out []byte
	if p == "/v1/models" {
		var rerr *reqError
		out, rerr = table.page(req.URL.Query(), beta)
		if rerr != nil {
			a.answerError(w, req, r, rerr.status, rerr.err, r.ID)
			return true
		}
	} else {
		id := strings.TrimPrefix(p, "/v1/models/")
		m := table.lookup(id)
		if m == nil {
			a.answerError(w, req, r, 404, &APIError{Type: "not_found_error", Message: "model: " + id}, r.ID)
			return true
		}
		out = m.serve(beta)
	}
	a.finish(r, 200, "", nil)
	a.setOutcome(r, OutcomeOK)
	a.writeBody(w, req, "", http.StatusOK, out)
	return true
}

// page answers GET /v1/models: newest first, after_id / before_id cursors,
// limit 1-1000 (default 20), lifecycle filter (up to 3 values; without it
// active and deprecated models). The Go SDK writes lifecycle[]=…, others
// lifecycle=…; both are read (unverified which the API wants).
func (t *modelTable) page(q url.Values, beta bool) ([]byte, *reqError) {
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		switch {
		case err != nil:
			return nil, badRequest("limit: Input should be a valid integer")
		case n < 1:
			return nil, badRequest("limit: Input should be greater than or equal to 1")
		case n > 1000:
			return nil, badRequest("limit: Input should be less than or equal to 1000")
		}
		limit = n
	}
	after, before := q.Get("after_id"), q.Get("before_id")
	if after != "" && before != "" {
		return nil, badRequest("after_id and before_id cannot be given together")
	}
	stages := append(q["lifecycle"], q["lifecycle[]"]...)
	if len(stages) > 3 {
		return nil, badRequest("lifecycle: List should have at most 3 items after validation, not %d", len(stages))
	}
	for _, s := range stages {
		if s != LifecycleActive && s != LifecycleDeprecated && s != LifecycleRetired {
			return nil, badRequest("lifecycle: Input should be 'active', 'deprecated' or 'retired'")
		}
	}
	if len(stages) == 0 {
		stages = []string{LifecycleActive, LifecycleDeprecated}
	}
	// Cursors are positions in the whole list, so a cursor naming a model the
	// filter leaves out still works. A cursor naming no model gives an empty
	// page (unverified: the API may answer 400).
	var match []int
	cursor := -1
	for i, m := range t.list {
		if m.ID == after || m.ID == before {
			cursor = i
		}
		if slices.Contains(stages, m.Lifecycle) {
			match = append(match, i)
		}
	}
	var sel []int
	hasMore := false
	switch {
	case after != "" || before != "":
		if cursor < 0 {
			break
		}
		if after != "" {
			k := 0
			for k < len(match) && match[k] <= cursor {
				k++
			}
			rest := match[k:]
			sel, hasMore = rest[:min(limit, len(rest))], len(rest) > limit
		} else {
			k := 0
			for k < len(match) && match[k] < cursor {
				k++
			}
			head := match[:k]
			sel, hasMore = head[max(len(head)-limit, 0):], len(head) > limit
		}
	default:
		sel, hasMore = match[:min(limit, len(match))], len(match) > limit
	}
	b := []byte(`{"data":[`)
	for i, k := range sel {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, t.list[k].serve(beta)...)
	}
	b = append(b, `],"has_more":`...)
	b = strconv.AppendBool(b, hasMore)
	first, last := "null", "null"
	if len(sel) > 0 {
		first, last = string(mustJSON(t.list[sel[0]].ID)), string(mustJSON(t.list[sel[len(sel)-1]].ID))
	}
	b = append(b, `,"first_id":`+first+`,"last_id":`+last+`}`...)
	return b, nil
}

// checkModel applies the table's facts about the requested model: a retired
// model is refused (404, as for a model that does not exist) and max_tokens
// is bounded by the model's. A model the table does not know passes.
func checkModel(m *Model, maxTokens int64) *reqError {
	if m == nil {
		return nil
	}
	if m.Lifecycle == LifecycleRetired {
		return &reqError{404, &APIError{Type: "not_found_error", Message: "model: " + m.ID + " has been retired"}}
	}
	if m.MaxTokens > 0 && maxTokens > m.MaxTokens {
		return badRequest("max_tokens: %d > %d, which is the maximum allowed number of output tokens for %s", maxTokens, m.MaxTokens, m.ID)
	}
	return nil
}

// caps is the capabilities of a known model, nil for an unknown one (or one
// served with null capabilities): nil means "take everything".
func caps(m *Model) *Capabilities {
	if m == nil {
		return nil
	}
	return m.Capabilities
}

// notSupported is the 400 for a feature the model's capabilities say no to.
func notSupported(field, what, model string) *reqError {
	return badRequest("%s: %s is not supported by model %s", field, what, model)
}

// checkEditSupport refuses an edit strategy the model does not take (a null
// entry is unknown, and taken).
func checkEditSupport(c *Capabilities, typ, where, model string) *reqError {
	if c == nil {
		return nil
	}
	cm := c.ContextManagement
	var s *Support
	switch typ {
	case editClearThinking:
		s = cm.ClearThinking
	case editClearToolUses:
		s = cm.ClearToolUses
	case editCompact:
		s = cm.Compact
	}
	if !cm.Supported || (s != nil && !s.Supported) {
		return notSupported(where, fmt.Sprintf("context management strategy %s", typ), model)
	}
	return nil
}
