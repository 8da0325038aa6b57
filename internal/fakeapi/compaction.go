package fakeapi

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/tidwall/gjson"
)

// Server-side compaction (the compaction reference).
const (
	// BetaCompact enables compact_20260112 (threshold compaction).
	BetaCompact = "compact-2026-01-12"
	// BetaCompactOnDemand enables the top-level compaction parameter.
	BetaCompactOnDemand = "compact-2026-09-04"
	// DefaultCompactTrigger is compact_20260112's trigger when the edit gives none.
	DefaultCompactTrigger = 150000
	// MinCompactTrigger is the lowest trigger the API takes.
	MinCompactTrigger = 50000
)

// compactSpec is a request's compaction: the compact_20260112 edit, or the
// on-demand top-level compaction.
type compactSpec struct {
	trigger      int64
	pause        bool
	instructions string
}

// compactionPos is where the conversation's last compaction block is: the
// API ignores every content block before it.
type compactionPos struct {
	turn, block int // -1 when there is none
}

func lastCompaction(turns []turnFacts) compactionPos {
	for i := len(turns) - 1; i >= 0; i-- {
		for j := len(turns[i].blocks) - 1; j >= 0; j-- {
			if turns[i].blocks[j].typ == "compaction" {
				return compactionPos{i, j}
			}
		}
	}
	return compactionPos{-1, -1}
}

// checkCompactionParam validates the top-level compaction (on-demand form).
func (p *parsed) checkCompactionParam(c gjson.Result) *reqError {
	if !slices.Contains(p.betas, BetaCompactOnDemand) {
		return badRequest("compaction: requires the anthropic-beta header %q", BetaCompactOnDemand)
	}
	if !c.IsObject() {
		return badRequest("compaction: Input should be an object")
	}
	if e := onlyFields(c, "compaction", "type", "instructions"); e != nil {
		return e
	}
	if c.Get("type").Str != "summarize" {
		return badRequest("compaction.type: Input should be 'summarize'")
	}
	in := c.Get("instructions")
	if in.Exists() && in.Type != gjson.Null && in.Type != gjson.String {
		return badRequest("compaction.instructions: Input should be a valid string")
	}
	if p.hasCM {
		return badRequest("compaction: cannot be combined with context_management")
	}
	p.onDemand = &compactSpec{instructions: in.Str}
	return nil
}

// checkThreadFeatures is the strict mode (Options.ThreadsRefuse): the API
// may refuse fields in threads with 400 thread_unsupported_request, listing
// them in error.details.unsupported (the API reference's message-threads section; unverified whether it
// does for context_management, hence switchable).
func (p *parsed) checkThreadFeatures(refuse []string, thinkingSet bool) *reqError {
	var unsupported []string
	if p.hasCM && slices.Contains(refuse, "context_management") {
		unsupported = append(unsupported, "context_management")
	}
	if thinkingSet && slices.Contains(refuse, "thinking") {
		unsupported = append(unsupported, "thinking")
	}
	if len(unsupported) == 0 {
		return nil
	}
	list, _ := json.Marshal(unsupported)
	return &reqError{400, &APIError{Type: "invalid_request_error",
		Message: fmt.Sprintf("thread: this request uses %s, which threads do not support; resend it without thread", unsupported),
		Details: json.RawMessage(`{"error_code":"thread_unsupported_request","unsupported":` + string(list) + `}`)}}
}

// checkCompactionBlock validates a compaction block of messages.i.content.j.
func checkCompactionBlock(b blockFacts, i, j int, needsEdit bool, p *parsed) *reqError {
	if b.content != "" && b.content != "null" && !isString(b.content) {
		return badRequest("messages.%d.content.%d.compaction.content: Input should be a valid string", i, j)
	}
	if b.content == `""` {
		return badRequest("messages.%d.content.%d.compaction.content: String should have at least 1 character", i, j)
	}
	signed := isString(b.signature) && b.signature != `""`
	if !signed {
		if needsEdit && p.compact == nil {
			// Switchable (Options.CompactionBlockNeedsEdit): a third party reports that
			// replayed blocks are refused without the strategy (the API reference's compaction section).
			return badRequest("messages.%d.content.%d: a compaction block requires the %s context management strategy", i, j, editCompact)
		}
		return nil
	}
	if i != 0 || j != 0 {
		return compactionError(400, "compaction_block_misplaced",
			fmt.Sprintf("messages.%d.content.%d: a signed compaction block must be the first block of the conversation", i, j))
	}
	if str(b.signature) != fakeSignature(str(b.content)) {
		return compactionError(400, "compaction_signature_invalid",
			fmt.Sprintf("messages.%d.content.%d.signature: does not match the compaction content", i, j))
	}
	if p.compact != nil {
		return badRequest("messages.0.content.0: a signed compaction block cannot be combined with the %s edit", editCompact)
	}
	return nil
}

func compactionError(status int, code, msg string) *reqError {
	return &reqError{status, &APIError{Type: "invalid_request_error", Message: msg,
		Details: json.RawMessage(`{"error_code":"` + code + `"}`)}}
}

// fakeSignature is the fake's signature over a summary (on-demand blocks).
func fakeSignature(content string) string {
	h := sha256.Sum256([]byte(content))
	return "fakesig_" + hex.EncodeToString(h[:12])
}

// compaction is what the fake's summarizing call produced.
type compaction struct {
	block     json.RawMessage
	iteration []byte // the usage.iterations entry of type compaction
	tokens    int64  // input tokens of the compaction block on later requests
}

// compact summarizes the conversation of p: the summary names how many
// messages and tokens it stands for, so tests can see what was compacted.
// in is the input side of the compaction iteration's usage (its cache
// fields when the cache model is on).
func compact(p *parsed, spec *compactSpec, in Usage, signed bool) compaction {
	inputTokens := in.InputTokens + in.CacheReadInputTokens + in.CacheCreationInputTokens
	summary := fmt.Sprintf("<summary>Summary of %d earlier messages (%d input tokens).", len(p.messages), inputTokens)
	if spec.instructions != "" {
		summary += " Instructions followed: " + spec.instructions
	}
	summary += "</summary>"
	b := []byte(`{"type":"compaction","content":`)
	b = jsonstr.Append(b, summary)
	b = append(b, `,"encrypted_content":`...)
	b = jsonstr.Append(b, base64.StdEncoding.EncodeToString([]byte("fake:"+strconv.Itoa(len(p.messages)))))
	if signed {
		b = append(b, `,"signature":`...)
		b = jsonstr.Append(b, fakeSignature(summary))
		b = append(b, `,"tool_changes":[]`...)
	}
	b = append(b, '}')
	in.OutputTokens = perCall(max(Tokens(len(summary)), 1), p.maxTokens)
	return compaction{
		block:     b,
		iteration: appendIteration(nil, "compaction", "", in),
		tokens:    Tokens(len(b)),
	}
}

// appendIteration appends one usage.iterations entry.
func appendIteration(b []byte, typ, model string, u Usage) []byte {
	b = append(b, `{"type":`...)
	b = jsonstr.Append(b, typ)
	if model != "" {
		b = append(b, `,"model":`...)
		b = jsonstr.Append(b, model)
	}
	b = append(b, `,"input_tokens":`...)
	b = strconv.AppendInt(b, u.InputTokens, 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, u.OutputTokens, 10)
	b = append(b, `,"cache_creation_input_tokens":`...)
	b = strconv.AppendInt(b, u.CacheCreationInputTokens, 10)
	b = append(b, `,"cache_read_input_tokens":`...)
	b = strconv.AppendInt(b, u.CacheReadInputTokens, 10)
	five, hour := u.CacheCreationInputTokens, int64(0)
	if c := u.CacheCreation; c != nil {
		five, hour = c.Ephemeral5m, c.Ephemeral1h
	}
	b = append(b, `,"cache_creation":{"ephemeral_5m_input_tokens":`...)
	b = strconv.AppendInt(b, five, 10)
	b = append(b, `,"ephemeral_1h_input_tokens":`...)
	b = strconv.AppendInt(b, hour, 10)
	return append(b, "}}"...)
}

// lastTurnTokens is the estimate of the conversation's last message.
func lastTurnTokens(p *parsed) int64 {
	if len(p.messages) == 0 {
		return 0
	}
	return Tokens(len(p.messages[len(p.messages)-1]))
}
