// Package capabilities reads what the API says of its models (GET /v1/models:
// each model's capabilities, max_input_tokens, lifecycle and retires_at)
// through each tenant's own upstream credential, at start and every ten
// minutes, and keeps the answers for the request path, which never waits
// for them: it reads an immutable snapshot through one atomic load.
//
// A tenant with its own key (upstream.api_key_env or api_key_file) is read
// with that key; a pass-through tenant with the first credential the proxy
// forwards for it (Offer). When a tenant's models cannot be read (any error)
// its lookups answer Unknown, and the caller falls back to its built-in
// lists.
package capabilities

import (
	"github.com/ctxproxy/ctxproxy/internal/modelid"
)

// Support is what the models endpoint said of one capability.
type Support int8

const (
	// Unknown: not read (the endpoint could not be read, the model is not
	// listed, or the entry is null or missing); the caller's built-in list
	// decides.
	Unknown Support = iota
	// Yes: the model has it.
	Yes
	// No: the model does not; a request that uses it gets a 400.
	No
)

func (s Support) String() string {
	switch s {
	case Yes:
		return "yes"
	case No:
		return "no"
	}
	return "unknown"
}

// Model lifecycles (the models endpoint's lifecycle).
const (
	Active     = "active"
	Deprecated = "deprecated"
	Retired    = "retired"
)

// Model is what ctxproxy reads of one model object. The zero Model is a
// model nothing is known of.
type Model struct {
	ID             string
	Lifecycle      string // active, deprecated or retired; "" when not said
	RetiresAt      string // RFC 3339 as the API wrote it; "" when null
	MaxInputTokens int64  // 0 when null
	// The context management strategies ctxproxy writes
	// (capabilities.context_management.*; context_management.supported
	// false makes each No).
	ClearThinking, ClearToolUses, Compact Support
	// BetweenTools is capabilities.thinking.types.between_tools: whether
	// thinking type between_tools is a thinking type of the model.
	BetweenTools Support
}

// Retiring reports whether the model is deprecated or retired.
func (m *Model) Retiring() bool { return m.Lifecycle == Deprecated || m.Lifecycle == Retired }

// table is one credential's models, by id and by the id of the model a
// dated snapshot belongs to (a request may name claude-opus-4-5 where the
// list says claude-opus-4-5-20251101). Immutable once built.
type table struct {
	byName map[string]int // index in list
	list   []Model        // as listed, newest first
}

func newTable(models []Model) *table {
	t := &table{byName: make(map[string]int, 2*len(models)), list: models}
	for i, m := range models {
		t.byName[m.ID] = i
	}
	for i, m := range models { // an exact id wins over a snapshot's base
		if b := modelid.Base(m.ID); b != m.ID {
			if _, taken := t.byName[b]; !taken {
				t.byName[b] = i
			}
		}
	}
	return t
}

// lookup finds model as listed, else as a dated snapshot of a listed model
// (claude-opus-4-5-20251101 for claude-opus-4-5@20251101): its index in list.
func (t *table) lookup(model string) (int, bool) {
	if t == nil || model == "" {
		return 0, false
	}
	if i, ok := t.byName[model]; ok {
		return i, true
	}
	if b := modelid.Base(model); b != model {
		i, ok := t.byName[b]
		return i, ok
	}
	return 0, false
}
