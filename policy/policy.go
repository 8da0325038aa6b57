package policy

import (
	"fmt"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/capabilities"
	"github.com/ctxproxy/ctxproxy/internal/modelid"
	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// CMMode says how the tenant's context_management edits combine with the client's.
type CMMode string

const (
	// CMEnforce: the tenant's edits replace whatever edits the client sent.
	CMEnforce CMMode = "enforce"
	// CMDefault: the client's edits stand if it sent any, else the tenant's are written.
	CMDefault CMMode = "default"
	// CMOff: the body's context_management is left exactly as the client sent it.
	CMOff CMMode = "off"
)

// MemoryMode says whether the memory tool is added and who runs its calls.
type MemoryMode string

const (
	// MemoryProxy: ctxproxy adds the memory tool and executes the model's calls itself.
	MemoryProxy MemoryMode = "proxy"
	// MemoryInject: ctxproxy adds the memory tool; the client executes the calls.
	MemoryInject MemoryMode = "inject"
	// MemoryOff: no memory tool is added.
	MemoryOff MemoryMode = "off"
)

// Names the API uses.
const (
	BetaContextManagement = "context-management-2025-06-27"
	EditClearThinking     = "clear_thinking_20251015"
	EditClearToolUses     = "clear_tool_uses_20250919"
	MemoryToolType        = "memory_20250818"
	MemoryToolName        = "memory"
	// EditCompact is server-side compaction (the compaction reference's request shape); it needs BetaCompact.
	EditCompact = "compact_20260112"
	BetaCompact = "compact-2026-01-12"
	// MinCompactTrigger is the lowest trigger the API accepts for compact_20260112.
	MinCompactTrigger = 50000
)

// ThreadsMode says what ctxproxy does with a threaded request (thread create or continue) to
// which the policy adds context_management edits. Whether the API accepts edits in threads is
// unverified (the 2026 API reference's message-threads section): it may answer 400 thread_unsupported_request.
type ThreadsMode string

const (
	// ThreadsPass forwards the request with its edits; a 400 thread_unsupported_request from the
	// API reaches the client unchanged and the SDK runners go on unthreaded.
	ThreadsPass ThreadsMode = "pass"
	// ThreadsUnthreadEdits answers such a request with that same 400 before any upstream call,
	// so the SDK runners go on unthreaded without a wasted round trip. The default: the edits
	// stay in force on every request that reaches the model, and no upstream call is spent
	// finding out (pass spends one per run when the API refuses edits in threads).
	ThreadsUnthreadEdits ThreadsMode = "unthread_edits"
)

// DefaultThreads is context_management.threads when a policy does not set it.
const DefaultThreads = ThreadsUnthreadEdits

// DefaultCompactModels are the models compact_20260112 is written for when a policy lists none:
// those the docs named as supporting compaction by Aug 2026 (compaction spec, "two compaction
// mechanisms"; Haiku is not among them) and their later versions of the same lines (Opus and
// Sonnet 5.5, Fable and Mythos 5.1 and 5.2), which a prefix used to cover. Each names its model
// and its dated snapshots, as price entries do (modelid), never another model.
var DefaultCompactModels = []string{
	"claude-opus-4-6", "claude-opus-4-7", "claude-opus-4-8", "claude-opus-5", "claude-opus-5-5",
	"claude-sonnet-4-6", "claude-sonnet-5", "claude-sonnet-5-5",
	"claude-fable-5", "claude-fable-5-1", "claude-fable-5-2",
	"claude-mythos-5", "claude-mythos-5-1", "claude-mythos-5-2", "claude-mythos-preview",
}

// Defaults for fields a policy file may omit.
const (
	DefaultMaxIterations  = 10
	DefaultRetryBaseDelay = 200 * time.Millisecond
	DefaultRetryMaxDelay  = 5 * time.Second
	// MaxRetries bounds upstream.retries: more than this only hides an outage.
	MaxRetries = 10
)

// DefaultTenant is the tenant of default.yaml, used for clients that match no tenant.
const DefaultTenant = "default"

// KeyStoreSep joins a tenant and a key id into the name of the memory store
// of one key: default~0123abcd. No tenant name holds it.
const KeyStoreSep = "~"

// MemoryPerKey reports whether each key of the tenant has a memory store of
// its own: the default tenant's keys do, since its clients are strangers
// to each other (they match no tenant), so none may read another's memory.
func (p *Policy) MemoryPerKey() bool { return p.Tenant == DefaultTenant }

// MemoryStore names the memory store of a request made with key id keyID
// (package apikey): the tenant's, or with memory per key, tenant~<key id>. ok is
// false when there is none: memory per key and no key.
func (p *Policy) MemoryStore(keyID string) (name string, ok bool) {
	if !p.MemoryPerKey() {
		return p.Tenant, true
	}
	return p.ScopeStoreName(&implicitKeyScope[0], keyID, "")
}

// Policy is one tenant's policy. It is read-only once loaded.
type Policy struct {
	Tenant            string
	File              string     // file it came from
	Line              int        // line of the tenant: key
	KeyHashes         [][32]byte // from api_keys_sha256
	OperatorTokens    [][32]byte // from operator_tokens_sha256: tokens of the memory operator API for this tenant
	keyLines          []int      // line of each key hash, for duplicate reports
	ContextManagement ContextManagement
	Memory            Memory
	Upstream          Upstream
	Limits            Limits // spend caps and per-minute limits
	Tracing           Tracing
	Accounting        Accounting
	Shadow            *Shadow // the policy lab's candidates; nil: none measured

	// Pre-rendered edits (JSON objects), nil when the tenant does not configure the edit.
	// clearToolUsesJSON already lists "memory" in exclude_tools when memory is not off.
	clearThinkingJSON []byte
	clearToolUsesJSON []byte
	compactJSON       []byte // pause_after_compaction false
	compactPauseJSON  []byte // pause_after_compaction true: only for clients that asked for it
	// What Rewrite writes: without clear_thinking [0] or with it [1] (thinking on and the model
	// takes it), without clear_tool_uses [0] or with it [1] (the model takes it), and without the
	// compact edit [0], with it [1] or with it pausing [2], built by render.
	tenant [2][2][3]tenantEdits
	// models is what the API's models endpoint said of the tenant's models; nil: the built-in
	// lists decide every edit.
	models ModelSource
}

// ModelSource is what the API's models endpoint said of a tenant's models
// (package capabilities): the rewrite asks it, per request, whether the model
// takes each edit the tenant writes. Refuses is what the upstream itself
// refused when ctxproxy added an edit (capabilities.Refusals), for the model
// under a thinking type. Neither may block.
type ModelSource interface {
	Model(tenant, model string) capabilities.Model
	Refuses(tenant, model, thinking, edit string) bool
}

// tenantEdits is the tenant's edits for one thinking state, ready to splice.
type tenantEdits struct {
	edits []clientEdit
	types []string // edit types, cap == len so callers appending cannot write into it
	array string   // the JSON array, "" when there are no edits
}

// Tracing is the tracing block of a policy: what of the tenant's traffic
// its spans may carry beyond counts and names.
type Tracing struct {
	// Content puts message and memory content into the tenant's spans
	// (gen_ai.input.messages, gen_ai.output.messages, the memory command's
	// input). Off by default: content never leaves in a trace unless asked.
	Content bool
}

// Accounting is the accounting block of a policy: how the savings of its edits are measured.
type Accounting struct {
	// CacheDiagnostics asks the API's cache diagnostics on every upstream Messages call
	// (diagnostics.previous_message_id, the conversation's previous reply), so a miss the client
	// caused (its own history, system or tools changed) is not charged to the edits; the
	// client's reply shows what it would have without it. nil: on when the policy writes edits.
	CacheDiagnostics *bool
}

// CacheDiagnostics reports whether the tenant's calls ask the API's cache diagnostics: as the
// policy says, else when it writes edits (clear_thinking or clear_tool_uses, mode not off).
func (p *Policy) CacheDiagnostics() bool {
	if p == nil {
		return false
	}
	if d := p.Accounting.CacheDiagnostics; d != nil {
		return *d
	}
	return p.WritesClearingEdits()
}

// WritesClearingEdits reports whether the policy writes clear_thinking or clear_tool_uses.
func (p *Policy) WritesClearingEdits() bool {
	if p == nil {
		return false
	}
	cm := &p.ContextManagement
	return cm.Mode != CMOff && (cm.ClearThinking != nil || cm.ClearToolUses != nil)
}

// ContextManagement is the context_management block of a policy.
type ContextManagement struct {
	Mode          CMMode
	ClearThinking *ClearThinking // nil: never add this edit
	ClearToolUses *ClearToolUses // nil: never add this edit
	Compact       *Compact       // nil: never add compact_20260112
	Threads       ThreadsMode
}

// Compact configures compact_20260112, written after the clearing edits (the API's order rule for
// it is unverified; clear_thinking must be first, so compact goes last).
type Compact struct {
	Trigger      *Threshold // input_tokens, at least MinCompactTrigger; nil: the API's default
	Instructions *string    // replaces the API's summarization prompt; nil: left out
	// PauseAfterCompaction lets a client that asked for the pause (its own compact edit with
	// pause_after_compaction: true) keep it; a client that did not ask never gets it, since a
	// client unaware of stop_reason "compaction" would stop there.
	PauseAfterCompaction bool
	Models               []string // models the edit is written for; DefaultCompactModels when unset
	// ModelsListed: the policy lists Models itself. Then the edit is written only for them (and
	// only where the model's capabilities do not say no); else the models endpoint decides, and
	// DefaultCompactModels only where it cannot be read.
	ModelsListed bool
	// MeasureSavings: after a call that compacted, ctxproxy asks count_tokens what the same
	// request would have read without compaction (an extra call, so off by default) and records
	// the difference as the compaction's savings.
	MeasureSavings bool
}

// CompactFor reports whether the compact edit is written for model: one of Models or a dated
// snapshot of one.
func (c *Compact) CompactFor(model string) bool {
	if c == nil || model == "" {
		return false
	}
	return modelid.Any(model, c.Models)
}

// compactWith reports whether the compact edit is written for model, whose capabilities say
// takes of compact_20260112: never where they say no; where they say yes, for any model unless
// the policy lists its models; where they are unknown (not read, not listed, null), by the
// list (the policy's or DefaultCompactModels).
func (c *Compact) compactWith(model string, takes capabilities.Support) bool {
	switch {
	case c == nil || model == "" || takes == capabilities.No:
		return false
	case takes == capabilities.Yes && !c.ModelsListed:
		return true
	}
	return c.CompactFor(model)
}

// ClearThinking configures clear_thinking_20251015.
type ClearThinking struct {
	// Keep is nil when the policy leaves keep to the API's model-dependent default.
	Keep *ThinkingKeep
}

// ThinkingKeep is keep of clear_thinking: {type: thinking_turns, value: N}, {type: all} or "all".
type ThinkingKeep struct {
	All       bool // keep every thinking block
	AllString bool // written as the string "all" rather than {type: all}
	Turns     int64
}

// ClearToolUses configures clear_tool_uses_20250919. Nil fields are left out of the edit so the
// API's defaults apply.
type ClearToolUses struct {
	Trigger         *Threshold // type input_tokens or tool_uses
	Keep            *Threshold // type tool_uses
	ClearAtLeast    *Threshold // type input_tokens
	ExcludeTools    []string   // as written in the policy ("memory" is added on the wire)
	ClearToolInputs *ClearToolInputs
}

// Threshold is a {type, value} pair.
type Threshold struct {
	Type  string
	Value int64
}

// ClearToolInputs is clear_tool_inputs: a bool, or a list of tool names.
type ClearToolInputs struct {
	All   bool
	Tools []string // non-nil when written as a list
}

// Memory is the memory block of a policy.
type Memory struct {
	Mode          MemoryMode
	MaxIterations int                  // memory loop cap
	Limits        memoryhook.Limits    // memory.limits; in YAML MaxTenantBytes is max_total_bytes
	History       memoryhook.Retention // memory.history; keep_days 0 turns history off
	// Scopes are memory.scopes, longest mount first; nil: one implicit
	// scope (see Policy.MemoryScopes). Gate is memory.gate.
	Scopes []MemoryScope
	Gate   MemoryGate
}

// Upstream is the upstream block of a policy.
type Upstream struct {
	Retries        int
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration
	// APIKeyEnv and APIKeyFile name where the tenant's own Anthropic key is read at load (at
	// most one is set). A tenant with a key gets it sent upstream in place of whatever
	// credential its clients present.
	APIKeyEnv  string
	APIKeyFile string
	// apiKey is the key read from either: a pointer, so that printing a Policy with %+v shows an
	// address, never the key.
	apiKey  *string
	keyLine int // line of api_key_env or api_key_file, for load errors
}

// UpstreamKey returns the tenant's own Anthropic key (upstream.api_key_env or api_key_file) and
// whether the tenant has one. Never log or print it.
func (p *Policy) UpstreamKey() (string, bool) {
	if p == nil || p.Upstream.apiKey == nil {
		return "", false
	}
	return *p.Upstream.apiKey, true
}

// MemoryOn reports whether the memory tool is added for this tenant.
func (p *Policy) MemoryOn() bool {
	return p != nil && (p.Memory.Mode == MemoryProxy || p.Memory.Mode == MemoryInject)
}

// TenantEdits returns the JSON array of edits the tenant writes for a request with or without
// extended thinking ("" when none), e.g. for logs and the validate command.
func (p *Policy) TenantEdits(thinking bool) string {
	return p.tenant[b2i(thinking)][1][0].array
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Summary is a one-line description of the policy, for `ctxproxy validate` and logs.
func (p *Policy) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s): %d key(s), context_management %s", p.Tenant, p.File, len(p.KeyHashes), p.ContextManagement.Mode)
	var edits []string
	if ct := p.ContextManagement.ClearThinking; ct != nil {
		e := "clear_thinking"
		if ct.Keep != nil {
			if ct.Keep.All {
				e += " keep all"
			} else {
				e += fmt.Sprintf(" keep %d turn(s)", ct.Keep.Turns)
			}
		}
		edits = append(edits, e)
	}
	if cu := p.ContextManagement.ClearToolUses; cu != nil {
		e := "clear_tool_uses"
		if cu.Trigger != nil {
			e += fmt.Sprintf(" at %d %s", cu.Trigger.Value, cu.Trigger.Type)
		}
		if cu.Keep != nil {
			e += fmt.Sprintf(" keep %d", cu.Keep.Value)
		}
		edits = append(edits, e)
	}
	if c := p.ContextManagement.Compact; c != nil {
		e := "compact"
		if c.Trigger != nil {
			e += fmt.Sprintf(" at %d input_tokens", c.Trigger.Value)
		}
		edits = append(edits, e)
	}
	if len(edits) > 0 {
		fmt.Fprintf(&b, " [%s]", strings.Join(edits, ", "))
	}
	if p.ContextManagement.Mode != CMOff && p.ContextManagement.Threads != DefaultThreads {
		fmt.Fprintf(&b, ", threads %s", p.ContextManagement.Threads)
	}
	fmt.Fprintf(&b, ", memory %s", p.Memory.Mode)
	if len(p.Memory.Scopes) > 0 {
		var sc []string
		for _, s := range p.Memory.Scopes {
			e := s.Mount + " " + string(s.Store)
			if s.ReadOnly {
				e += " read-only"
			}
			if s.Template != "" {
				e += " seeded"
			}
			sc = append(sc, e)
		}
		fmt.Fprintf(&b, " (scopes: %s)", strings.Join(sc, ", "))
	}
	if g := p.Memory.Gate; g.On() {
		fmt.Fprintf(&b, " (gate: secrets %v, %d writes/min)", g.RefuseSecrets, g.MaxWritesPerMinute)
	}
	if p.Upstream.Retries > 0 {
		fmt.Fprintf(&b, ", %d retries", p.Upstream.Retries)
	}
	switch {
	case p.Upstream.APIKeyEnv != "":
		fmt.Fprintf(&b, ", upstream key from $%s", p.Upstream.APIKeyEnv)
	case p.Upstream.APIKeyFile != "":
		b.WriteString(", upstream key from a file")
	}
	if p.Limits.Any() {
		fmt.Fprintf(&b, ", limits: %s", p.Limits.String())
	}
	if p.Tracing.Content {
		b.WriteString(", traces carry content")
	}
	if p.Shadow != nil {
		b.WriteString(", " + p.Shadow.summary())
	}
	return b.String()
}
