package fakeapi

import (
	"encoding/json"
	"slices"
	"strings"
)

// ClearedPlaceholder stands, in the fake's accounting, for a tool result
// cleared by clear_tool_uses (the real placeholder text is not published).
// A tool_result whose content is this string counts as already cleared.
const ClearedPlaceholder = "[tool result cleared by context management]"

var (
	placeholderJSON = string(mustJSON(ClearedPlaceholder)) // as a JSON string
	placeholderLen  = len(placeholderJSON)
)

// Tokens is the fake's token estimate for n bytes of JSON: ceil(n/4).
func Tokens(n int) int64 { return int64(n+3) / 4 }

// editResult is the outcome of applying a request's edits.
type editResult struct {
	before, after int64 // input tokens
	applied       []json.RawMessage
	// What was cleared, for the prompt cache's rendering of the prompt:
	// tool uses by tool_use id, and the assistant turns (indexes into
	// parsed.turns) whose thinking was dropped.
	clearedUses   []clearedUse
	thinkingTurns []int
}

// clearedUse is one tool use clear_tool_uses cleared: its result, and its
// input too when input is set.
type clearedUse struct {
	id    string
	input bool
}

// applyEdits runs clear_thinking and clear_tool_uses over the conversation
// as the API would, on byte counts: the whole prompt is system + tools +
// messages from the last compaction block on (the API ignores every block
// before it), tokens = ceil(bytes/4). Edits that clear nothing are left out
// of applied_edits; compact_20260112 is applied after these, by
// buildMessage (it never shows in applied_edits).
func applyEdits(p *parsed) editResult {
	total := len(p.system) + len(p.tools)
	turns := p.turns
	msgs := p.messages
	offset := 0
	if at := lastCompaction(p.turns); at.turn >= 0 {
		// The API ignores every block before the last compaction block.
		for _, b := range turns[at.turn].blocks[at.block:] {
			total += b.size
		}
		turns, msgs = turns[at.turn+1:], msgs[at.turn+1:]
		offset = at.turn + 1
	}
	for _, m := range msgs {
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
			cleared, bytes := clearThinking(turns, ed.keep)
			if n := len(cleared); n > 0 {
				freed += bytes
				res.applied = append(res.applied, AppliedEdit(ed.typ, int64(n), Tokens(bytes)))
				for _, i := range cleared {
					res.thinkingTurns = append(res.thinkingTurns, offset+i)
				}
			}
		case editClearToolUses:
			uses, bytes := clearToolUses(turns, ed, Tokens(total-freed))
			if n := len(uses); n > 0 {
				freed += bytes
				res.applied = append(res.applied, AppliedEdit(ed.typ, int64(n), Tokens(bytes)))
				res.clearedUses = append(res.clearedUses, uses...)
			}
		}
	}
	res.after = Tokens(total - freed)
	return res
}

// clearThinking drops thinking blocks of all but the last keep assistant
// turns (keep < 0: all kept). It returns the turns cleared (indexes into
// turns) and bytes freed.
func clearThinking(turns []turnFacts, keep int64) ([]int, int) {
	if keep < 0 {
		return nil, 0
	}
	var assistants []int
	for i, t := range turns {
		if t.role == "assistant" {
			assistants = append(assistants, i)
		}
	}
	clearable := len(assistants) - int(keep)
	var cleared []int
	bytes := 0
	for _, i := range assistants[:max(clearable, 0)] {
		n := 0
		for _, b := range turns[i].blocks {
			if b.typ == "thinking" || b.typ == "redacted_thinking" {
				n += b.size
			}
		}
		if n > 0 {
			cleared = append(cleared, i)
			bytes += n
		}
	}
	return cleared, bytes
}

type toolUse struct {
	id         string
	name       string
	inputLen   int
	resultLen  int
	cleared    bool
	inputEmpty bool
}

// isPlaceholder reports whether the raw value v is the string
// ClearedPlaceholder, without unescaping long tool results: an escaped
// spelling takes at most 6 bytes ("\u005b") per byte it stands for.
func isPlaceholder(v string) bool {
	if v == placeholderJSON {
		return true
	}
	if !isString(v) || len(v)-2 > 6*len(ClearedPlaceholder) || strings.IndexByte(v, '\\') < 0 {
		return false
	}
	return str(v) == ClearedPlaceholder
}

// resultFor is the raw content of the tool_result answering id in blocks
// (the last one, should there be several); "" when none does. Turns hold a
// handful of blocks, so a scan beats building a map.
func resultFor(blocks []blockFacts, id string) string {
	content := ""
	for _, b := range blocks {
		if b.typ == "tool_result" && str(b.toolUseID) == id {
			content = b.content
		}
	}
	return content
}

// clearToolUses applies one clear_tool_uses edit given the prompt's current
// token estimate; it returns the uses cleared and bytes freed.
func clearToolUses(turns []turnFacts, ed edit, current int64) ([]clearedUse, int) {
	var uses []toolUse
	for i, t := range turns {
		if t.role != "assistant" || i+1 >= len(turns) {
			continue
		}
		for _, b := range t.blocks {
			if b.typ != "tool_use" {
				continue
			}
			r := resultFor(turns[i+1].blocks, str(b.id))
			uses = append(uses, toolUse{
				id:         str(b.id),
				name:       str(b.name),
				inputLen:   len(b.input),
				inputEmpty: b.input == "{}",
				resultLen:  len(r),
				cleared:    isPlaceholder(r),
			})
		}
	}
	switch ed.triggerType {
	case "tool_uses":
		if int64(len(uses)) <= ed.triggerValue {
			return nil, 0
		}
	default:
		if current <= ed.triggerValue {
			return nil, 0
		}
	}
	var candidates []toolUse
	for _, u := range uses {
		if !slices.Contains(ed.exclude, u.name) {
			candidates = append(candidates, u)
		}
	}
	n := len(candidates) - int(ed.keep)
	var cleared []clearedUse
	bytes := 0
	for _, u := range candidates[:max(n, 0)] {
		if u.cleared {
			continue
		}
		c := clearedUse{id: u.id}
		bytes += max(u.resultLen-placeholderLen, 0)
		if (ed.inputsAll || slices.Contains(ed.inputsFor, u.name)) && !u.inputEmpty {
			bytes += max(u.inputLen-2, 0)
			c.input = true
		}
		cleared = append(cleared, c)
	}
	if len(cleared) == 0 || Tokens(bytes) < ed.clearAtLeast {
		return nil, 0
	}
	return cleared, bytes
}
