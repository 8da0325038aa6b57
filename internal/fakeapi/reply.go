package fakeapi

import (
	"encoding/json"
	"net/http"
	"time"
)

// Reply is one scripted answer to POST /v1/messages. The same Reply is served
// as a JSON message or as an SSE stream, whichever the request asked for.
// The zero value is a valid reply: one text block "ok" with estimated usage.
type Reply struct {
	// ID of the message; "" generates msg_fake_....
	ID string
	// Model reported in the reply; "" echoes the request's model.
	Model string
	// Content blocks (build them with Text, Thinking, ToolUse, Memory...).
	// A tool_use block without an id gets a generated toolu_fake_... id.
	Content []json.RawMessage
	// StopReason; "" derives tool_use when a tool_use block is present, else end_turn.
	StopReason   string
	StopSequence string
	// Usage overrides the estimated usage when not nil.
	Usage *Usage
	// RawUsage, when set, is the reply's usage object exactly (iterations,
	// cache_creation, server_tool_use, service_tier...): in the JSON body and
	// message_delta as is, its input counts in message_start.
	RawUsage json.RawMessage
	// AppliedEdits overrides the computed context_management.applied_edits
	// when not nil (an empty, non-nil slice reports an empty list).
	AppliedEdits []json.RawMessage

	// Status and Error make this an error reply (Status defaults to the
	// usual status of Error.Type, Error defaults to the usual type of Status).
	Status int
	Error  *APIError
	// Header is added to the reply's headers (e.g. retry-after).
	Header http.Header

	// Delay before anything is written (headers included).
	Delay time.Duration
	// EventDelay between SSE events; 0 uses Options.EventDelay.
	EventDelay time.Duration
	// TextChunks: how many text_delta/thinking_delta/input_json_delta pieces a
	// block is split into; 0 uses Options.TextChunks.
	TextChunks int
	// CutAfter > 0 cuts the TCP connection after that many SSE events (pings
	// not counted). For a non-streaming reply it sends the headers and half
	// the body, then cuts.
	CutAfter int
	// Drop closes the connection before any byte of a reply is written.
	Drop bool
	// ErrorEvent is sent as `event: error` after ErrorAfter SSE events (pings
	// not counted), and the stream ends there. Ignored for non-streaming replies.
	ErrorEvent *APIError
	ErrorAfter int
	// Encoding forces a content-encoding of the reply ("gzip", "br", "zstd",
	// "identity"), whatever the request accepted; "" negotiates from
	// Accept-Encoding when Options.Compress is set.
	Encoding string
}

// APIError is the error object of the API's error shape
// {"type":"error","error":{"type":...,"message":...}}.
type APIError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	// Details is sent as error.details when not nil (e.g. {"error_code":"thread_not_found"}).
	Details json.RawMessage `json:"details,omitempty"`
	// unread: the body never arrived whole (cut upload, or refused unread):
	// no request reached the API, so none is recorded.
	unread bool
}

func (e *APIError) Error() string { return e.Type + ": " + e.Message }

// Usage is the usage object of a reply.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	// CacheCreation splits the writes by TTL; sent when not nil (always with
	// the cache model on), never in message_delta.
	CacheCreation *CacheCreation `json:"cache_creation,omitempty"`
}

// errorTypes maps a status to its error.type (the API reference's errors section).
var errorTypes = map[int]string{
	400: "invalid_request_error",
	401: "authentication_error",
	402: "billing_error",
	403: "permission_error",
	404: "not_found_error",
	405: "invalid_request_error",
	409: "conflict_error",
	413: "request_too_large",
	429: "rate_limit_error",
	500: "api_error",
	502: "api_error",
	503: "api_error",
	504: "timeout_error",
	529: "overloaded_error",
}

var errorStatus = map[string]int{
	"invalid_request_error": 400,
	"authentication_error":  401,
	"billing_error":         402,
	"permission_error":      403,
	"not_found_error":       404,
	"conflict_error":        409,
	"request_too_large":     413,
	"rate_limit_error":      429,
	"api_error":             500,
	"timeout_error":         504,
	"overloaded_error":      529,
}

var defaultErrorMessages = map[string]string{
	"rate_limit_error": "Number of request tokens has exceeded your per-minute rate limit",
	"overloaded_error": "Overloaded",
	"api_error":        "Internal server error",
	"timeout_error":    "Request timed out",
}

// errorParts reports whether r is an error reply, with its status and error filled in.
func (r *Reply) errorParts() (int, *APIError, bool) {
	if r.Status == 0 && r.Error == nil {
		return 0, nil, false
	}
	if r.Status >= 200 && r.Status < 300 && r.Error == nil {
		return 0, nil, false
	}
	st, e := r.Status, r.Error
	if e == nil {
		t := errorTypes[st]
		if t == "" {
			t = "api_error"
		}
		e = &APIError{Type: t, Message: defaultErrorMessages[t]}
		if e.Message == "" {
			e.Message = http.StatusText(st)
		}
	}
	if st == 0 {
		st = errorStatus[e.Type]
		if st == 0 {
			st = 500
		}
	}
	return st, e, true
}

// ErrorReply builds an error reply.
func ErrorReply(status int, errType, message string) Reply {
	return Reply{Status: status, Error: &APIError{Type: errType, Message: message}}
}

// RateLimited is a 429 rate_limit_error reply with retry-after (seconds).
func RateLimited(retryAfter string) Reply {
	r := ErrorReply(429, "rate_limit_error", defaultErrorMessages["rate_limit_error"])
	r.Header = http.Header{"Retry-After": {retryAfter}}
	return r
}

// Overloaded is a 529 overloaded_error reply.
func Overloaded() Reply { return ErrorReply(529, "overloaded_error", "Overloaded") }

// TextReply is a reply made of text blocks.
func TextReply(texts ...string) Reply {
	r := Reply{}
	for _, t := range texts {
		r.Content = append(r.Content, Text(t))
	}
	return r
}

// Blocks is a reply made of the given content blocks.
func Blocks(blocks ...json.RawMessage) Reply { return Reply{Content: blocks} }

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("fakeapi: " + err.Error())
	}
	return b
}

// Text is a text content block.
func Text(s string) json.RawMessage {
	return mustJSON(struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{"text", s})
}

// Thinking is a thinking content block with its signature.
func Thinking(thinking, signature string) json.RawMessage {
	return mustJSON(struct {
		Type      string `json:"type"`
		Thinking  string `json:"thinking"`
		Signature string `json:"signature"`
	}{"thinking", thinking, signature})
}

// RedactedThinking is a redacted_thinking content block.
func RedactedThinking(data string) json.RawMessage {
	return mustJSON(struct {
		Type string `json:"type"`
		Data string `json:"data"`
	}{"redacted_thinking", data})
}

// ToolUse is a tool_use content block. id "" is generated when served.
// input is marshalled with encoding/json (a json.RawMessage goes as is);
// nil means {}.
func ToolUse(id, name string, input any) json.RawMessage {
	var in json.RawMessage
	switch v := input.(type) {
	case nil:
		in = json.RawMessage(`{}`)
	case json.RawMessage:
		in = v
	default:
		in = mustJSON(v)
	}
	return mustJSON(struct {
		Type  string          `json:"type"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}{"tool_use", id, name, in})
}

// Memory is a tool_use block calling the memory tool with input (a map or
// struct with the command's fields, see the API reference's memory-tool section).
func Memory(input any) json.RawMessage { return ToolUse("", "memory", input) }

// MemoryView calls the memory tool's view command; viewRange is optional [start, end].
func MemoryView(path string, viewRange ...int) json.RawMessage {
	in := map[string]any{"command": "view", "path": path}
	if len(viewRange) == 2 {
		in["view_range"] = viewRange
	}
	return Memory(in)
}

// MemoryCreate calls the memory tool's create command.
func MemoryCreate(path, fileText string) json.RawMessage {
	return Memory(map[string]any{"command": "create", "path": path, "file_text": fileText})
}

// MemoryStrReplace calls the memory tool's str_replace command.
func MemoryStrReplace(path, oldStr, newStr string) json.RawMessage {
	return Memory(map[string]any{"command": "str_replace", "path": path, "old_str": oldStr, "new_str": newStr})
}

// MemoryInsert calls the memory tool's insert command.
func MemoryInsert(path string, line int, text string) json.RawMessage {
	return Memory(map[string]any{"command": "insert", "path": path, "insert_line": line, "insert_text": text})
}

// MemoryDelete calls the memory tool's delete command.
func MemoryDelete(path string) json.RawMessage {
	return Memory(map[string]any{"command": "delete", "path": path})
}

// MemoryRename calls the memory tool's rename command.
func MemoryRename(oldPath, newPath string) json.RawMessage {
	return Memory(map[string]any{"command": "rename", "old_path": oldPath, "new_path": newPath})
}

// AppliedEdit builds one applied_edits entry: cleared counts the tool uses
// (clear_tool_uses_20250919) or thinking turns (clear_thinking_20251015).
func AppliedEdit(editType string, cleared, clearedInputTokens int64) json.RawMessage {
	field := "cleared_tool_uses"
	if editType == editClearThinking {
		field = "cleared_thinking_turns"
	}
	return json.RawMessage(`{"type":` + string(mustJSON(editType)) + `,"` + field + `":` +
		itoa(cleared) + `,"cleared_input_tokens":` + itoa(clearedInputTokens) + `}`)
}

// Script returns a responder that answers by conversation position: turn N
// (0-based) is served when the (thread-resolved) conversation holds N
// assistant turns. Past the end the last turn repeats. Because it looks only
// at the request, one Script serves any number of concurrent agents
// deterministically. With no turns it serves the default reply.
func Script(turns ...Reply) func(*Request) Reply {
	return func(r *Request) Reply {
		if len(turns) == 0 {
			return Reply{}
		}
		n := r.AssistantTurns
		if n >= len(turns) {
			n = len(turns) - 1
		}
		return turns[n]
	}
}
