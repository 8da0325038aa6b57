package fakeapi

import (
	"encoding/json"
	"slices"

	"github.com/tidwall/gjson"
)

// ClearedPlaceholder stands, in the fake's accounting, for a tool result
// cleared by clear_tool_uses (the real placeholder text is not published).
// A tool_result whose content is this string counts as already cleared.
const ClearedPlaceholder = "[tool result cleared by context management]"

var placeholderLen = len(mustJSON(ClearedPlaceholder))

// Tokens is the fake's token estimate for n bytes of JSON: ceil(n/4).
func Tokens(n int) int64 { return int64(n+3) / 4 }

// editResult is the outcome of applying a request's edits.
type editResult struct {
	before, after int64 // input tokens
	applied       []json.RawMessage
}

// applyEdits runs clear_thinking and clear_tool_uses over the conversation
// as the API would, on byte counts: the whole prompt is system + tools +
// messages, tokens = ceil(bytes/4). Edits that clear nothing are left out of
// applied_edits; compact_20260112 is accepted but never applied.
func applyEdits(p *parsed) editResult {
	total := len(p.system) + len(p.tools)
	for _, m := range p.messages {
		total += len(m)
	}
	res := editResult{before: Tokens(total)}
	freed := 0
	if p.hasCM {
		res.applied = []json.RawMessage{}
	}
	for _, ed := range p.edits {
		switch ed.typ {
		case editClearThinking:
			turns, bytes := clearThinking(p.messages, ed.keep)
			if turns > 0 {
				freed += bytes
				res.applied = append(res.applied, AppliedEdit(ed.typ, int64(turns), Tokens(bytes)))
			}
		case editClearToolUses:
			uses, bytes := clearToolUses(p.messages, ed, Tokens(total-freed))
			if uses > 0 {
				freed += bytes
				res.applied = append(res.applied, AppliedEdit(ed.typ, int64(uses), Tokens(bytes)))
			}
		}
	}
	res.after = Tokens(total - freed)
	return res
}

// clearThinking drops thinking blocks of all but the last keep assistant
// turns (keep < 0: all kept). It returns the turns cleared and bytes freed.
func clearThinking(msgs []json.RawMessage, keep int64) (int, int) {
	if keep < 0 {
		return 0, 0
	}
	var assistants []int
	for i, m := range msgs {
		if gjson.GetBytes(m, "role").Str == "assistant" {
			assistants = append(assistants, i)
		}
	}
	clearable := len(assistants) - int(keep)
	turns, bytes := 0, 0
	for _, i := range assistants[:max(clearable, 0)] {
		n := 0
		gjson.GetBytes(msgs[i], "content").ForEach(func(_, b gjson.Result) bool {
			if t := b.Get("type").Str; t == "thinking" || t == "redacted_thinking" {
				n += len(b.Raw)
			}
			return true
		})
		if n > 0 {
			turns++
			bytes += n
		}
	}
	return turns, bytes
}

type toolUse struct {
	name       string
	inputLen   int
	resultLen  int
	cleared    bool
	inputEmpty bool
}

// clearToolUses applies one clear_tool_uses edit given the prompt's current
// token estimate; it returns the uses cleared and bytes freed.
func clearToolUses(msgs []json.RawMessage, ed edit, current int64) (int, int) {
	var uses []toolUse
	for i, m := range msgs {
		if gjson.GetBytes(m, "role").Str != "assistant" || i+1 >= len(msgs) {
			continue
		}
		results := map[string]gjson.Result{}
		gjson.GetBytes(msgs[i+1], "content").ForEach(func(_, b gjson.Result) bool {
			if b.Get("type").Str == "tool_result" {
				results[b.Get("tool_use_id").Str] = b.Get("content")
			}
			return true
		})
		gjson.GetBytes(m, "content").ForEach(func(_, b gjson.Result) bool {
			if b.Get("type").Str != "tool_use" {
				return true
			}
			in := b.Get("input")
			r := results[b.Get("id").Str]
			uses = append(uses, toolUse{
				name:       b.Get("name").Str,
				inputLen:   len(in.Raw),
				inputEmpty: in.Raw == "{}",
				resultLen:  len(r.Raw),
				cleared:    r.Type == gjson.String && r.Str == ClearedPlaceholder,
			})
			return true
		})
	}
	switch ed.triggerType {
	case "tool_uses":
		if int64(len(uses)) <= ed.triggerValue {
			return 0, 0
		}
	default:
		if current <= ed.triggerValue {
			return 0, 0
		}
	}
	var candidates []toolUse
	for _, u := range uses {
		if !slices.Contains(ed.exclude, u.name) {
			candidates = append(candidates, u)
		}
	}
	n := len(candidates) - int(ed.keep)
	count, bytes := 0, 0
	for _, u := range candidates[:max(n, 0)] {
		if u.cleared {
			continue
		}
		count++
		bytes += max(u.resultLen-placeholderLen, 0)
		if (ed.inputsAll || slices.Contains(ed.inputsFor, u.name)) && !u.inputEmpty {
			bytes += max(u.inputLen-2, 0)
		}
	}
	if count == 0 || Tokens(bytes) < ed.clearAtLeast {
		return 0, 0
	}
	return count, bytes
}
