package fakeapi

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"slices"
	"sort"
	"strings"
	"time"
	"unsafe"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/tidwall/gjson"
)

// cacheFields are the request's top-level members the prompt cache and cache
// diagnostics read (raw values aliasing the body; "" when missing).
type cacheFields struct {
	autoTTL time.Duration // the top-level cache_control's TTL; 0: none
	diag    bool          // a diagnostics object was sent
	prevID  string        // its previous_message_id ("" when null)

	thinking, cm, toolChoice, speed, outputConfig, outputFormat string
}

// marker is one explicit cache_control of a request, in processing order.
type marker struct {
	path string // the block, e.g. "messages.2.content.0"
	ttl  time.Duration
}

// checkCache validates the top-level cache_control and diagnostics and every
// block's cache_control as the API does (400 invalid_request_error; the
// wording of the breakpoint errors is third-party, unverified). It runs with
// the cache model off too: the API checks these fields whatever the fake
// models.
func (p *parsed) checkCache(f *topLevel, countTokens bool, o *CacheOptions) *reqError {
	c := &p.cache
	c.thinking, c.cm, c.toolChoice, c.speed = f.thinking, f.cm, f.toolChoice, f.speed
	c.outputConfig, c.outputFormat = f.outputConfig, f.outputFormat
	if f.cacheControl != "" && f.cacheControl != "null" {
		ttl, e := parseCacheControl(f.cacheControl, "")
		if e != nil {
			return e
		}
		c.autoTTL = ttl
	}
	if f.diagnostics != "" && f.diagnostics != "null" {
		if countTokens {
			if o.is("count_tokens_diagnostics", "reject") {
				// count_tokens takes no diagnostics parameter (unverified what the
				// API answers; switchable).
				return badRequest("diagnostics: Extra inputs are not permitted")
			}
		} else {
			d := gjson.Parse(f.diagnostics)
			if !d.IsObject() {
				return badRequest("diagnostics: Input should be a valid dictionary or object to extract fields from")
			}
			if e := onlyFields(d, "diagnostics", "previous_message_id"); e != nil {
				return e
			}
			prev := d.Get("previous_message_id")
			if prev.Exists() && prev.Type != gjson.Null && prev.Type != gjson.String {
				return badRequest("diagnostics.previous_message_id: Input should be a valid string")
			}
			c.diag, c.prevID = true, prev.Str
		}
	}
	markers, e := p.markers()
	if e != nil {
		return e
	}
	n := len(markers)
	if c.autoTTL != 0 {
		if target, ttl := p.autoTarget(); ttl != 0 {
			if ttl != c.autoTTL {
				return badRequest("cache_control: the automatic breakpoint falls on %s, which already has a cache_control with ttl='%s'; the top-level cache_control asks for ttl='%s'",
					target, ttlName(ttl), ttlName(c.autoTTL))
			}
		} else {
			n++
			if o.AutoInTTLOrder.is(true) {
				markers = append(markers, marker{ttl: c.autoTTL})
			}
		}
	}
	if n > 4 {
		return badRequest("A maximum of 4 blocks with cache_control may be provided. Found %d.", n)
	}
	seen5m := false
	for _, m := range markers {
		if m.ttl == ttl1h && seen5m {
			where := "cache_control.ttl"
			if m.path != "" {
				where = m.path + ".cache_control.ttl"
			}
			return badRequest("%s: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. Note that blocks are processed in the following order: tools, system, messages.", where)
		}
		seen5m = seen5m || m.ttl == ttl5m
	}
	return nil
}

// parseCacheControl checks one cache_control value (not null) and returns its
// TTL; where is the path of the block that carries it ("" for top level).
func parseCacheControl(raw, where string) (time.Duration, *reqError) {
	at := "cache_control"
	if where != "" {
		at = where + ".cache_control"
	}
	v := gjson.Parse(raw)
	if !v.IsObject() {
		return 0, badRequest("%s: Input should be a valid dictionary or object to extract fields from", at)
	}
	if e := onlyFields(v, at, "type", "ttl"); e != nil {
		return 0, e
	}
	typ := v.Get("type")
	if !typ.Exists() {
		return 0, badRequest("%s.type: Field required", at)
	}
	if typ.Type != gjson.String || typ.Str != "ephemeral" {
		return 0, badRequest("%s.type: Input should be 'ephemeral'", at)
	}
	switch ttl := v.Get("ttl"); {
	case !ttl.Exists() || ttl.Type == gjson.Null:
		return ttl5m, nil
	case ttl.Type == gjson.String && ttl.Str == "5m":
		return ttl5m, nil
	case ttl.Type == gjson.String && ttl.Str == "1h":
		return ttl1h, nil
	}
	return 0, badRequest("%s.ttl: Input should be '5m' or '1h'", at)
}

// blockMarker checks the cache_control of a message block (or of a block
// nested in a tool_result) at where; 0 when it has none.
func blockMarker(b *blockFacts, where string) (time.Duration, *reqError) {
	if b.cacheControl == "" {
		return 0, nil
	}
	switch b.typ {
	case "thinking", "redacted_thinking":
		// Thinking blocks take no cache_control: they are cached as part of
		// the prefix only.
		return 0, badRequest("%s.%s.cache_control: Extra inputs are not permitted", where, b.typ)
	}
	if b.cacheControl == "null" {
		return 0, nil
	}
	if b.typ == "text" && b.text == `""` {
		return 0, badRequest("%s.text: cache_control cannot be set for empty text blocks", where)
	}
	return parseCacheControl(b.cacheControl, where)
}

// markers lists the request's explicit breakpoints in processing order
// (tools, system, messages, nested blocks after the block that holds them),
// checking each.
func (p *parsed) markers() ([]marker, *reqError) {
	var out []marker
	var err *reqError
	eachTopBlock(p.tools, func(i int, raw string) bool {
		if !strings.Contains(raw, `"cache_control"`) {
			return true
		}
		if cc := gjson.Get(raw, "cache_control"); cc.Exists() && cc.Type != gjson.Null {
			where := "tools." + itoa(int64(i))
			var ttl time.Duration
			if ttl, err = parseCacheControl(cc.Raw, where); err != nil {
				return false
			}
			out = append(out, marker{where, ttl})
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	eachTopBlock(p.system, func(i int, raw string) bool {
		b, _ := scanBlock(raw, 0)
		if b.cacheControl == "" {
			return true
		}
		where := "system." + itoa(int64(i))
		var ttl time.Duration
		if ttl, err = blockMarker(&b, where); err != nil {
			return false
		}
		if ttl != 0 {
			out = append(out, marker{where, ttl})
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	for i, t := range p.turns {
		for j := range t.blocks {
			b := &t.blocks[j]
			nested := b.typ == "tool_result" && isArray(b.content) && strings.Contains(b.content, `"cache_control"`)
			if b.cacheControl == "" && !nested {
				continue // most blocks: no path built
			}
			where := "messages." + itoa(int64(i)) + ".content." + itoa(int64(j))
			ttl, e := blockMarker(b, where)
			if e != nil {
				return nil, e
			}
			if ttl != 0 {
				out = append(out, marker{where, ttl})
			}
			if !nested {
				continue
			}
			k := 0
			eachElement(b.content, 0, func(v int) int {
				nb, end := scanBlock(b.content, v)
				nw := where + ".tool_result.content." + itoa(int64(k))
				k++
				if err != nil {
					return end
				}
				var ttl time.Duration
				if ttl, err = blockMarker(&nb, nw); err == nil && ttl != 0 {
					out = append(out, marker{nw, ttl})
				}
				return end
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// eachTopBlock calls fn with each element of a tools or system array (a
// string system is one element); fn returns false to stop.
func eachTopBlock(raw []byte, fn func(i int, raw string) bool) {
	eachTopBlockAt(raw, func(i int, raw string, _ int) bool { return fn(i, raw) })
}

// eachTopBlockAt is eachTopBlock also passing the offset after each element.
func eachTopBlockAt(raw []byte, fn func(i int, raw string, end int) bool) {
	s := view(raw)
	i := skipSpace(s, 0)
	if i >= len(s) {
		return
	}
	if s[i] != '[' {
		fn(0, s[i:], len(s))
		return
	}
	n, stop := 0, false
	eachElement(s, i, func(v int) int {
		end := skipValue(s, v)
		if !stop {
			stop = !fn(n, s[v:end], end)
		}
		n++
		return end
	})
}

// cacheable reports whether a block may carry the automatic breakpoint: not
// thinking, redacted thinking or empty text (which blocks are ineligible is
// unverified; these are the ones that cannot take a cache_control).
func cacheable(b *blockFacts) bool {
	switch b.typ {
	case "thinking", "redacted_thinking":
		return false
	case "text":
		return b.text != `""`
	}
	return true
}

// autoTarget is the block the automatic breakpoint falls on as the request
// was sent (the last cacheable block, walking back through messages, system
// and tools) and the TTL of its explicit cache_control (0: none).
func (p *parsed) autoTarget() (string, time.Duration) {
	for i := len(p.turns) - 1; i >= 0; i-- {
		t := &p.turns[i]
		if isString(t.content) {
			if t.content != `""` {
				return "messages." + itoa(int64(i)) + ".content", 0
			}
			continue
		}
		for j := len(t.blocks) - 1; j >= 0; j-- {
			if b := &t.blocks[j]; cacheable(b) {
				ttl, _ := blockMarker(b, "")
				return "messages." + itoa(int64(i)) + ".content." + itoa(int64(j)), ttl
			}
		}
	}
	var path string
	var ttl time.Duration
	eachTopBlock(p.system, func(i int, raw string) bool {
		if isString(raw) {
			if raw != `""` {
				path, ttl = "system", 0
			}
			return true
		}
		if b, _ := scanBlock(raw, 0); cacheable(&b) {
			path = "system." + itoa(int64(i))
			ttl, _ = blockMarker(&b, "")
		}
		return true
	})
	if path != "" {
		return path, ttl
	}
	eachTopBlock(p.tools, func(i int, raw string) bool {
		path = "tools." + itoa(int64(i))
		ttl = 0
		if cc := gjson.Get(raw, "cache_control"); cc.Exists() && cc.Type != gjson.Null {
			ttl, _ = parseCacheControl(cc.Raw, "")
		}
		return true
	})
	return path, ttl
}

// blockRef names a block of the request: tools.I, system (a string),
// system.I, messages.I.content (a string) or messages.I.content.J.
type blockRef struct {
	section string
	i, j    int
}

func (r blockRef) String() string {
	switch {
	case r.section == "system" && r.i < 0:
		return "system"
	case r.section != "messages":
		return r.section + "." + itoa(int64(r.i))
	case r.j < 0:
		return "messages." + itoa(int64(r.i)) + ".content"
	}
	return "messages." + itoa(int64(r.i)) + ".content." + itoa(int64(r.j))
}

// position is one block of the prompt as the cache sees it (a run of
// tool_use or tool_result blocks counts as one).
type position struct {
	key      cacheKey      // the prefix hash through this position
	cum      int           // bytes of the prompt through this position (T = Tokens(cum))
	at       blockRef      // its (first) block
	eligible bool          // may take the automatic breakpoint
	ttl      time.Duration // its breakpoint's TTL (0: no breakpoint)
}

// promptEntry is one tool, system block or message for diagnostics: a hash
// of its bytes and their token estimate.
type promptEntry struct {
	hash   [16]byte
	tokens int64
}

// prompt is a request rendered for the cache: its positions, its byte total
// (the fake's estimate after the edits, so Tokens(total) is usage's total),
// and, for the prompt view of diagnostics, its messages.
type prompt struct {
	pos   []position
	total int
	msgs  []promptEntry
}

func (pr *prompt) tokensAt(i int) int64 {
	if i < 0 {
		return 0
	}
	return Tokens(pr.pos[i].cum)
}

// promptBuilder flattens a request into positions, chaining the prefix hash.
type promptBuilder struct {
	pr      prompt
	h       cacheKey
	pending int // bytes that belong to the next position
	tail    int // bytes after the last position (cache_control markers)
	runsOne bool

	section string // "tools", "system", "messages"
	ordinal int    // the message's index in the rendered prompt
	role    string

	// The open run of tool_use or tool_result blocks.
	runKind   string
	runBytes  []byte
	runWeight int
	runAt     blockRef
	runTTL    time.Duration

	msgHash  [32]byte // running hash of the current message (prompt view)
	msgBytes int
	inMsg    bool

	scratch []byte
	hasher  *chainHash // reused for every position
}

func newPromptBuilder(scope, model string, runsOne bool) *promptBuilder {
	b := &promptBuilder{runsOne: runsOne, hasher: newChainHash()}
	h := b.hasher
	h.str("fakeapi prompt cache")
	h.str(scope)
	h.str(model)
	h.Sum(b.h[:0])
	return b
}

// chainHash is a SHA-256 fed length-prefixed fields (so no two field lists
// hash alike), reused without allocating.
type chainHash struct {
	hash.Hash
	n [8]byte
}

func newChainHash() *chainHash { return &chainHash{Hash: sha256.New()} }

func (h *chainHash) int(v int64) {
	binary.LittleEndian.PutUint64(h.n[:], uint64(v))
	_, _ = h.Write(h.n[:])
}

func (h *chainHash) bytes(b []byte) {
	h.int(int64(len(b)))
	_, _ = h.Write(b)
}

func (h *chainHash) str(s string) { h.bytes(unsafe.Slice(unsafe.StringData(s), len(s))) } // read only

// weight adds bytes that count in the estimate but are no position (JSON
// framing, hidden or stripped blocks): they go to the next position.
func (b *promptBuilder) weight(n int) { b.pending += n }

// markerWeight adds the bytes of cache_control members: they count in the
// estimate after the last position (in input_tokens), so that no prefix's
// tokens depend on where the markers sit (a marker that moves on to the
// next turn leaves the prefix it wrote with the tokens it had).
func (b *promptBuilder) markerWeight(n int) { b.tail += n }

// markerBytes is the size of a cache_control member whose value is cc.
func markerBytes(cc string) int {
	if cc == "" {
		return 0
	}
	return len(`,"cache_control":`) + len(cc)
}

// add is one block: canon its bytes as hashed, w its bytes as counted;
// run is "tool_use" or "tool_result" for blocks that join a run.
func (b *promptBuilder) add(canon []byte, w int, at blockRef, eligible bool, ttl time.Duration, run string) {
	if run != "" && b.runsOne {
		if b.runKind == run {
			b.runBytes = append(append(b.runBytes, ','), canon...)
			b.runWeight += w
			b.runTTL = max(b.runTTL, ttl)
			return
		}
		b.flush()
		b.runKind, b.runAt, b.runTTL, b.runWeight = run, at, ttl, w
		b.runBytes = append(b.runBytes[:0], canon...)
		return
	}
	b.flush()
	b.emit(canon, w, at, eligible, ttl)
}

// mark attaches a marker on something that is no position (a deferred or
// server tool) to the position before it.
func (b *promptBuilder) mark(ttl time.Duration) {
	if b.runKind != "" {
		b.runTTL = max(b.runTTL, ttl)
		return
	}
	if n := len(b.pr.pos); n > 0 {
		b.pr.pos[n-1].ttl = max(b.pr.pos[n-1].ttl, ttl)
	}
}

func (b *promptBuilder) flush() {
	if b.runKind == "" {
		return
	}
	b.runKind = ""
	b.emit(b.runBytes, b.runWeight, b.runAt, true, b.runTTL)
}

func (b *promptBuilder) emit(canon []byte, w int, at blockRef, eligible bool, ttl time.Duration) {
	b.pending += w
	cum := b.pending
	if n := len(b.pr.pos); n > 0 {
		cum += b.pr.pos[n-1].cum
	}
	b.pending = 0
	h := b.hasher
	h.Reset()
	h.Write(b.h[:])
	h.str(b.section)
	h.int(int64(b.ordinal))
	h.str(b.role)
	h.bytes(canon)
	h.Sum(b.h[:0])
	b.pr.pos = append(b.pr.pos, position{key: b.h, cum: cum, at: at, eligible: eligible, ttl: ttl})
	if b.inMsg {
		h.Reset()
		h.Write(b.msgHash[:])
		h.bytes(canon)
		h.Sum(b.msgHash[:0])
		b.msgBytes += len(canon)
	}
}

// salt mixes parameters into the chain between sections: they take no
// tokens and cannot be breakpoints, but change every later prefix.
func (b *promptBuilder) salt(name string, parts ...string) {
	b.flush()
	h := b.hasher
	h.Reset()
	h.Write(b.h[:])
	h.str("salt:" + name)
	for _, p := range parts {
		h.str(p)
	}
	h.Sum(b.h[:0])
}

func (b *promptBuilder) beginMessage(ordinal int, role string) {
	b.flush()
	b.section, b.ordinal, b.role = "messages", ordinal, role
	b.inMsg, b.msgBytes = true, 0
	b.msgHash = sha256.Sum256([]byte(role))
}

func (b *promptBuilder) endMessage() {
	b.flush()
	var e promptEntry
	copy(e.hash[:], b.msgHash[:])
	e.tokens = Tokens(b.msgBytes)
	b.pr.msgs = append(b.pr.msgs, e)
	b.inMsg = false
}

func (b *promptBuilder) finish() *prompt {
	b.flush()
	if n := len(b.pr.pos); n > 0 {
		b.pr.pos[n-1].cum += b.pending
		b.pr.total = b.pr.pos[n-1].cum
	} else {
		b.pr.total = b.pending
	}
	b.pr.total += b.tail
	b.pending = 0
	return &b.pr
}

// canonEdit is how a block's hashed bytes differ from the bytes sent.
type canonEdit struct {
	content    string // replaces the content member (a cleared tool result)
	emptyInput bool   // the input member becomes {} (a cleared tool input)
	nested     bool   // drop cache_control in the content array's blocks too
}

// appendCanon appends the compact JSON of the object s without its
// cache_control member (markers are not part of the key), keeping key order:
// a tool_use input serialised in another order is another prefix.
func appendCanon(dst []byte, s string, ed canonEdit) []byte {
	i := skipSpace(s, 0)
	if i >= len(s) || s[i] != '{' {
		return appendCompact(dst, s)
	}
	dst = append(dst, '{')
	first := true
	eachMember(s, i, func(key string, v int) int {
		end := skipValue(s, v)
		if key == "cache_control" {
			return end
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = jsonstr.Append(dst, key)
		dst = append(dst, ':')
		val := s[v:end]
		switch {
		case key == "content" && ed.content != "":
			dst = append(dst, ed.content...)
		case key == "input" && ed.emptyInput:
			dst = append(dst, "{}"...)
		case key == "content" && ed.nested && isArray(val):
			dst = append(dst, '[')
			n := 0
			eachElement(val, 0, func(e int) int {
				end := skipValue(val, e)
				if n > 0 {
					dst = append(dst, ',')
				}
				n++
				dst = appendCanon(dst, val[e:end], canonEdit{})
				return end
			})
			dst = append(dst, ']')
		default:
			dst = appendCompact(dst, val)
		}
		return end
	})
	return append(dst, '}')
}

// appendCompact appends s (valid JSON) without whitespace outside strings.
func appendCompact(dst []byte, s string) []byte {
	for i := 0; i < len(s); {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\r':
			i++
		case '"':
			e := skipString(s, i)
			dst = append(dst, s[i:e]...)
			i = e
		default:
			dst = append(dst, c)
			i++
		}
	}
	return dst
}

// renderPrompt is the prompt the model sees, as the cache keys it: the edits
// applied (res), everything before the last compaction block dropped, on
// models that keep only the last turn's thinking the earlier thinking
// stripped, hidden system messages left out; then flattened into positions
// tools → system → messages with the two parameter salts between them.
// Bytes the model does not see but the estimate counts (stripped thinking,
// hidden messages) keep their weight, so Tokens(total) is always the fake's
// input estimate.
func renderPrompt(p *parsed, res *editResult, o *CacheOptions, scope string) *prompt {
	b := newPromptBuilder(scope, p.model, o.ToolRunsOnePosition.is(true))
	serverTools := renderTools(b, p.tools)
	c := &p.cache
	images, citations := scanMedia(p)
	var sys []string
	if o.is("speed_level", "system") {
		sys = append(sys, "speed="+compactString(c.speed))
	}
	sys = append(sys, "server_tools="+strings.Join(serverTools, ","))
	sys = append(sys, "citations="+boolString(citations))
	thinking := "thinking=" + thinkingKey(c.thinking)
	if o.is("thinking_level", "tools") {
		sys = append(sys, thinking)
	}
	b.salt("system", sys...)
	renderSystem(b, p.system)
	msgSalt := []string{"tool_choice=" + compactString(c.toolChoice), "effort=" + effortKey(c.outputConfig),
		"images=" + boolString(images)}
	if o.is("thinking_level", "messages") {
		msgSalt = append(msgSalt, thinking)
	}
	if o.ContextManagementInKey.is(false) {
		msgSalt = append(msgSalt, "context_management="+compactString(c.cm))
	}
	switch {
	case o.is("betas_in_key", "all"):
		msgSalt = append(msgSalt, "betas="+strings.Join(sortedSet(p.betas), ","))
	case o.is("betas_in_key", "fast_mode"):
		var fast []string
		for _, n := range p.betas {
			if strings.HasPrefix(n, "fast-mode") {
				fast = append(fast, n)
			}
		}
		msgSalt = append(msgSalt, "betas="+strings.Join(sortedSet(fast), ","))
	}
	b.salt("messages", msgSalt...)
	renderMessages(b, p, res, o)
	return b.finish()
}

// renderTools adds the tool definitions (deferred ones are not in the
// prefix; web search and web fetch tools go into the system salt) and
// returns the server tools' types.
func renderTools(b *promptBuilder, tools []byte) []string {
	b.section, b.role = "tools", "tool"
	var server []string
	cursor := 0
	eachTopBlockAt(tools, func(i int, raw string, end int) bool {
		w := end - cursor
		cursor = end
		t := gjson.Parse(raw)
		var ttl time.Duration
		if cc := t.Get("cache_control"); cc.Exists() {
			w -= markerBytes(cc.Raw)
			b.markerWeight(markerBytes(cc.Raw))
			if cc.Type != gjson.Null {
				ttl, _ = parseCacheControl(cc.Raw, "")
			}
		}
		typ := t.Get("type").Str
		if t.Get("defer_loading").Type == gjson.True || strings.HasPrefix(typ, "web_search_") || strings.HasPrefix(typ, "web_fetch_") {
			if strings.HasPrefix(typ, "web_") {
				server = append(server, typ)
			}
			b.weight(w)
			b.mark(ttl)
			return true
		}
		b.scratch = appendCanon(b.scratch[:0], raw, canonEdit{})
		b.add(b.scratch, w, blockRef{"tools", i, 0}, true, ttl, "")
		return true
	})
	b.weight(len(tools) - cursor)
	b.flush()
	slices.Sort(server)
	return server
}

// renderSystem adds the system prompt: a string is one text block.
func renderSystem(b *promptBuilder, system []byte) {
	b.section, b.role = "system", "system"
	s := view(system)
	if i := skipSpace(s, 0); i < len(s) && s[i] == '"' {
		b.scratch = appendCompact(b.scratch[:0], s)
		b.add(b.scratch, len(s), blockRef{"system", -1, 0}, s[i:] != `""`, 0, "")
		return
	}
	cursor := 0
	eachTopBlockAt(system, func(i int, raw string, end int) bool {
		w := end - cursor
		cursor = end
		bf, _ := scanBlock(raw, 0)
		ttl, _ := blockMarker(&bf, "")
		w -= markerBytes(bf.cacheControl)
		b.markerWeight(markerBytes(bf.cacheControl))
		b.scratch = appendCanon(b.scratch[:0], raw, canonEdit{})
		b.add(b.scratch, w, blockRef{"system", i, 0}, cacheable(&bf), ttl, "")
		return true
	})
	b.weight(len(system) - cursor)
	b.flush()
}

// renderMessages adds the messages from the last compaction block on.
func renderMessages(b *promptBuilder, p *parsed, res *editResult, o *CacheOptions) {
	cleared := make(map[string]bool, len(res.clearedUses))
	for _, u := range res.clearedUses {
		cleared[u.id] = cleared[u.id] || u.input
	}
	strip := -1 // assistant turns before this index lose their thinking
	if o.is("strip_prior_thinking", "by_model") && !p.hasEdit(editClearThinking) && defaultThinkingKeep(p.model) == 1 {
		strip = lastUserText(p.turns)
	}
	hides := o.ClearAtHides.is(true)
	start := lastCompaction(p.turns)
	ordinal := 0
	for i := max(start.turn, 0); i < len(p.turns); i++ {
		t := &p.turns[i]
		raw := view(p.messages[i])
		if hides && t.role == "system" && hiddenSystem(p, i) {
			b.weight(len(raw))
			continue
		}
		b.beginMessage(ordinal, t.role)
		ordinal++
		from := 0
		if i == start.turn {
			from = start.block // the API ignores every block before it; no framing counted
		} else if !isArray(t.content) {
			b.scratch = appendCompact(b.scratch[:0], t.content)
			b.add(b.scratch, len(raw), blockRef{"messages", i, -1}, t.content != `""`, 0, "")
			b.endMessage()
			continue
		} else {
			framing := len(raw)
			for _, blk := range t.blocks {
				framing -= blk.size
			}
			b.weight(framing)
		}
		thinkingGone := slices.Contains(res.thinkingTurns, i)
		for j := from; j < len(t.blocks); j++ {
			blk := &t.blocks[j]
			ttl, _ := blockMarker(blk, "")
			w := blk.size - markerBytes(blk.cacheControl)
			b.markerWeight(markerBytes(blk.cacheControl))
			ed := canonEdit{}
			run := ""
			switch blk.typ {
			case "thinking", "redacted_thinking":
				if thinkingGone {
					continue // cleared: its bytes are gone from the estimate too
				}
				if i < strip && t.role == "assistant" {
					b.weight(w) // not shown to the model, still counted
					continue
				}
			case "tool_use":
				run = "tool_use"
				if cleared[str(blk.id)] {
					ed.emptyInput = true
					w -= max(len(blk.input)-2, 0)
				}
			case "tool_result":
				run = "tool_result"
				ed.nested = true
				if _, ok := cleared[str(blk.toolUseID)]; ok {
					ed.content = placeholderJSON
					w -= max(len(blk.content)-placeholderLen, 0)
				}
				nested, n := nestedMarkers(blk)
				ttl = max(ttl, nested)
				w -= n
				b.markerWeight(n)
			}
			b.scratch = appendCanon(b.scratch[:0], blk.raw, ed)
			b.add(b.scratch, w, blockRef{"messages", i, j}, cacheable(blk), ttl, run)
		}
		b.endMessage()
	}
}

// nestedMarkers is the longest TTL of the cache_control markers inside a
// tool_result's content (they count as breakpoints on the result) and
// their bytes.
func nestedMarkers(blk *blockFacts) (time.Duration, int) {
	if !isArray(blk.content) || !strings.Contains(blk.content, `"cache_control"`) {
		return 0, 0
	}
	var ttl time.Duration
	n := 0
	eachElement(blk.content, 0, func(v int) int {
		nb, end := scanBlock(blk.content, v)
		t, _ := blockMarker(&nb, "")
		ttl = max(ttl, t)
		n += markerBytes(nb.cacheControl)
		return end
	})
	return ttl, n
}

func (p *parsed) hasEdit(typ string) bool {
	for _, e := range p.edits {
		if e.typ == typ {
			return true
		}
	}
	return false
}

// lastUserText is the index of the last user message with content other
// than tool results (-1 when none).
func lastUserText(turns []turnFacts) int {
	for i := len(turns) - 1; i >= 0; i-- {
		t := &turns[i]
		if t.role != "user" {
			continue
		}
		if !isArray(t.content) {
			return i
		}
		for _, b := range t.blocks {
			if b.typ != "tool_result" {
				return i
			}
		}
	}
	return -1
}

// hiddenSystem reports whether messages[i], a system message, has clear_at
// "next_user_message" and a later user message (then the model no longer
// sees it; whether the cache drops it is unverified, hence ClearAtHides).
func hiddenSystem(p *parsed, i int) bool {
	if gjson.GetBytes(p.messages[i], "clear_at").Str != "next_user_message" {
		return false
	}
	for _, t := range p.turns[i+1:] {
		if t.role == "user" {
			return true
		}
	}
	return false
}

// scanMedia reports whether any image is present and whether any document
// has citations enabled (both part of the key), nested tool results
// included.
func scanMedia(p *parsed) (images, citations bool) {
	check := func(b *blockFacts) {
		switch b.typ {
		case "image":
			images = true
		case "document":
			if gjson.Get(b.raw, "citations.enabled").Type == gjson.True {
				citations = true
			}
		}
	}
	for i := range p.turns {
		for j := range p.turns[i].blocks {
			b := &p.turns[i].blocks[j]
			check(b)
			if b.typ == "tool_result" && isArray(b.content) &&
				(strings.Contains(b.content, `"image"`) || strings.Contains(b.content, `"document"`)) {
				eachElement(b.content, 0, func(v int) int {
					nb, end := scanBlock(b.content, v)
					check(&nb)
					return end
				})
			}
		}
	}
	return images, citations
}

func compactString(raw string) string {
	if raw == "" {
		return ""
	}
	return string(appendCompact(nil, raw))
}

func boolString(v bool) string {
	if v {
		return "1"
	}
	return "0"
}

// thinkingKey is the thinking configuration as the key sees it: its type and
// budget (display changes nothing the model reads).
func thinkingKey(raw string) string {
	if raw == "" || raw == "null" {
		return ""
	}
	t := gjson.Parse(raw)
	return t.Get("type").Str + "/" + t.Get("budget_tokens").Raw
}

// effortKey is output_config.effort with the default ("high", unverified)
// read as absent.
func effortKey(outputConfig string) string {
	if outputConfig == "" {
		return ""
	}
	e := gjson.Get(outputConfig, "effort").Str
	if e == "high" {
		return ""
	}
	return e
}

func sortedSet(names []string) []string {
	out := slices.Clone(names)
	sort.Strings(out)
	return slices.Compact(out)
}
