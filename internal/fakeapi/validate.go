package fakeapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Beta names the fake knows by name. Any other name shaped like a beta
// (feature-YYYY-MM-DD or feature-YYYYMMDD, as claude-code-20250219) is accepted too, unless denied, so real clients'
// ever-growing lists pass; names of another shape are rejected.
const (
	BetaContextManagement = "context-management-2025-06-27"
	BetaMessageThreads    = "message-threads-2026-08-12"
)

// DefaultDenyBetas are rejected by every fake (the docs' example of an
// unsupported name plus one date-shaped name for tests).
var DefaultDenyBetas = []string{"invalid-beta-name", "unsupported-beta-2000-01-01"}

var betaShape = regexp.MustCompile(`^[a-z0-9-]+-(\d{4}-\d{2}-\d{2}|\d{8})$`)

const (
	editClearToolUses = "clear_tool_uses_20250919"
	editClearThinking = "clear_thinking_20251015"
	editCompact       = "compact_20260112"
)

// badRequest is a 400 invalid_request_error.
func badRequest(format string, args ...any) *reqError {
	return &reqError{400, &APIError{Type: "invalid_request_error", Message: fmt.Sprintf(format, args...)}}
}

type reqError struct {
	status int
	err    *APIError
}

// edit is one validated context_management edit.
type edit struct {
	typ string
	// clear_tool_uses
	triggerType  string // input_tokens | tool_uses
	triggerValue int64
	keep         int64 // tool uses kept; thinking turns kept (-1 = all)
	clearAtLeast int64
	exclude      []string
	inputsAll    bool
	inputsFor    []string
}

// parsed is a validated Messages request.
type parsed struct {
	model     string
	maxTokens int64
	stream    bool
	betas     []string
	thinking  bool // enabled or adaptive
	hasCM     bool
	edits     []edit
	system    json.RawMessage
	tools     json.RawMessage
	messages  []json.RawMessage
	turns     []turnFacts // messages as checkConversation read them
	assistant int
	thread    string
	prevID    string
	prev      *thread
	compact   *compactSpec // the compact_20260112 edit
	onDemand  *compactSpec // the top-level compaction (on-demand form)
	// blockNeedsEdit is Options.CompactionBlockNeedsEdit.
	blockNeedsEdit bool
	// cache is what the prompt cache and cache diagnostics read (cache.go).
	cache cacheFields
	december
}

func parseBetas(h http.Header) []string {
	var out []string
	for _, v := range h.Values("Anthropic-Beta") {
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				out = append(out, b)
			}
		}
	}
	return out
}

func (a *API) checkHeaders(h http.Header, betas []string, opts *Options) *reqError {
	if !opts.NoAuthCheck {
		if h.Get("X-Api-Key") == "" && !strings.HasPrefix(h.Get("Authorization"), "Bearer ") {
			return &reqError{401, &APIError{Type: "authentication_error", Message: "x-api-key header is required"}}
		}
		if h.Get("Anthropic-Version") == "" {
			return badRequest("anthropic-version: header is required")
		}
	}
	for _, b := range betas {
		if slices.Contains(DefaultDenyBetas, b) || slices.Contains(opts.DenyBetas, b) || !betaShape.MatchString(b) {
			return badRequest("Unsupported beta header: %s", b)
		}
	}
	return nil
}

func isInt(r gjson.Result) (int64, bool) {
	if r.Type != gjson.Number {
		return 0, false
	}
	n, err := strconv.ParseInt(r.Raw, 10, 64)
	return n, err == nil
}

// topLevel is the request's top-level members the checks read: raw values,
// the first of each name winning as in gjson's Map and Get; "" when missing.
type topLevel struct {
	model, maxTokens, stream, thinking, system, tools, cm, messages, thread, compaction string
	// Read for the prompt cache and cache diagnostics (cache.go).
	cacheControl, diagnostics, toolChoice, speed, outputConfig, outputFormat string
	billingPolicy, metadata                                                  string // read for the December checks (december.go)

	systemRaw, toolsRaw json.RawMessage   // system and tools as slices of the body
	msgs                []json.RawMessage // the elements of messages when it is an array
}

// readTopLevel reads the members of the object at s[i] in one walk, taking
// the elements of messages on the way (body is s; elements alias it).
func readTopLevel(body []byte, s string, i int) topLevel {
	var f topLevel
	eachMember(s, i, func(key string, v int) int {
		var field *string
		switch key {
		case "model":
			field = &f.model
		case "max_tokens":
			field = &f.maxTokens
		case "stream":
			field = &f.stream
		case "thinking":
			field = &f.thinking
		case "system":
			field = &f.system
		case "tools":
			field = &f.tools
		case "context_management":
			field = &f.cm
		case "thread":
			field = &f.thread
		case "compaction":
			field = &f.compaction
		case "cache_control":
			field = &f.cacheControl
		case "diagnostics":
			field = &f.diagnostics
		case "tool_choice":
			field = &f.toolChoice
		case "speed":
			field = &f.speed
		case "output_config":
			field = &f.outputConfig
		case "output_format":
			field = &f.outputFormat
		case "billing_policy":
			field = &f.billingPolicy
		case "metadata":
			field = &f.metadata
		case "messages":
			if f.messages != "" {
				return skipValue(s, v)
			}
			end := 0
			if v < len(s) && s[v] == '[' {
				end = eachElement(s, v, func(e int) int {
					end := skipValue(s, e)
					f.msgs = append(f.msgs, body[e:end:end])
					return end
				})
			} else {
				end = skipValue(s, v)
			}
			f.messages = s[v:end]
			return end
		default:
			return skipValue(s, v)
		}
		end := skipValue(s, v)
		if *field != "" {
			return end
		}
		*field = s[v:end]
		switch key {
		case "system":
			f.systemRaw = body[v:end:end]
		case "tools":
			f.toolsRaw = body[v:end:end]
		}
		return end
	})
	return f
}

// result is gjson's Result for the raw value v ("": missing).
func result(v string) gjson.Result {
	if v == "" {
		return gjson.Result{}
	}
	return gjson.Parse(v)
}

// parseRequest validates a /v1/messages (or count_tokens) body. Thread state
// is looked up, not changed.
func (a *API) parseRequest(body []byte, h http.Header, countTokens bool, opts *Options) (*parsed, *reqError) {
	p := &parsed{betas: parseBetas(h)}
	if e := a.checkHeaders(h, p.betas, opts); e != nil {
		return p, e
	}
	if !gjson.ValidBytes(body) {
		return p, badRequest("The request body is not valid JSON: %s", jsonErr(body))
	}
	// Read in place: values alias the body, which is never written after it
	// is read (the recorded Request keeps it as it came).
	s := view(body)
	start := skipSpace(s, 0)
	if start >= len(s) || s[start] != '{' {
		return p, badRequest("The request body must be a JSON object")
	}
	f := readTopLevel(body, s, start)
	if f.model == "" {
		return p, badRequest("model: Field required")
	}
	p.model = str(f.model)
	if !isString(f.model) || p.model == "" {
		return p, badRequest("model: Input should be a valid string")
	}
	if f.maxTokens != "" || !countTokens {
		if f.maxTokens == "" {
			return p, badRequest("max_tokens: Field required")
		}
		n, isint := isInt(result(f.maxTokens))
		if !isint {
			return p, badRequest("max_tokens: Input should be a valid integer")
		}
		if n < 1 {
			return p, badRequest("max_tokens: Input should be greater than or equal to 1")
		}
		p.maxTokens = n
	}
	p.table = a.models()
	p.info = p.table.lookup(p.model)
	p.btRefusesClear = opts.BetweenToolsRefusesClearThinking
	if f.stream != "" && !countTokens {
		if f.stream != "true" && f.stream != "false" {
			return p, badRequest("stream: Input should be a valid boolean")
		}
		p.stream = f.stream == "true"
	}
	if e := p.checkThinking(result(f.thinking)); e != nil {
		return p, e
	}
	if f.system != "" && f.system != "null" {
		if !isString(f.system) && !isArray(f.system) {
			return p, badRequest("system: Input should be a valid string or list of text blocks")
		}
		p.system = f.systemRaw
	}
	if f.tools != "" && f.tools != "null" {
		if e := checkTools(result(f.tools)); e != nil {
			return p, e
		}
		p.tools = f.toolsRaw
	}
	if f.cm != "" && f.cm != "null" {
		if !slices.Contains(p.betas, BetaContextManagement) {
			return p, badRequest("context_management: requires the anthropic-beta header %q", BetaContextManagement)
		}
		p.hasCM = true
		if e := p.checkContextManagement(result(f.cm)); e != nil {
			return p, e
		}
	}
	if f.compaction != "" && f.compaction != "null" {
		// count_tokens accepts the parameter and ignores it (the API reference's compaction section).
		if e := p.checkCompactionParam(result(f.compaction)); e != nil {
			return p, e
		}
		if countTokens {
			p.onDemand = nil
		}
	}
	if e := p.checkDecember(&f, h, opts, countTokens); e != nil {
		return p, e
	}
	if f.messages == "" {
		return p, badRequest("messages: Field required")
	}
	if !isArray(f.messages) {
		return p, badRequest("messages: Input should be a valid list")
	}
	newMsgs := f.msgs
	if len(newMsgs) == 0 {
		return p, badRequest("messages: at least one message is required")
	}
	if f.thread != "" && f.thread != "null" {
		if e := p.checkThreadFeatures(opts.ThreadsRefuse, p.thinking); e != nil {
			return p, e
		}
		if e := a.resolveThread(p, result(f.thread)); e != nil {
			return p, e
		}
	}
	if p.prev != nil {
		if f.tools == "" {
			p.tools = p.prev.tools
		}
		if f.system == "" {
			p.system = p.prev.system
		}
		all := make([]json.RawMessage, 0, len(p.prev.messages)+len(newMsgs))
		p.messages = append(append(all, p.prev.messages...), newMsgs...)
	} else {
		p.messages = newMsgs
	}
	p.blockNeedsEdit = opts.CompactionBlockNeedsEdit
	n, e := p.checkConversation()
	p.assistant = n
	if e == nil {
		e = p.checkCache(&f, countTokens, &opts.CacheOptions)
	}
	if e != nil {
		return p, e
	}
	return p, a.checkBindings(p, h, result(f.metadata), opts)
}

func jsonErr(body []byte) string {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return err.Error()
	}
	return "invalid JSON"
}

func (p *parsed) checkThinking(t gjson.Result) *reqError {
	if !t.Exists() || t.Type == gjson.Null {
		return nil
	}
	if !t.IsObject() {
		return badRequest("thinking: Input should be an object")
	}
	typ := t.Get("type").String()
	switch typ {
	case "enabled":
		b, ok := isInt(t.Get("budget_tokens"))
		if !ok {
			return badRequest("thinking.enabled.budget_tokens: Field required")
		}
		if b < 1024 {
			return badRequest("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
		}
		if p.maxTokens > 0 && p.maxTokens <= b {
			return badRequest("`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size")
		}
		p.thinking = true
	case "adaptive":
		p.thinking = true
	case "disabled", "between_tools":
	default:
		return badRequest("thinking.type: Input should be 'enabled', 'adaptive', 'disabled' or 'between_tools'")
	}
	return p.checkThinkingControls(t, typ)
}

var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)

func checkTools(t gjson.Result) *reqError {
	if !t.IsArray() {
		return badRequest("tools: Input should be a valid list")
	}
	seen := map[string]bool{}
	var e *reqError
	i := -1
	t.ForEach(func(_, tool gjson.Result) bool {
		i++
		if !tool.IsObject() {
			e = badRequest("tools.%d: Input should be an object", i)
			return false
		}
		typ := tool.Get("type")
		name := tool.Get("name")
		switch {
		case !typ.Exists() || typ.Str == "custom":
			if name.Type != gjson.String {
				e = badRequest("tools.%d.custom.name: Field required", i)
				return false
			}
			if !toolName.MatchString(name.Str) {
				e = badRequest("tools.%d.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'", i)
				return false
			}
			if s := tool.Get("input_schema"); !s.IsObject() {
				e = badRequest("tools.%d.custom.input_schema: Field required", i)
				return false
			}
		case typ.Str == "memory_20250818":
			if name.Str != "memory" {
				e = badRequest("tools.%d.memory_20250818.name: Input should be 'memory'", i)
				return false
			}
		case typ.Type == gjson.String && typ.Str != "":
			if name.Type != gjson.String || name.Str == "" {
				e = badRequest("tools.%d.%s.name: Field required", i, typ.Str)
				return false
			}
		default:
			e = badRequest("tools.%d.type: Input should be a valid string", i)
			return false
		}
		if seen[name.Str] {
			e = badRequest("tools: Tool names must be unique. Duplicate name: %s", name.Str)
			return false
		}
		seen[name.Str] = true
		return true
	})
	return e
}

// onlyFields rejects fields of obj outside allowed.
func onlyFields(obj gjson.Result, where string, allowed ...string) *reqError {
	var e *reqError
	obj.ForEach(func(k, _ gjson.Result) bool {
		if !slices.Contains(allowed, k.Str) {
			e = badRequest("%s.%s: Extra inputs are not permitted", where, k.Str)
			return false
		}
		return true
	})
	return e
}

// typedValue checks {"type": one of types, "value": int >= min}.
func typedValue(r gjson.Result, where string, min int64, types ...string) (string, int64, *reqError) {
	if !r.IsObject() {
		return "", 0, badRequest("%s: Input should be an object", where)
	}
	if e := onlyFields(r, where, "type", "value"); e != nil {
		return "", 0, e
	}
	typ := r.Get("type")
	if !slices.Contains(types, typ.Str) || typ.Type != gjson.String {
		return "", 0, badRequest("%s.type: Input should be %s", where, quoteList(types))
	}
	v := r.Get("value")
	if !v.Exists() {
		return "", 0, badRequest("%s.value: Field required", where)
	}
	n, ok := isInt(v)
	if !ok {
		return "", 0, badRequest("%s.value: Input should be a valid integer", where)
	}
	if n < min {
		return "", 0, badRequest("%s.value: Input should be greater than or equal to %d", where, min)
	}
	return typ.Str, n, nil
}

func quoteList(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = "'" + v + "'"
	}
	return strings.Join(q, " or ")
}

func stringList(r gjson.Result, where string) ([]string, *reqError) {
	if !r.IsArray() {
		return nil, badRequest("%s: Input should be a valid list", where)
	}
	var out []string
	var e *reqError
	r.ForEach(func(_, v gjson.Result) bool {
		if v.Type != gjson.String {
			e = badRequest("%s.%d: Input should be a valid string", where, len(out))
			return false
		}
		out = append(out, v.Str)
		return true
	})
	return out, e
}

func (p *parsed) checkContextManagement(cm gjson.Result) *reqError {
	if !cm.IsObject() {
		return badRequest("context_management: Input should be an object")
	}
	if e := onlyFields(cm, "context_management", "edits"); e != nil {
		return e
	}
	edits := cm.Get("edits")
	if !edits.Exists() || edits.Type == gjson.Null {
		return nil
	}
	if !edits.IsArray() {
		return badRequest("context_management.edits: Input should be a valid list")
	}
	var e *reqError
	i := -1
	edits.ForEach(func(_, v gjson.Result) bool {
		i++
		var ed edit
		ed, e = p.checkEdit(v, fmt.Sprintf("context_management.edits.%d", i))
		if e != nil {
			return false
		}
		for _, prev := range p.edits {
			if prev.typ == ed.typ {
				e = badRequest("context_management.edits: duplicate edit type %s; each edit type may appear only once", ed.typ)
				return false
			}
		}
		if ed.typ == editClearThinking && i > 0 {
			e = badRequest("context_management.edits.%d: %s must be the first edit when several edits are given", i, editClearThinking)
			return false
		}
		p.edits = append(p.edits, ed)
		return true
	})
	if e == nil && p.compact != nil && !slices.Contains(p.betas, BetaCompact) {
		return badRequest("context_management.edits: %s requires the anthropic-beta header %q", editCompact, BetaCompact)
	}
	return e
}

func (p *parsed) checkEdit(v gjson.Result, where string) (edit, *reqError) {
	if !v.IsObject() {
		return edit{}, badRequest("%s: Input should be an object", where)
	}
	typ := v.Get("type")
	ed := edit{typ: typ.Str}
	switch typ.Str {
	case editClearToolUses:
		if e := onlyFields(v, where, "type", "trigger", "keep", "clear_at_least", "exclude_tools", "clear_tool_inputs"); e != nil {
			return ed, e
		}
		ed.triggerType, ed.triggerValue, ed.keep = "input_tokens", 100000, 3
		var e *reqError
		if t := v.Get("trigger"); t.Exists() {
			if ed.triggerType, ed.triggerValue, e = typedValue(t, where+".trigger", 1, "input_tokens", "tool_uses"); e != nil {
				return ed, e
			}
		}
		if k := v.Get("keep"); k.Exists() {
			if _, ed.keep, e = typedValue(k, where+".keep", 0, "tool_uses"); e != nil {
				return ed, e
			}
		}
		if c := v.Get("clear_at_least"); c.Exists() && c.Type != gjson.Null {
			if _, ed.clearAtLeast, e = typedValue(c, where+".clear_at_least", 0, "input_tokens"); e != nil {
				return ed, e
			}
		}
		if x := v.Get("exclude_tools"); x.Exists() && x.Type != gjson.Null {
			if ed.exclude, e = stringList(x, where+".exclude_tools"); e != nil {
				return ed, e
			}
		}
		if c := v.Get("clear_tool_inputs"); c.Exists() && c.Type != gjson.Null {
			switch {
			case c.Type == gjson.True || c.Type == gjson.False:
				ed.inputsAll = c.Type == gjson.True
			case c.IsArray():
				if ed.inputsFor, e = stringList(c, where+".clear_tool_inputs"); e != nil {
					return ed, e
				}
			default:
				return ed, badRequest("%s.clear_tool_inputs: Input should be a valid boolean or a list of tool names", where)
			}
		}
	case editClearThinking:
		if e := onlyFields(v, where, "type", "keep"); e != nil {
			return ed, e
		}
		if !p.thinking && (p.thinkingType != "between_tools" || p.btRefusesClear) {
			return ed, badRequest("%s: %s requires extended thinking; set thinking to {\"type\":\"enabled\",...} or {\"type\":\"adaptive\"}", where, editClearThinking)
		}
		ed.keep = defaultThinkingKeep(p.model)
		k := v.Get("keep")
		switch {
		case !k.Exists():
		case k.Type == gjson.String && k.Str == "all":
			ed.keep = -1
		case k.IsObject() && k.Get("type").Str == "all":
			if e := onlyFields(k, where+".keep", "type"); e != nil {
				return ed, e
			}
			ed.keep = -1
		case k.IsObject():
			var e *reqError
			if _, ed.keep, e = typedValue(k, where+".keep", 1, "thinking_turns"); e != nil {
				return ed, e
			}
		default:
			return ed, badRequest("%s.keep: Input should be {\"type\":\"thinking_turns\",\"value\":N}, {\"type\":\"all\"} or \"all\"", where)
		}
	case editCompact:
		if e := onlyFields(v, where, "type", "trigger", "instructions", "pause_after_compaction"); e != nil {
			return ed, e
		}
		spec := &compactSpec{trigger: DefaultCompactTrigger}
		if t := v.Get("trigger"); t.Exists() && t.Type != gjson.Null {
			var e *reqError
			if _, spec.trigger, e = typedValue(t, where+".trigger", MinCompactTrigger, "input_tokens"); e != nil {
				return ed, e
			}
		}
		if s := v.Get("instructions"); s.Exists() && s.Type != gjson.Null && s.Type != gjson.String {
			return ed, badRequest("%s.instructions: Input should be a valid string", where)
		} else {
			spec.instructions = s.Str
		}
		if s := v.Get("pause_after_compaction"); s.Exists() && s.Type != gjson.True && s.Type != gjson.False {
			return ed, badRequest("%s.pause_after_compaction: Input should be a valid boolean", where)
		} else {
			spec.pause = s.Type == gjson.True
		}
		p.compact = spec
	default:
		if !typ.Exists() {
			return ed, badRequest("%s.type: Field required", where)
		}
		return ed, badRequest("%s.type: Input tag '%s' found using 'type' does not match any of the expected tags: '%s', '%s', '%s'",
			where, typ.String(), editClearToolUses, editClearThinking, editCompact)
	}
	return ed, nil
}

var modelVersion = regexp.MustCompile(`claude-(opus|sonnet|haiku)-(\d+)(?:-(\d)(?:\D|$))?`)

// defaultThinkingKeep follows the newer docs: Opus 4.5+ and Sonnet 4.6+ (and
// any 5.x) keep all thinking, older models and Haiku 4.x keep the last turn.
func defaultThinkingKeep(model string) int64 {
	m := modelVersion.FindStringSubmatch(model)
	if m == nil {
		return -1
	}
	major, _ := strconv.Atoi(m[2])
	minor, _ := strconv.Atoi(m[3])
	if major >= 5 {
		return -1
	}
	if major == 4 && ((m[1] == "opus" && minor >= 5) || (m[1] == "sonnet" && minor >= 6)) {
		return -1
	}
	return 1
}

// checkConversation applies the conversation rules to the full message list
// and returns the number of assistant turns. It reads every message once
// (scanTurn) and keeps what it read in p.turns for the edits.
func (p *parsed) checkConversation() (int, *reqError) {
	msgs := p.messages
	p.turns = make([]turnFacts, 0, len(msgs))
	var buf []blockFacts
	assistant := 0
	var pending []string // tool_use ids of the previous assistant turn
	prevRole := ""
	for i, raw := range msgs {
		var m turnFacts
		m, buf = scanTurn(view(raw), buf)
		p.turns = append(p.turns, m)
		if !m.object {
			return assistant, badRequest("messages.%d: Input should be an object", i)
		}
		role := m.role
		if role != "user" && role != "assistant" && role != "system" {
			return assistant, badRequest("messages.%d.role: Input should be 'user', 'assistant' or 'system'", i)
		}
		if i == 0 && role != "user" {
			return assistant, badRequest("messages: first message must use the \"user\" role")
		}
		if role == "system" {
			if err := checkSystemMessage(m, i, pending); err != nil {
				return assistant, err
			}
			continue // outside the user/assistant alternation
		}
		if role == prevRole {
			return assistant, badRequest("messages: roles must alternate between \"user\" and \"assistant\", but found multiple %q roles in a row (messages.%d)", role, i)
		}
		prevRole = role
		last := i == len(msgs)-1
		content := m.content
		blocks := m.blocks
		switch {
		case isString(content):
			if content == `""` && !(last && role == "assistant") {
				return assistant, badRequest("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
			}
		case isArray(content):
			if len(blocks) == 0 && !(last && role == "assistant") {
				return assistant, badRequest("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
			}
		case content == "":
			return assistant, badRequest("messages.%d.content: Field required", i)
		default:
			return assistant, badRequest("messages.%d.content: Input should be a valid string or list of content blocks", i)
		}
		if role == "assistant" {
			assistant++
			for j, b := range blocks {
				if !b.object {
					return assistant, badRequest("messages.%d.content.%d: Input should be an object", i, j)
				}
				switch b.typ {
				case "tool_use":
					id := str(b.id)
					if !isString(b.id) || id == "" {
						return assistant, badRequest("messages.%d.content.%d.tool_use.id: Field required", i, j)
					}
					if !isString(b.name) {
						return assistant, badRequest("messages.%d.content.%d.tool_use.name: Field required", i, j)
					}
					if !isObject(b.input) {
						return assistant, badRequest("messages.%d.content.%d.tool_use.input: Input should be a valid dictionary", i, j)
					}
					pending = append(pending, id)
				case "thinking":
					if !isString(b.signature) {
						return assistant, badRequest("messages.%d.content.%d.thinking.signature: Field required", i, j)
					}
					if !isString(b.thinking) {
						return assistant, badRequest("messages.%d.content.%d.thinking.thinking: Field required", i, j)
					}
				case "redacted_thinking":
					if !isString(b.data) {
						return assistant, badRequest("messages.%d.content.%d.redacted_thinking.data: Field required", i, j)
					}
				case "compaction":
					if e := checkCompactionBlock(b, i, j, p.blockNeedsEdit, p); e != nil {
						return assistant, e
					}
				case "":
					return assistant, badRequest("messages.%d.content.%d.type: Field required", i, j)
				}
			}
			if last && len(pending) > 0 {
				return assistant, badRequest("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i, strings.Join(pending, ", "))
			}
			continue
		}
		// user turn: answers to pending come first
		answered := 0
		seenOther := false
		for j, b := range blocks {
			if !b.object {
				return assistant, badRequest("messages.%d.content.%d: Input should be an object", i, j)
			}
			switch b.typ {
			case "tool_result":
				id := str(b.toolUseID)
				k := slices.Index(pending, id)
				if k < 0 || id == "" {
					return assistant, badRequest("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, id)
				}
				if seenOther {
					return assistant, badRequest("messages.%d.content.%d: `tool_result` blocks must come first in the user message, before any other content", i, j)
				}
				pending[k] = "" // answered; a second result for it is unexpected
				answered++
			case "":
				return assistant, badRequest("messages.%d.content.%d.type: Field required", i, j)
			case "compaction":
				if e := checkCompactionBlock(b, i, j, p.blockNeedsEdit, p); e != nil {
					return assistant, e
				}
				seenOther = true
			default:
				seenOther = true
			}
		}
		if answered < len(pending) {
			var missing []string
			for _, id := range pending {
				if id != "" {
					missing = append(missing, id)
				}
			}
			return assistant, badRequest("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i-1, strings.Join(missing, ", "))
		}
		pending = pending[:0]
	}
	return assistant, nil
}

// checkSystemMessage checks a {"role":"system"} entry of messages. Claude Code
// sends one after the first user turn (its environment notes: content a list
// of text blocks on the first turn, a string on later ones), with or without
// its experimental betas, so the API takes it. It does not count in the
// user/assistant alternation, and it cannot sit between a tool_use and its
// tool_result.
func checkSystemMessage(m turnFacts, i int, pending []string) *reqError {
	if len(pending) > 0 {
		return badRequest("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i-1, strings.Join(pending, ", "))
	}
	switch content := m.content; {
	case isString(content):
		if content == `""` {
			return badRequest("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
		}
	case isArray(content):
		if len(m.blocks) == 0 {
			return badRequest("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
		}
		for j, b := range m.blocks {
			if b.typ != "text" || !isString(b.text) {
				return badRequest("messages.%d.content.%d: a system message holds only text blocks", i, j)
			}
		}
	case content == "":
		return badRequest("messages.%d.content: Field required", i)
	default:
		return badRequest("messages.%d.content: Input should be a valid string or list of content blocks", i)
	}
	return nil
}
