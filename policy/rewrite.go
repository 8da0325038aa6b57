package policy

import (
	"fmt"
	"net/http"
	"strings"
	"unsafe"

	"github.com/ctxproxy/ctxproxy/capabilities"
	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// RequestError is a client error found while rewriting; the proxy answers it in the API's shape.
type RequestError struct {
	Status  int
	Type    string
	Message string
	Details string // raw JSON object sent as error.details; "" for none
}

func (e *RequestError) Error() string { return e.Type + ": " + e.Message }

// JSON is the API's error body: {"type":"error","error":{"type":…,"message":…}}.
func (e *RequestError) JSON() []byte {
	return apierr.Body(e.Type, e.Message, apierr.Field{Name: "details", Raw: e.Details})
}

func badRequest(format string, args ...any) *RequestError {
	return &RequestError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: fmt.Sprintf(format, args...)}
}

// RewriteInfo says what Rewrite found and did. Its strings never point into
// the body: the body is read through a view, and is often a pooled buffer
// another request reuses once this one is over (or rewritten in place),
// while the model, the user and the edit types live on in the ledger,
// spans, logs and spend counters. Each is copied when it is kept.
type RewriteInfo struct {
	Edits          []string // edit types now in the body's context_management, in order
	EditsWritten   bool     // context_management was written or removed by the policy
	MemoryAdded    bool     // the memory tool was appended to tools
	MemoryDeclared bool     // the client declared the memory tool itself
	BetaAdded      bool     // context-management beta merged into anthropic-beta (was missing)
	Compact        bool     // the body ends up with a compact_20260112 edit
	OnDemand       bool     // the body has a top-level compaction (on-demand compaction request)
	Thinking       bool     // the request turns extended thinking on (enabled or adaptive)
	BetweenTools   bool     // thinking.type is between_tools
	ThinkingType   string   // thinking.type when it is one the API knows; "" otherwise
	ThreadContinue bool     // thread.type == "continue" (the API reference's threads section)
	Threaded       bool     // thread.type is "create" or "continue": the API holds the conversation
	Model          string   // the top-level model, when a string
	Stream         bool     // the top-level stream is true
	MaxTokens      int64    // the top-level max_tokens, when a number (else 0)
	MetadataUserID string   // metadata.user_id, when a string
	NeedsBeta      bool     // the outgoing body has context_management or the memory tool
	// ClearThinkingAdded: the body's clear_thinking_20251015 is the tenant's, written where the
	// client sent none (a refusal of it is ctxproxy's to take back: RefusedEdit, WithoutEdit).
	ClearThinkingAdded bool
	// Top is where the values of the top-level members that name the request's conversation lie
	// in the body as given, found in the validating pass: the proxy's cache tracking reads them
	// without a pass of its own. They index the body as the client sent it, not one rewritten in
	// place.
	Top TopValues
}

// TopValues are byte ranges of top-level values in a body; the zero Range for a member absent.
type TopValues struct {
	System, Tools, Messages, Thread, Diagnostics Range
}

// Range is body[Start:End].
type Range struct{ Start, End int }

// Of is the range's bytes in body, nil for the zero Range.
func (r Range) Of(body []byte) []byte {
	if r.End == 0 {
		return nil
	}
	return body[r.Start:r.End:r.End]
}

// ownedEditType is an edit type copied out of the body, or the constant
// when it is one the policy writes (no copy on the common path).
func ownedEditType(t string) string {
	switch t {
	case EditClearThinking:
		return EditClearThinking
	case EditClearToolUses:
		return EditClearToolUses
	case EditCompact:
		return EditCompact
	}
	return strings.Clone(t)
}

// memoryToolJSON is the memory tool definition ctxproxy appends.
const memoryToolJSON = `{"type":"` + MemoryToolType + `","name":"` + MemoryToolName + `"}`

// member is a top-level (or context_management-level) key found in the body.
type member struct {
	found bool
	key   gjson.Result // key.Index is the offset of its opening quote
	val   gjson.Result // val.Index is the offset of the value
}

func (m member) end() int { return m.val.Index + len(m.val.Raw) }

// splice replaces body[start:end] with pre+data+post; a zero splice (all empty) is no change.
type splice struct {
	start, end      int
	pre, data, post string
}

func (o splice) empty() bool { return o.start == o.end && o.pre == "" && o.data == "" && o.post == "" }

func (o splice) len() int { return len(o.pre) + len(o.data) + len(o.post) }

// Rewrite applies p to a Messages or count_tokens request body (the same rules for both) and to its
// headers:
//
//   - context_management.edits per p's mode (enforce / default / off), clear_thinking first, only
//     with thinking on, "memory" in every clear_tool_uses edit's exclude_tools when memory is on;
//   - the memory tool appended to tools when memory is proxy or inject (never creating a tools
//     array on a thread continue request, the API reference's threads section);
//   - the context-management beta merged into h when the body ends up with context_management or
//     the memory tool.
//
// count_tokens gets exactly the same edits and memory tool, so its count matches the messages call.
// Every byte the rules do not own is left as it was; the result aliases body when nothing changed,
// and body is never modified. h is modified in place (only when err is nil). A nil p checks the
// body and changes nothing. Errors are *RequestError.
func (p *Policy) Rewrite(body []byte, h http.Header) ([]byte, RewriteInfo, error) {
	ops, info, err := p.rewrite(body, h, false, span{})
	if err != nil {
		return nil, info, err
	}
	if len(ops) == 0 {
		return body, info, nil
	}
	return applySplices(body, ops), info, nil
}

// RewriteInPlace is Rewrite for a body the caller hands over: when the
// changes only add bytes and the result fits in cap(body), it is built in
// body's own array (no allocation), and body's bytes are no longer the
// request the client sent. Otherwise it is Rewrite, and body is untouched.
func (p *Policy) RewriteInPlace(body []byte, h http.Header) ([]byte, RewriteInfo, error) {
	ops, info, err := p.rewrite(body, h, false, span{})
	if err != nil {
		return nil, info, err
	}
	if len(ops) == 0 {
		return body, info, nil
	}
	if out, ok := spliceInPlace(body, ops); ok {
		return out, info, nil
	}
	return applySplices(body, ops), info, nil
}

// RewriteParts is Rewrite without building the new body: it returns it as
// pieces, in order, that alias body where body is kept (a 1 MB transcript
// is not copied for the few hundred bytes the rules add). One piece, body
// itself, when nothing changed.
func (p *Policy) RewriteParts(body []byte, h http.Header) ([][]byte, RewriteInfo, error) {
	ops, info, err := p.rewrite(body, h, false, span{})
	if err != nil {
		return nil, info, err
	}
	if len(ops) == 0 {
		return [][]byte{body}, info, nil
	}
	return spliceParts(body, ops), info, nil
}

// rewrite works out the splices that apply p; none when nothing changes.
// skimmed, when not zero, is a value the caller's Lead already skimmed.
// count_tokens and messages follow the same rules. In a batch (inBatch) the
// memory tool is added only in inject mode: nobody could run a proxy-mode
// loop inside a batch. Its steps: read the body's top level (readTop), then
// 1. context_management.edits (planEdits), 2. the memory tool
// (planMemoryTool), 3. the beta header.
func (p *Policy) rewrite(body []byte, h http.Header, inBatch bool, skimmed span) ([]splice, RewriteInfo, error) {
	var info RewriteInfo
	s := unsafe.String(unsafe.SliceData(body), len(body)) // read-only view: body is never written
	var t topLevel
	if err := readTop(&t, &info, body, s, skimmed); err != nil {
		return nil, info, err
	}
	if p == nil {
		info.Edits = editTypes(t.cm)
		return nil, info, nil
	}

	var opsBuf [4]splice
	pl := plan{ops: opsBuf[:0], rootEmpty: skipSpace(s, t.start+1) == t.end}
	hasCM, err := p.planEdits(&pl, &info, s, &t)
	if err != nil {
		return nil, info, err
	}
	if err := p.planMemoryTool(&pl, &info, s, h, &t, inBatch); err != nil {
		return nil, info, err
	}
	ops := pl.placeTop(s, t.end)

	// 3. The beta header.
	info.NeedsBeta = hasCM || info.MemoryAdded || info.MemoryDeclared
	if h != nil {
		info.BetaAdded = info.Betas().Merge(h)
	}
	if len(ops) == 0 {
		return nil, info, nil
	}
	return ops, info, nil
}

// of is the range recorded for key k, nil when none is.
func (t *TopValues) of(k string) *Range {
	switch k {
	case "system":
		return &t.System
	case "tools":
		return &t.Tools
	case "messages":
		return &t.Messages
	case "thread":
		return &t.Thread
	case "diagnostics":
		return &t.Diagnostics
	}
	return nil
}

// topLevel is what rewrite reads of the body's top-level object: the members it changes or
// looks into, and where the object opens and closes.
type topLevel struct {
	cm, tools, thinking, thread, messages, compaction member
	start, end                                        int // offsets of the object's '{' and '}'
}

// readTop checks the body in one pass (scanBody) and reads its top-level object: into t the
// members the rewrite changes or looks into, into info what the proxy reads (here, in the pass
// that validates the body, so the proxy needs no pass of its own: a missing key costs gjson a
// walk of the whole body). Any key given twice is refused, not only the ones rewritten here:
// the proxy reads the first "model" or "stream", the API may read the last, a way around
// accounting and the streaming relay.
func readTop(t *topLevel, info *RewriteInfo, body []byte, s string, skimmed span) *RequestError {
	var mbuf [16]topMember
	members, start, end, serr := scanBody(body, mbuf[:0], scanSkimBulk, skimmed)
	if serr != nil {
		if serr.off == 0 && len(trimRightSpace(s)) == 0 {
			return badRequest("request body is empty; expected a JSON object")
		}
		return serr.requestError(body)
	}
	if s[start] != '{' {
		return badRequest("request body must be a JSON object, got %s", jsonKind(s[start]))
	}
	t.start, t.end = start, end
	var kbuf [16]string
	keys := kbuf[:0]
	for _, tm := range members {
		k := s[tm.keyStart+1 : tm.keyEnd-1]
		if tm.keyEsc {
			k = gjson.Parse(s[tm.keyStart:tm.keyEnd]).Str
		}
		for _, prev := range keys {
			if prev == k { // the duplicate may be the empty key
				return badRequest("request body has the key %q more than once", k)
			}
		}
		keys = append(keys, k)
		if r := info.Top.of(k); r != nil {
			*r = Range{tm.valStart, tm.valEnd}
		}
		var m *member
		switch k {
		case "context_management":
			m = &t.cm
		case "tools":
			m = &t.tools
		case "thinking":
			m = &t.thinking
		case "thread":
			m = &t.thread
		case "messages":
			m = &t.messages
		case "compaction":
			m = &t.compaction
		case "model":
			if v := s[tm.valStart:tm.valEnd]; len(v) > 1 && v[0] == '"' {
				info.Model = strings.Clone(gjson.Parse(v).Str)
			}
			continue
		case "stream":
			info.Stream = s[tm.valStart:tm.valEnd] == "true"
			continue
		case "max_tokens":
			if v := gjson.Parse(s[tm.valStart:tm.valEnd]); v.Type == gjson.Number {
				info.MaxTokens = v.Int()
			}
			continue
		case "metadata":
			if v := s[tm.valStart:tm.valEnd]; len(v) > 0 && v[0] == '{' {
				info.MetadataUserID = strings.Clone(gjson.Get(v, "user_id").Str)
			}
			continue
		default:
			continue
		}
		val := gjson.Parse(s[tm.valStart:tm.valEnd])
		val.Index = tm.valStart
		*m = member{found: true, key: gjson.Result{Type: gjson.String, Raw: s[tm.keyStart:tm.keyEnd], Str: k, Index: tm.keyStart}, val: val}
	}
	if t.thinking.found && t.thinking.val.IsObject() {
		typ := t.thinking.val.Get("type").Str
		info.Thinking = typ == "enabled" || typ == "adaptive"
		info.BetweenTools = typ == "between_tools"
		info.ThinkingType = thinkingType(typ)
	}
	if t.thread.found && t.thread.val.IsObject() {
		typ := t.thread.val.Get("type").Str
		info.ThreadContinue = typ == "continue"
		info.Threaded = typ == "create" || typ == "continue"
	}
	info.OnDemand = t.compaction.found && t.compaction.val.Type != gjson.Null
	return nil
}

// plan is the splices a rewrite makes: changes in place, and members to append to the
// top-level object (context_management, tools), placed at its end by placeTop.
type plan struct {
	ops       []splice
	top       [2]splice
	nTop      int
	rootEmpty bool // the top-level object has no member left before the appended ones
}

func (pl *plan) appendTop(o splice) {
	pl.top[pl.nTop] = o
	pl.nTop++
}

// placeTop places the members to append before the top-level object's '}' at end, and
// returns every splice.
func (pl *plan) placeTop(s string, end int) []splice {
	at := insertPos(s, end)
	for i := range pl.nTop {
		o := pl.top[i]
		if i > 0 || !pl.rootEmpty {
			o.pre = "," + o.pre
		}
		o.start, o.end = at, at
		pl.ops = append(pl.ops, o)
	}
	return pl.ops
}

// planEdits is step 1, context_management.edits, per p's mode; hasCM says whether the body
// sent upstream has a non-null context_management.
func (p *Policy) planEdits(pl *plan, info *RewriteInfo, s string, t *topLevel) (hasCM bool, _ error) {
	hasCM = t.cm.found && t.cm.val.Type != gjson.Null
	if p.ContextManagement.Mode == CMOff || info.OnDemand {
		// An on-demand compaction request cannot carry context_management (the
		// API reference's compaction section, the request shape): nothing of it is added, the client's is left as sent.
		info.Edits = editTypes(t.cm)
	} else {
		w := p.editsFor(info)
		w.compact = w.compact && !signedCompactionFirst(t.messages)
		r, err := p.rewriteEdits(s, t.cm, w)
		if err != nil {
			return false, err
		}
		info.Edits = r.types
		info.ClearThinkingAdded = r.clearThinkingAdded
		if !r.op.empty() {
			pl.ops = append(pl.ops, r.op)
			info.EditsWritten = true
		}
		if !r.topInsert.empty() {
			pl.appendTop(r.topInsert)
			info.EditsWritten = true
		}
		if r.remove {
			info.EditsWritten = true
		}
		hasCM = r.hasCM
		if info.Threaded && len(r.types) > 0 && info.EditsWritten && p.ContextManagement.Threads == ThreadsUnthreadEdits {
			return false, threadUnsupported()
		}
		if r.remove {
			del, sole := deleteMember(s, t.cm)
			pl.ops = append(pl.ops, del)
			pl.rootEmpty = pl.rootEmpty || sole
		}
	}
	for _, e := range info.Edits {
		if e == EditCompact {
			info.Compact = true
		}
	}
	return hasCM, nil
}

// writes is which of the tenant's edits a request gets.
type writes struct {
	thinking      bool // thinking counts as on: clear_thinking may stay (the client's) or be written
	clearThinking bool // the tenant's clear_thinking is written
	clearToolUses bool // the tenant's clear_tool_uses is written
	compact       bool // the tenant's compact_20260112 is written
}

// editsFor decides, from what the API's models endpoint said of the request's model (its
// capabilities; the built-in lists where they are unknown), which of the tenant's edits the
// request gets: clear_thinking with thinking on and where the model takes it, between_tools
// counting as thinking where the model lists it as a thinking type; clear_tool_uses where the
// model takes it; compact_20260112 per compactWith. Unknown keeps what ctxproxy always did.
func (p *Policy) editsFor(info *RewriteInfo) writes {
	var m capabilities.Model
	if p.models != nil && info.Model != "" {
		m = p.models.Model(p.Tenant, info.Model)
	}
	thinking := info.Thinking || info.BetweenTools && m.BetweenTools == capabilities.Yes
	return writes{
		thinking:      thinking,
		clearThinking: thinking && m.ClearThinking != capabilities.No && !p.refuses(info, EditClearThinking),
		clearToolUses: m.ClearToolUses != capabilities.No,
		compact:       p.ContextManagement.Compact.compactWith(info.Model, m.Compact),
	}
}

// refuses says whether the upstream refused edit when ctxproxy added it to a request for this
// model under this thinking type (learned by the proxy: capabilities.Refusals). The endpoint
// does not settle every combination (clear_thinking with between_tools is unverified, the
// December 2026 API reference's between_tools section); what the API answered does.
func (p *Policy) refuses(info *RewriteInfo, edit string) bool {
	return p.models != nil && info.Model != "" && p.models.Refuses(p.Tenant, info.Model, info.ThinkingType, edit)
}

// thinkingType is typ as a string of its own when it is a thinking type the API knows: it
// outlives the body (RewriteInfo).
func thinkingType(typ string) string {
	for _, t := range [...]string{"enabled", "adaptive", "disabled", "between_tools"} {
		if typ == t {
			return t
		}
	}
	return ""
}

// planMemoryTool is step 2: the memory tool added to tools when memory is on (in a batch only
// in inject mode).
func (p *Policy) planMemoryTool(pl *plan, info *RewriteInfo, s string, h http.Header, t *topLevel, inBatch bool) error {
	if !p.MemoryOn() || inBatch && p.Memory.Mode == MemoryProxy {
		return nil
	}
	// A mid-conversation tool_addition that defines the memory tool declares it: adding it
	// to tools too would clash (tool_name_conflict). A tool_removal of it, or a compaction
	// block's tool_changes, is left to stand: tools is the starting set, kept the same on
	// every request so the prompt cache and tool_changes stay valid.
	inline := toolChangesBeta(h) && memoryAdded(s, t.messages)
	info.MemoryDeclared = inline
	switch tools := t.tools; {
	case tools.found && tools.val.Type != gjson.Null:
		op, declared, err := p.memoryToolOp(s, tools)
		if err != nil {
			return err
		}
		info.MemoryDeclared = info.MemoryDeclared || declared
		if !info.MemoryDeclared {
			pl.ops = append(pl.ops, op)
			info.MemoryAdded = true
		}
	case info.ThreadContinue || inline:
		// The thread's tool set applies; a tools array here would replace it (the API reference's threads section).
	case tools.found: // "tools": null
		pl.ops = append(pl.ops, splice{start: tools.val.Index, end: tools.end(), data: "[" + memoryToolJSON + "]"})
		info.MemoryAdded = true
	default:
		pl.appendTop(splice{data: `"tools":[` + memoryToolJSON + "]"})
		info.MemoryAdded = true
	}
	return nil
}

// memoryToolOp is the change to a tools array that adds the memory tool, or declared when the
// array has it already; a 400 when tools is not an array or another tool takes its name.
func (p *Policy) memoryToolOp(s string, tools member) (op splice, declared bool, _ *RequestError) {
	if !tools.val.IsArray() {
		return op, false, badRequest("tools must be an array, got %s", jsonKind(tools.val.Raw[0]))
	}
	var conflict *RequestError
	n := 0
	tools.val.ForEach(func(_, t gjson.Result) bool {
		i := n
		n++
		if !t.IsObject() {
			return true
		}
		if t.Get("name").Str != MemoryToolName {
			return true
		}
		typ := t.Get("type")
		if typ.Str == MemoryToolType {
			declared = true
			return true
		}
		kind := "a custom tool without a type"
		if typ.Exists() {
			kind = "type " + typ.Raw
		}
		conflict = badRequest("tools[%d] is a tool named %q (%s), which conflicts with the memory tool "+
			`{"type":%q,"name":%q} that this tenant's policy adds (memory.mode: %s); rename the tool or use a tenant with memory.mode: off`,
			i, MemoryToolName, kind, MemoryToolType, MemoryToolName, p.Memory.Mode)
		return false
	})
	if conflict != nil {
		return op, false, conflict
	}
	at := insertPos(s, tools.end()-1) // before the array's ']'
	sep := ","
	if n == 0 {
		sep = ""
	}
	return splice{start: at, end: at, pre: sep, data: memoryToolJSON}, declared, nil
}

// appendSplice adds o's text.
func appendSplice(b []byte, o splice) []byte {
	b = append(b, o.pre...)
	b = append(b, o.data...)
	return append(b, o.post...)
}

// editsResult is what rewriteEdits decided.
type editsResult struct {
	types     []string
	op        splice // replace a range (edits array, context_management null, or insert into it)
	topInsert splice // a "context_management" member to add to the top-level object
	remove    bool   // delete the context_management member
	hasCM     bool   // the outgoing body has a non-null context_management
	// clearThinkingAdded: the tenant's clear_thinking is written where the client sent none
	clearThinkingAdded bool
}

type clientEdit struct {
	typ string
	raw string // possibly rewritten (memory added to exclude_tools)
}

// hasEdit reports whether the client sent an edit of type typ.
func hasEdit(client []clientEdit, typ string) bool {
	for _, e := range client {
		if e.typ == typ {
			return true
		}
	}
	return false
}

// rewriteEdits decides the context_management.edits the body goes upstream with: in default
// mode the client's own when it sent some (kept, fixed up: keptClientEdits), else the tenant's
// (enforcedEdits); then where they go in the body (placeEdits).
func (p *Policy) rewriteEdits(s string, cm member, w writes) (editsResult, error) {
	var r editsResult
	cmPresent := cm.found && cm.val.Type != gjson.Null
	edits, err := findEdits(cm, cmPresent)
	if err != nil {
		return r, err
	}
	editsPresent := edits.found && edits.val.Type != gjson.Null
	client, err := clientEdits(edits, editsPresent)
	if err != nil {
		return r, err
	}
	var out []clientEdit
	var newArr string
	if p.ContextManagement.Mode == CMDefault && len(client) > 0 {
		var changed bool
		if out, r.types, changed, err = p.keptClientEdits(client, w.thinking); err != nil {
			return r, err
		}
		if !changed {
			r.hasCM = cmPresent
			return r, nil
		}
		newArr = editsArray(out)
	} else {
		out, r.types, newArr = p.enforcedEdits(client, w)
		r.clearThinkingAdded = w.clearThinking && !hasEdit(client, EditClearThinking)
		if editsPresent && (newArr == edits.val.Raw || (len(out) == 0 && len(client) == 0)) {
			// The client already sent exactly these edits (or an empty list and we have none).
			r.hasCM = cmPresent
			return r, nil
		}
	}
	placeEdits(&r, s, cm, edits, len(out) == 0, newArr)
	return r, nil
}

// findEdits is the edits member of a context_management value; a 400 when context_management
// is not an object, has "edits" twice, or its edits is not an array.
func findEdits(cm member, cmPresent bool) (edits member, _ error) {
	if cmPresent {
		if !cm.val.IsObject() {
			return edits, badRequest("context_management must be an object, got %s", jsonKind(cm.val.Raw[0]))
		}
		var dup bool
		cm.val.ForEach(func(k, v gjson.Result) bool {
			if k.Str != "edits" {
				return true
			}
			if edits.found {
				dup = true
				return false
			}
			edits = member{found: true, key: k, val: v}
			return true
		})
		if dup {
			return edits, badRequest(`context_management has the key "edits" more than once`)
		}
	}
	if edits.found && edits.val.Type != gjson.Null && !edits.val.IsArray() {
		return edits, badRequest("context_management.edits must be an array, got %s", jsonKind(edits.val.Raw[0]))
	}
	return edits, nil
}

// clientEdits is the client's edits, each checked to be an object with a string type.
func clientEdits(edits member, present bool) ([]clientEdit, error) {
	if !present {
		return nil, nil
	}
	var client []clientEdit
	var err error
	i := 0
	edits.val.ForEach(func(_, e gjson.Result) bool {
		if !e.IsObject() {
			err = badRequest("context_management.edits[%d] must be an object, got %s", i, jsonKind(e.Raw[0]))
			return false
		}
		t := e.Get("type")
		if t.Type != gjson.String {
			err = badRequest("context_management.edits[%d].type must be a string", i)
			return false
		}
		client = append(client, clientEdit{typ: ownedEditType(t.Str), raw: e.Raw})
		i++
		return true
	})
	return client, err
}

// keptClientEdits is the client's edits as default mode keeps them: clear_thinking first
// (stable), dropped without thinking (the API rejects it there), "memory" in every
// clear_tool_uses edit's exclude_tools when memory is on. changed says whether that is not what
// the client sent.
func (p *Policy) keptClientEdits(client []clientEdit, thinking bool) (out []clientEdit, types []string, changed bool, _ error) {
	out = make([]clientEdit, 0, len(client))
	for _, e := range client {
		if e.typ == EditClearThinking {
			if thinking {
				out = append(out, e)
			} else {
				changed = true
			}
		}
	}
	for i, e := range client {
		if e.typ == EditClearThinking {
			continue
		}
		if e.typ == EditClearToolUses && p.MemoryOn() {
			raw, excluded, err := excludeMemory(e.raw, i)
			if err != nil {
				return nil, nil, false, err
			}
			if excluded {
				e.raw = raw
				changed = true
			}
		}
		out = append(out, e)
	}
	if !changed {
		for i := range out { // a reorder is a change too
			if out[i].typ != client[i].typ || out[i].raw != client[i].raw {
				changed = true
				break
			}
		}
	}
	types = make([]string, len(out))
	for i, e := range out {
		types[i] = e.typ
	}
	return out, types, changed, nil
}

// editsArray is the JSON array of edits; "" when there are none.
func editsArray(out []clientEdit) string {
	if len(out) == 0 {
		return ""
	}
	n := 1
	for _, e := range out {
		n += len(e.raw) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, e := range out {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e.raw...)
	}
	b = append(b, ']')
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// placeEdits puts newArr, the edits to send, in the body: in place of the client's edits, into
// its context_management, or as a new context_management member. With none to send (empty),
// the client's context_management is dropped when it holds nothing else; otherwise its edits
// become [].
func placeEdits(r *editsResult, s string, cm, edits member, empty bool, newArr string) {
	cmPresent := cm.found && cm.val.Type != gjson.Null
	editsPresent := edits.found && edits.val.Type != gjson.Null
	if empty {
		switch {
		case !editsPresent:
			r.hasCM = cmPresent
		case onlyKey(cm.val, "edits"):
			r.remove = true
		default:
			r.op = splice{start: edits.val.Index, end: edits.end(), data: "[]"}
			r.hasCM = true
		}
		return
	}
	r.hasCM = true
	switch {
	case editsPresent || (edits.found && edits.val.Type == gjson.Null):
		r.op = splice{start: edits.val.Index, end: edits.end(), data: newArr}
	case cmPresent: // an object without edits: add the member before its '}'
		closeAt := cm.end() - 1
		sep := ""
		if skipSpace(s, cm.val.Index+1) != closeAt {
			sep = ","
		}
		at := insertPos(s, closeAt)
		r.op = splice{start: at, end: at, pre: sep + `"edits":`, data: newArr}
	case cm.found: // "context_management": null
		r.op = splice{start: cm.val.Index, end: cm.end(), pre: `{"edits":`, data: newArr, post: "}"}
	default:
		r.topInsert = splice{pre: `"context_management":{"edits":`, data: newArr, post: "}"}
	}
}

// enforcedEdits is what the tenant writes in place of the client's edits: its pre-rendered edits,
// with compact when it applies (pausing only when the client asked for the pause and the policy
// lets it). A client's own compact_20260112 is kept when the tenant writes none: a request that
// replays a compaction block may be refused without the edit (unverified; the API reference's
// compaction section, how a compaction block must come back), so
// ctxproxy never strips it.
func (p *Policy) enforcedEdits(client []clientEdit, w writes) ([]clientEdit, []string, string) {
	var clientCompact *clientEdit
	for i := range client {
		if client[i].typ == EditCompact {
			clientCompact = &client[i]
		}
	}
	c := 0
	if w.compact {
		c = 1
		if clientCompact != nil && p.ContextManagement.Compact.PauseAfterCompaction &&
			gjson.Get(clientCompact.raw, "pause_after_compaction").Type == gjson.True {
			c = 2
		}
	}
	te := &p.tenant[b2i(w.clearThinking)][b2i(w.clearToolUses)][c]
	if c > 0 || clientCompact == nil {
		return te.edits, te.types, te.array
	}
	out := append(append(make([]clientEdit, 0, len(te.edits)+1), te.edits...), *clientCompact)
	types := append(append(make([]string, 0, len(out)), te.types...), EditCompact)
	arr := "[" + clientCompact.raw + "]"
	if te.array != "" {
		arr = te.array[:len(te.array)-1] + "," + clientCompact.raw + "]"
	}
	return out, types, arr
}

// excludeMemory makes sure a clear_tool_uses edit lists "memory" in exclude_tools, so the memory
// tool's calls and results are never cleared.
func excludeMemory(raw string, i int) (string, bool, error) {
	ex := gjson.Get(raw, "exclude_tools")
	switch {
	case !ex.Exists() || ex.Type == gjson.Null:
		out, err := sjson.SetRaw(raw, "exclude_tools", `["memory"]`)
		if err != nil {
			return "", false, badRequest("context_management.edits[%d]: %v", i, err)
		}
		return out, true, nil
	case !ex.IsArray():
		return "", false, badRequest("context_management.edits[%d].exclude_tools must be an array of tool names, got %s", i, jsonKind(ex.Raw[0]))
	}
	found := false
	ex.ForEach(func(_, v gjson.Result) bool {
		if v.Type == gjson.String && v.Str == MemoryToolName {
			found = true
			return false
		}
		return true
	})
	if found {
		return raw, false, nil
	}
	// Append before the array's ']' so the client's names keep their spelling.
	closeAt := ex.Index + len(ex.Raw) - 1
	sep := `,`
	if skipSpace(raw, ex.Index+1) == closeAt {
		sep = ""
	}
	at := insertPos(raw, closeAt)
	return raw[:at] + sep + `"memory"` + raw[at:], true, nil
}

// editTypes lists the edit types in a context_management value without judging it.
func editTypes(cm member) []string {
	if !cm.found || !cm.val.IsObject() {
		return nil
	}
	var out []string
	cm.val.Get("edits").ForEach(func(_, e gjson.Result) bool {
		if e.IsObject() {
			out = append(out, ownedEditType(e.Get("type").String()))
		}
		return true
	})
	return out
}

func onlyKey(obj gjson.Result, key string) bool {
	only := true
	obj.ForEach(func(k, _ gjson.Result) bool {
		if k.Str != key {
			only = false
			return false
		}
		return true
	})
	return only
}

// deleteMember removes a member and one adjacent comma; sole reports that it was the object's only
// member.
func deleteMember(s string, m member) (op splice, sole bool) {
	start, end := m.key.Index, m.end()
	if j := skipSpace(s, end); j < len(s) && s[j] == ',' {
		return splice{start: start, end: skipSpace(s, j+1)}, false
	}
	j := start - 1
	for j >= 0 && isSpace(s[j]) {
		j--
	}
	if j >= 0 && s[j] == ',' {
		return splice{start: j, end: end}, false
	}
	return splice{start: start, end: end}, true
}

// sortSplices orders ops by offset. ops never overlap; inserts at the same
// offset keep their order.
func sortSplices(ops []splice) {
	for i := 1; i < len(ops); i++ { // stable insertion sort: at most a handful of ops
		for j := i; j > 0 && ops[j].start < ops[j-1].start; j-- {
			ops[j], ops[j-1] = ops[j-1], ops[j]
		}
	}
}

// spliceParts is the new body as pieces: runs of body between the splices,
// and each splice's text.
func spliceParts(body []byte, ops []splice) [][]byte {
	sortSplices(ops)
	parts := make([][]byte, 0, 2*len(ops)+1)
	pos := 0
	for _, o := range ops {
		if o.start > pos {
			parts = append(parts, body[pos:o.start])
		}
		if o.len() > 0 {
			parts = append(parts, appendSplice(make([]byte, 0, o.len()), o))
		}
		pos = o.end
	}
	if pos < len(body) {
		parts = append(parts, body[pos:])
	}
	return parts
}

// applySplices builds the new body in one allocation.
func applySplices(body []byte, ops []splice) []byte {
	sortSplices(ops)
	n := len(body)
	for _, o := range ops {
		n += o.len() - (o.end - o.start)
	}
	out := make([]byte, 0, n)
	pos := 0
	for _, o := range ops {
		out = append(out, body[pos:o.start]...)
		out = appendSplice(out, o)
		pos = o.end
	}
	return append(out, body[pos:]...)
}

// spliceInPlace applies ops within body's array when none of them shrinks
// its range and the result fits in cap(body). Working from the last splice
// back, every run of body moves right (or stays), so no byte is overwritten
// before it is moved.
func spliceInPlace(body []byte, ops []splice) ([]byte, bool) {
	sortSplices(ops)
	n := len(body)
	for _, o := range ops {
		if o.len() < o.end-o.start {
			return nil, false
		}
		n += o.len() - (o.end - o.start)
	}
	if n > cap(body) {
		return nil, false
	}
	out := body[:n]
	w, next := n, len(body) // write cursor; start of the run already placed
	for i := len(ops) - 1; i >= 0; i-- {
		o := ops[i]
		w -= next - o.end
		copy(out[w:], body[o.end:next])
		w -= o.len()
		appendSplice(out[w:w], o)
		next = o.start
	}
	return out, true
}

// insertPos is where a new member or element goes in the container closed at closeAt: right after
// its last value, before any whitespace preceding the closing bracket.
func insertPos(s string, closeAt int) int {
	i := closeAt
	for i > 0 && isSpace(s[i-1]) {
		i--
	}
	if c := s[i-1]; c == '{' || c == '[' {
		return closeAt // empty container: keep its inner whitespace before the new item
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

func trimRightSpace(s string) string {
	for len(s) > 0 && isSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

func jsonKind(c byte) string {
	switch c {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// threadUnsupported is the API's own answer to a threaded request it cannot serve
// (the API reference's message-threads section), given by ctxproxy for context.threads: unthread_edits so the
// SDK runners go on unthreaded exactly as they would after the API's.
func threadUnsupported() *RequestError {
	return &RequestError{
		Status: http.StatusBadRequest, Type: "invalid_request_error",
		Message: "this tenant's policy adds context_management edits, which threads do not take " +
			"(context_management.threads: unthread_edits); resend the request without thread",
		Details: `{"error_code":"thread_unsupported_request","unsupported":["context_management"]}`,
	}
}

// signedCompactionFirst reports whether messages begins with a signed (on-demand) compaction
// block: the API takes no compact edit with one (the API reference's compaction
// section: "Do not mix the two forms").
func signedCompactionFirst(messages member) bool {
	if !messages.found || !messages.val.IsArray() {
		return false
	}
	b := gjson.Get(messages.val.Raw, "0.content.0") // walks the first message only
	if !b.IsObject() || b.Get("type").Str != "compaction" {
		return false
	}
	sig := b.Get("signature")
	return sig.Type == gjson.String && sig.Str != ""
}

// toolChangesBeta reports whether the request turns on mid-conversation tool changes (the only
// way a tool_addition block is taken): without it no large body is searched for one.
func toolChangesBeta(h http.Header) bool {
	for _, v := range h.Values("Anthropic-Beta") {
		if strings.Contains(v, "mid-conversation-tool-changes") || strings.Contains(v, "inline-tools") {
			return true
		}
	}
	return false
}

// memoryAdded reports whether a mid-conversation system message adds the memory tool with a
// tool_addition block (a definition of it, or a reference to it by name).
func memoryAdded(s string, messages member) bool {
	if !messages.found || !messages.val.IsArray() {
		return false
	}
	raw := s[messages.val.Index:messages.end()]
	if !strings.Contains(raw, `"tool_addition"`) { // the common case: no walk of a large body
		return false
	}
	found := false
	gjson.Parse(raw).ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").Str != "system" {
			return true
		}
		m.Get("content").ForEach(func(_, b gjson.Result) bool {
			if b.Get("type").Str != "tool_addition" {
				return true
			}
			t := b.Get("tool")
			name := t.Get("name").Str
			if t.Get("type").Str == "tool_definition" {
				name = t.Get("definition.name").Str
			}
			found = name == MemoryToolName
			return !found
		})
		return !found
	})
	return found
}
