package fakeapi

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Thinking block binding (the December 2026 API reference's thinking-binding section), always on as in the API.
//
// Every thinking and redacted_thinking block the fake writes (scripted ones
// included) is bound, when it is served, to:
//   - prefix: the conversation before it, that is the request's messages
//     (for a thread continue, the stored ones first) and the blocks of the
//     reply before it, from the last compaction block on (the API ignores
//     what comes before one). Only messages count: system, tools and the
//     other parameters do not. Messages are compared as the model reads
//     them, not byte for byte: key order, whitespace, cache_control, null
//     members and a string content versus one text block do not matter;
//     anything else (a block added, removed, reordered or changed; a turn
//     split or merged) does;
//   - model: the model that served it (aliases and their dated ids are one
//     model; a model reads only its own reasoning);
//   - organization: the credential's (Options.Organizations, else the
//     credential itself);
//   - end user: the anthropic-user-profile-id header (Options.EndUser).
//
// A block coming back is checked in that order of precedence: organization,
// end user, model, prefix; a block failing several reports the first. A
// prefix failure refuses the request with a 400 ("error", the default of
// thinking.block_binding.prefix_mismatch_behavior) or, with "drop_block",
// removes the block and the rest of that turn's consecutive thinking blocks
// from the prompt; on a model in Options.PrefixBindingUnenforced the block
// stays and is reported as thinking_mismatch_allowed. The other failures
// remove the block (Options.BindingMismatchRefuses: refuse). Removed blocks
// add nothing to the input estimate. With the thinking-binding-controls beta
// the reply lists what happened in input_transformations (JSON body and
// message_start), [] when nothing did, on a model with extended thinking.
//
// A block the fake never wrote (or has forgotten: Reset, or past the
// bindings kept) passes, as on a model that needs no binding record. The
// same scripted block served in several conversations is bound to each; it
// passes where any of them matches.

// Input transformation types and binding reasons.
const (
	TransformThinkingDropped  = "thinking_dropped"
	TransformMismatchAllowed  = "thinking_mismatch_allowed"
	ReasonOrganization        = "organization_binding_mismatch"
	ReasonEndUser             = "end_user_binding_mismatch"
	ReasonModel               = "model_binding_mismatch"
	ReasonPrefix              = "prefix_binding_mismatch"
	maxBindings               = 100_000
	transformsEmptyJSON       = "[]"
	messagesContentPathFormat = "messages.%d.content.%d"
)

// bindingReasons in order of precedence.
var bindingReasons = [...]string{ReasonOrganization, ReasonEndUser, ReasonModel, ReasonPrefix}

// InputTransformation is one entry of a reply's input_transformations.
type InputTransformation struct {
	Type   string `json:"type"`
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// binding is what a thinking block was made with.
type binding struct {
	prefix           [32]byte
	model, org, user string
}

// firstFailure is the index in bindingReasons of the first check want
// fails against b (b != want).
func firstFailure(b, want binding) int {
	switch {
	case b.org != want.org:
		return 0
	case b.user != want.user:
		return 1
	case b.model != want.model:
		return 2
	}
	return 3
}

// bindingStore keeps the bindings of the blocks the fake wrote, keyed by
// block identity. Past max bindings the oldest blocks are forgotten whole,
// so a forgotten block passes rather than fails.
type bindingStore struct {
	mu    sync.Mutex
	max   int
	total int
	byID  map[[32]byte]map[binding]struct{}
	order [][32]byte
}

func (s *bindingStore) init(max int) {
	s.max = max
	s.byID = make(map[[32]byte]map[binding]struct{})
}

func (s *bindingStore) reset() {
	s.mu.Lock()
	s.byID = make(map[[32]byte]map[binding]struct{})
	s.order, s.total = nil, 0
	s.mu.Unlock()
}

func (s *bindingStore) add(id [32]byte, b binding) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.byID[id]
	if set == nil {
		set = make(map[binding]struct{}, 1)
		s.byID[id] = set
		s.order = append(s.order, id)
	}
	if _, ok := set[b]; ok {
		return
	}
	set[b] = struct{}{}
	s.total++
	for s.total > s.max && len(s.order) > 0 {
		old := s.order[0]
		s.order = s.order[1:]
		s.total -= len(s.byID[old])
		delete(s.byID, old)
	}
}

func (s *bindingStore) known(id [32]byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id] != nil
}

// check returns "" when some binding of block id matches want (or the block
// is unknown), else the reason of the nearest miss.
func (s *bindingStore) check(id [32]byte, want binding) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.byID[id]
	if set == nil {
		return ""
	}
	if _, ok := set[want]; ok {
		return ""
	}
	best := 0
	for b := range set {
		best = max(best, firstFailure(b, want))
	}
	return bindingReasons[best]
}

func thinkingID(thinking, signature string) [32]byte {
	id, _ := appendThinkingID(nil, thinking, signature)
	return id
}

func redactedID(data string) [32]byte {
	id, _ := appendRedactedID(nil, data)
	return id
}

// appendThinkingID and appendRedactedID hash in buf, which they return for
// reuse.
func appendThinkingID(buf []byte, thinking, signature string) ([32]byte, []byte) {
	buf = append(append(append(append(buf[:0], "thinking\x00"...), thinking...), 0), signature...)
	return sha256.Sum256(buf), buf
}

func appendRedactedID(buf []byte, data string) ([32]byte, []byte) {
	buf = append(append(buf[:0], "redacted_thinking\x00"...), data...)
	return sha256.Sum256(buf), buf
}

// blockID is the identity of a thinking or redacted_thinking block.
func blockID(b gjson.Result) ([32]byte, bool) {
	switch b.Get("type").Str {
	case "thinking":
		return thinkingID(b.Get("thinking").Str, b.Get("signature").Str), true
	case "redacted_thinking":
		return redactedID(b.Get("data").Str), true
	}
	return [32]byte{}, false
}

// chain hashes a conversation item by item: h(n+1) = sha256(h(n) || item).
type chain struct {
	h   [32]byte
	buf []byte
}

func (c *chain) add(kind byte, fill func([]byte) []byte) {
	c.buf = fill(append(append(c.buf[:0], c.h[:]...), kind))
	c.h = sha256.Sum256(c.buf)
}

func (c *chain) message(role string) {
	c.add('m', func(b []byte) []byte { return append(b, role...) })
}

func (c *chain) block(blk gjson.Result) {
	c.add('b', func(b []byte) []byte { return appendBindingCanon(b, blk, true) })
}

// text is a string content: the same as one text block.
func (c *chain) text(s string) {
	c.add('b', func(b []byte) []byte { return appendTextBlock(b, s) })
}

// restart begins the chain again at a compaction block in a role's message.
func (c *chain) restart(role string) {
	c.h = [32]byte{}
	c.message(role)
}

func appendTextBlock(b []byte, s string) []byte {
	b = append(b, `{"text":`...)
	b = jsonstr.Append(b, s)
	return append(b, `,"type":"text"}`...)
}

// appendBindingCanon appends the canonical form of r: object members sorted
// by key, null members left out, strings escaped one way, no whitespace. In
// a content block (block) cache_control is left out too, and a tool_result's
// string content stands for one text block. Unlike the cache key
// (cacheprompt.go's appendCanon), member order never matters: clients send
// back blocks in their own serialization, and the binding check must not
// refuse them for it (a miss costs the cache a read; a binding mismatch
// costs the request).
func appendBindingCanon(b []byte, r gjson.Result, block bool) []byte {
	switch {
	case r.IsObject():
		type member struct {
			k string
			v gjson.Result
		}
		var ms []member
		r.ForEach(func(k, v gjson.Result) bool {
			if v.Type != gjson.Null && !(block && k.Str == "cache_control") {
				ms = append(ms, member{k.Str, v})
			}
			return true
		})
		slices.SortStableFunc(ms, func(x, y member) int { return strings.Compare(x.k, y.k) })
		toolResult := block && r.Get("type").Str == "tool_result"
		b = append(b, '{')
		for i, m := range ms {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonstr.Append(b, m.k)
			b = append(b, ':')
			switch {
			case toolResult && m.k == "content" && m.v.Type == gjson.String:
				b = append(appendTextBlock(append(b, '['), m.v.Str), ']')
			case toolResult && m.k == "content":
				b = appendBindingCanonArray(b, m.v, true)
			default:
				b = appendBindingCanon(b, m.v, false)
			}
		}
		return append(b, '}')
	case r.IsArray():
		return appendBindingCanonArray(b, r, false)
	case r.Type == gjson.String:
		return jsonstr.Append(b, r.Str)
	}
	return append(b, r.Raw...)
}

func appendBindingCanonArray(b []byte, r gjson.Result, blocks bool) []byte {
	b = append(b, '[')
	i := 0
	r.ForEach(func(_, v gjson.Result) bool {
		if i > 0 {
			b = append(b, ',')
		}
		i++
		b = appendBindingCanon(b, v, blocks)
		return true
	})
	return append(b, ']')
}

// walkPrefix runs the chain over msgs; visit, when not nil, is called before
// each content block with its position. It returns the last message's role.
func walkPrefix(msgs []json.RawMessage, c *chain, visit func(i, j int)) string {
	role := ""
	for i, raw := range msgs {
		m := gjson.ParseBytes(raw)
		role = m.Get("role").Str
		c.message(role)
		content := m.Get("content")
		if content.Type == gjson.String {
			if visit != nil {
				visit(i, 0)
			}
			c.text(content.Str)
			continue
		}
		j := 0
		content.ForEach(func(_, blk gjson.Result) bool {
			if visit != nil {
				visit(i, j)
			}
			if blk.Get("type").Str == "compaction" {
				c.restart(role)
			}
			c.block(blk)
			j++
			return true
		})
	}
	return role
}

// bindingOf is the model, organization and end user a request binds to.
func bindingOf(p *parsed, h http.Header, meta gjson.Result, opts *Options) binding {
	org := credential(h)
	if o, ok := opts.Organizations[org]; ok {
		org = o
	}
	user := h.Get(HeaderUserProfile)
	switch opts.EndUser {
	case EndUserMetadata:
		user = meta.Get("user_id").Str
	case EndUserBoth:
		user += "\x00" + meta.Get("user_id").Str
	}
	return binding{model: p.table.resolve(p.model), org: org, user: user}
}

// checkBindings checks the thinking blocks a request sends back (see the
// comment at the top of this file). It records what happened in
// p.transforms and, when blocks are dropped, takes them out of p.messages
// (p.sent keeps the conversation as sent).
func (a *API) checkBindings(p *parsed, h http.Header, meta gjson.Result, opts *Options) *reqError {
	p.bindAs = bindingOf(p, h, meta, opts)
	c := caps(p.info)
	p.reportTransforms = slices.Contains(p.betas, BetaThinkingBinding) && (c == nil || c.Thinking.Supported)
	from := 0
	if p.prev != nil {
		from = len(p.prev.messages) // stored blocks are the server's own
	}
	type candidate struct {
		i, j   int
		id     [32]byte
		reason string
	}
	var cands []candidate
	var buf []byte
	comp := lastCompaction(p.turns)
	for i := from; i < len(p.turns); i++ {
		if p.turns[i].role != "assistant" {
			continue
		}
		for j, b := range p.turns[i].blocks {
			if i < comp.turn || (i == comp.turn && j < comp.block) {
				continue // the API ignores blocks before the last compaction block
			}
			var id [32]byte
			switch b.typ {
			case "thinking":
				id, buf = appendThinkingID(buf, str(b.thinking), str(b.signature))
			case "redacted_thinking":
				id, buf = appendRedactedID(buf, str(b.data))
			default:
				continue
			}
			if a.bindings.known(id) {
				cands = append(cands, candidate{i: i, j: j, id: id})
			}
		}
	}
	if len(cands) == 0 {
		return nil
	}
	var ch chain
	k := 0
	walkPrefix(p.messages, &ch, func(i, j int) {
		if k < len(cands) && cands[k].i == i && cands[k].j == j {
			want := p.bindAs
			want.prefix = ch.h
			cands[k].reason = a.bindings.check(cands[k].id, want)
			k++
		}
	})
	unenforced := slices.Contains(opts.PrefixBindingUnenforced, "*") ||
		slices.Contains(opts.PrefixBindingUnenforced, p.model) || slices.Contains(opts.PrefixBindingUnenforced, p.bindAs.model)
	type pos struct{ i, j int }
	dropped := map[pos]string{}
	var allowed []pos
	for _, cd := range cands {
		at := pos{cd.i, cd.j}
		if _, gone := dropped[at]; gone || cd.reason == "" {
			continue
		}
		if cd.reason == ReasonPrefix && unenforced {
			allowed = append(allowed, at)
			continue
		}
		if !p.dropOnPrefix && (cd.reason == ReasonPrefix || opts.BindingMismatchRefuses) {
			return bindingError(cd.i-from, cd.j, cd.reason)
		}
		dropped[at] = cd.reason
		if cd.reason == ReasonPrefix {
			// The rest of that turn's consecutive thinking blocks go with it.
			blocks := p.turns[cd.i].blocks
			for j := cd.j + 1; j < len(blocks) && (blocks[j].typ == "thinking" || blocks[j].typ == "redacted_thinking"); j++ {
				dropped[pos{cd.i, j}] = ReasonPrefix
			}
		}
	}
	type entry struct {
		at pos
		t  InputTransformation
	}
	var entries []entry
	path := func(at pos) string { return fmt.Sprintf(messagesContentPathFormat, at.i-from, at.j) }
	for at, reason := range dropped {
		entries = append(entries, entry{at, InputTransformation{TransformThinkingDropped, path(at), reason}})
	}
	for _, at := range allowed {
		entries = append(entries, entry{at, InputTransformation{TransformMismatchAllowed, path(at), ReasonPrefix}})
	}
	slices.SortFunc(entries, func(x, y entry) int { return cmp.Or(cmp.Compare(x.at.i, y.at.i), cmp.Compare(x.at.j, y.at.j)) })
	for _, e := range entries {
		p.transforms = append(p.transforms, e.t)
	}
	if len(dropped) == 0 {
		return nil
	}
	// Take the dropped blocks out of the prompt, highest index first.
	p.sent = p.messages
	p.messages = slices.Clone(p.messages)
	for n := len(entries) - 1; n >= 0; n-- {
		e := entries[n]
		if e.t.Type != TransformThinkingDropped {
			continue
		}
		raw := p.messages[e.at.i]
		if &raw[0] == &p.sent[e.at.i][0] {
			raw = bytes.Clone(raw) // the request body is never written
		}
		raw, _ = sjson.DeleteBytes(raw, fmt.Sprintf("content.%d", e.at.j))
		p.messages[e.at.i] = raw
		p.turns[e.at.i], _ = scanTurn(view(raw), nil)
	}
	return nil
}

// bindingError is the 400 for a block that fails a check the request does
// not let drop it. No error_code: none is known (the December 2026 API reference's list of what is unverified).
func bindingError(i, j int, reason string) *reqError {
	why := map[string]string{
		ReasonPrefix:       "the conversation before it differs from the conversation it was created in; send back the messages that preceded it unchanged, or set thinking.block_binding.prefix_mismatch_behavior to \"drop_block\"",
		ReasonModel:        "it was created by a model whose reasoning the requested model may not read",
		ReasonOrganization: "it was created under a different organization",
		ReasonEndUser:      "it was created for a different end user",
	}[reason]
	return badRequest(messagesContentPathFormat+": this thinking block failed its binding check (%s): %s", i, j, reason, why)
}

// bindReply binds the thinking blocks of a reply served to p, made by model.
func (a *API) bindReply(p *parsed, blocks []json.RawMessage, model string) {
	if !slices.ContainsFunc(blocks, func(b json.RawMessage) bool {
		t := gjson.Get(view(b), "type").Str
		return t == "thinking" || t == "redacted_thinking"
	}) {
		return
	}
	var ch chain
	if walkPrefix(p.conversation(), &ch, nil) != "assistant" {
		ch.message("assistant") // else the reply continues the final assistant turn
	}
	want := p.bindAs
	want.model = p.table.resolve(model)
	for _, raw := range blocks {
		b := gjson.ParseBytes(raw)
		if b.Get("type").Str == "compaction" {
			ch.restart("assistant")
		}
		if id, ok := blockID(b); ok {
			w := want
			w.prefix = ch.h
			a.bindings.add(id, w)
		}
		ch.block(b)
	}
}

// transformsJSON is input_transformations as served.
func (p *parsed) transformsJSON() []byte {
	if len(p.transforms) == 0 {
		return []byte(transformsEmptyJSON)
	}
	b, _ := json.Marshal(p.transforms)
	return b
}
