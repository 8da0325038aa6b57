package tracing

import (
	"go.opentelemetry.io/otel/attribute"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
)

// Attribute names: the GenAI semantic conventions' for Anthropic
// (docs/gen-ai/anthropic.md), and ctxproxy's own under "ctxproxy.".
const (
	AttrProviderName           = "gen_ai.provider.name"
	AttrOperationName          = "gen_ai.operation.name"
	AttrRequestModel           = "gen_ai.request.model"
	AttrRequestMaxTokens       = "gen_ai.request.max_tokens"
	AttrRequestStream          = "gen_ai.request.stream"
	AttrResponseID             = "gen_ai.response.id"
	AttrResponseModel          = "gen_ai.response.model"
	AttrResponseFinishReasons  = "gen_ai.response.finish_reasons"
	AttrConversationID         = "gen_ai.conversation.id"
	AttrUsageInputTokens       = "gen_ai.usage.input_tokens"
	AttrUsageOutputTokens      = "gen_ai.usage.output_tokens"
	AttrUsageCacheReadTokens   = "gen_ai.usage.cache_read.input_tokens"
	AttrUsageCacheCreateTokens = "gen_ai.usage.cache_creation.input_tokens"
	AttrErrorType              = "error.type"
	// Content, only for tenants whose policy opts in (tracing.content).
	AttrInputMessages  = "gen_ai.input.messages"
	AttrOutputMessages = "gen_ai.output.messages"
	AttrMemoryInput    = "ctxproxy.memory.input"

	AttrTenant       = "ctxproxy.tenant"
	AttrPolicyMode   = "ctxproxy.policy.mode"
	AttrEditsWritten = "ctxproxy.edits.written"
	// AttrEditsRefused names the edits the policy added that the upstream refused, on the
	// server span of a request resent without them.
	AttrEditsRefused = "ctxproxy.edits.refused"
	AttrAppliedEdits = "ctxproxy.edits.applied"
	// AttrInputTransformations is the reply's input_transformations, each type:reason.
	AttrInputTransformations = "ctxproxy.input_transformations"
	AttrClearedInputTokens   = "ctxproxy.cleared.input_tokens"
	AttrClearedToolUses      = "ctxproxy.cleared.tool_uses"
	AttrCostUSD              = "ctxproxy.cost_usd"
	AttrMemoryRound          = "ctxproxy.memory.round"
	AttrMemoryCommand        = "ctxproxy.memory.command"
	AttrMemoryResult         = "ctxproxy.memory.result"
	AttrMemoryBytes          = "ctxproxy.memory.bytes"
	AttrUpstreamStatus       = "http.response.status_code"
)

// OperationChat is gen_ai.operation.name of a Messages call.
const OperationChat = "chat"

// ChatRequest is what is known of an upstream call before it is sent.
type ChatRequest struct {
	Operation  string // default "chat"
	Model      string
	MaxTokens  int64
	Stream     bool
	Tenant     string
	PolicyMode string   // the tenant's context_management mode
	Edits      []string // edits the proxy wrote into the request
	Round      int      // memory-loop round, 0 for the client's own call
}

// ChatResponse is what the reply told of the call.
type ChatResponse struct {
	Status        int
	ID            string
	Model         string
	StopReason    string
	InputTokens   int64 // the API's input_tokens (uncached)
	OutputTokens  int64
	CacheRead     int64
	CacheCreation int64
	AppliedEdits  []string // context_management.applied_edits[].type
	// InputTransformations is input_transformations, each as type:reason.
	InputTransformations []string
	ClearedInput         int64
	ClearedTools         int64
	CostUSD              float64
	// OutputMessages is the reply's content (JSON), only when the tenant
	// opted in and the reply was not streamed.
	OutputMessages string
}

// EndChat records the reply on the span and ends it.
func (s Span) EndChat(r ChatResponse) {
	if s.Recording() {
		s.r.add(
			attribute.Int(AttrUpstreamStatus, r.Status),
			// The conventions count every input token, cached or not.
			attribute.Int64(AttrUsageInputTokens, r.InputTokens+r.CacheRead+r.CacheCreation),
			attribute.Int64(AttrUsageOutputTokens, r.OutputTokens),
			attribute.Int64(AttrUsageCacheReadTokens, r.CacheRead),
			attribute.Int64(AttrUsageCacheCreateTokens, r.CacheCreation),
			attribute.Int64(AttrClearedInputTokens, r.ClearedInput),
			attribute.Int64(AttrClearedToolUses, r.ClearedTools),
			attribute.Float64(AttrCostUSD, r.CostUSD),
		)
		if r.ID != "" {
			s.r.add(attribute.String(AttrResponseID, r.ID))
		}
		if r.Model != "" {
			s.r.add(attribute.String(AttrResponseModel, r.Model))
		}
		if r.StopReason != "" {
			s.r.setStrings(AttrResponseFinishReasons, []string{r.StopReason})
		}
		if len(r.AppliedEdits) > 0 {
			s.r.setStrings(AttrAppliedEdits, r.AppliedEdits)
		}
		if len(r.InputTransformations) > 0 {
			s.r.setStrings(AttrInputTransformations, r.InputTransformations)
		}
		if r.OutputMessages != "" {
			s.r.add(attribute.String(AttrOutputMessages, r.OutputMessages))
		}
		if r.Status >= 400 {
			s.Fail(apierr.Type(r.Status), "upstream answered an error")
		}
	}
	s.End()
}

// EndServer records the status the client got and the tenant, and ends the
// server span; a 5xx marks it failed.
func (s Span) EndServer(status int, tenant string) {
	if s.Recording() {
		s.r.add(attribute.Int(AttrUpstreamStatus, status), attribute.String(AttrTenant, tenant))
		if status >= 500 {
			s.Fail(apierr.Type(status), "request failed")
		}
	}
	s.End()
}

// SetInput records what the request says of its conversation on a chat
// span: the thread's previous_message_id (empty when not threaded) and the
// messages (JSON; empty unless the tenant opted into content). The caller
// reads them from the body only when Recording says they are kept.
func (s Span) SetInput(conversationID, messages string) {
	if !s.Recording() {
		return
	}
	if conversationID != "" {
		s.r.add(attribute.String(AttrConversationID, conversationID))
	}
	if messages != "" {
		// Not UTF-8 (the proxy leaves the messages' contents to the API to
		// validate), it is written with U+FFFD, as every string a span sends.
		s.r.add(attribute.String(AttrInputMessages, messages))
	}
}

// SetMemoryInput records a memory command's input (paths and text), for a
// tenant that opted into content in its traces.
func (s Span) SetMemoryInput(input []byte) {
	if s.Recording() { // the string is made only for a span that keeps it
		s.r.add(attribute.String(AttrMemoryInput, string(input)))
	}
}

// EndMemory records a memory command's outcome (never its content or a
// host path) and ends the span.
func (s Span) EndMemory(ok bool, bytes int) {
	if s.Recording() {
		result := "ok"
		if !ok {
			result = "error"
		}
		s.r.add(attribute.String(AttrMemoryResult, result), attribute.Int(AttrMemoryBytes, bytes))
	}
	s.End()
}
