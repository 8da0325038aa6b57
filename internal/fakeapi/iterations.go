package fakeapi

import (
	"strings"

	"github.com/tidwall/gjson"
)

// max_tokens bounds each call to the model, not the request (the December 2026 API
// reference's max_tokens section): a request that uses server tools calls the model again after each
// server tool result, so its usage.output_tokens can exceed max_tokens.
//
// The fake models that loop on a reply whose content holds server tool
// results (blocks of a type ending in _tool_result, which the server writes,
// such as web_search_tool_result): each result ends one model call and the
// next call reads everything before it. Each call's estimated output is
// bounded by max_tokens (the compaction call's too), usage.iterations lists
// one message entry per call, and the top-level usage is their sum. A reply
// whose usage is scripted is served as scripted.

// isServerToolResult reports whether a block of type typ is written by the
// server rather than the model.
func isServerToolResult(typ string) bool {
	return strings.HasSuffix(typ, "_tool_result") && typ != "tool_result"
}

// perCall bounds one model call's output tokens by max_tokens.
func perCall(out, maxTokens int64) int64 {
	if maxTokens > 0 {
		return min(out, maxTokens)
	}
	return out
}

// splitCalls turns the estimated usage of a reply with server tool results
// into one usage per model call. It runs after applyCompaction, whose
// iterations it keeps apart from the message entry it replaces.
func (m *message) splitCalls(p *parsed, rep *Reply) {
	if rep.Usage != nil || len(m.rawUsage) > 0 || m.stop == "compaction" {
		return
	}
	blocks := m.blocks
	if len(blocks) > 0 && gjson.Get(view(blocks[0]), "type").Str == "compaction" {
		blocks = blocks[1:]
	}
	base := m.usage
	var calls []Usage
	in, wrote, read := base.InputTokens, 0, 0
	for _, b := range blocks {
		read += len(b)
		if !isServerToolResult(gjson.Get(view(b), "type").Str) {
			wrote += len(b)
			continue
		}
		calls = append(calls, Usage{InputTokens: in, OutputTokens: perCall(max(Tokens(wrote), 1), p.maxTokens)})
		in, wrote = base.InputTokens+Tokens(read), 0
	}
	if len(calls) == 0 {
		return // one call: nothing to split
	}
	calls = append(calls, Usage{InputTokens: in, OutputTokens: perCall(max(Tokens(wrote), 1), p.maxTokens)})
	// The cache counts belong to the first call, which read the request
	// (later calls' own cache use is not modelled).
	calls[0].CacheCreationInputTokens, calls[0].CacheReadInputTokens = base.CacheCreationInputTokens, base.CacheReadInputTokens
	calls[0].CacheCreation = base.CacheCreation
	sum := Usage{CacheCreationInputTokens: base.CacheCreationInputTokens, CacheReadInputTokens: base.CacheReadInputTokens,
		CacheCreation: base.CacheCreation}
	it := []byte{'['}
	for _, r := range gjson.ParseBytes(m.iterations).Array() {
		if r.Get("type").Str != "message" {
			it = append(append(it, r.Raw...), ',')
		}
	}
	for i, c := range calls {
		sum.InputTokens += c.InputTokens
		sum.OutputTokens += c.OutputTokens
		if i > 0 {
			it = append(it, ',')
		}
		it = appendIteration(it, "message", m.model, c)
	}
	m.usage, m.iterations = sum, append(it, ']')
}
