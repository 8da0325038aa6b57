package compat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/policy"
)

const model = "claude-sonnet-4-5"

func usage(in, out int64) *fakeapi.Usage {
	return &fakeapi.Usage{InputTokens: in, OutputTokens: out, CacheReadInputTokens: in / 10}
}

func userText(s string) anthropic.BetaMessageParam {
	return anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock(s))
}

var weatherTool = anthropic.BetaToolUnionParam{OfTool: &anthropic.BetaToolParam{
	Name:        "get_weather",
	Description: anthropic.String("Current weather of a city"),
	InputSchema: anthropic.BetaToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}},
}}

func baseParams(msgs ...anthropic.BetaMessageParam) anthropic.BetaMessageNewParams {
	return anthropic.BetaMessageNewParams{Model: model, MaxTokens: 4096, Messages: msgs}
}

func withThinking(p anthropic.BetaMessageNewParams) anthropic.BetaMessageNewParams {
	p.Thinking = anthropic.BetaThinkingConfigParamUnion{OfEnabled: &anthropic.BetaThinkingConfigEnabledParam{BudgetTokens: 1024}}
	return p
}

// weatherHistory is a conversation with three answered get_weather calls, so
// the agent tenant's clear_tool_uses (trigger: more than 2 tool uses, keep 1)
// clears two of them.
func weatherHistory(then string) []anthropic.BetaMessageParam {
	var msgs []anthropic.BetaMessageParam
	msgs = append(msgs, userText("What is the weather in Paris, Rome and Oslo?"))
	for i, city := range []string{"Paris", "Rome", "Oslo"} {
		id := fmt.Sprintf("toolu_hist_%d", i)
		msgs = append(msgs,
			anthropic.BetaMessageParam{OfAssistant: &anthropic.BetaAssistantMessageParam{Content: []anthropic.BetaContentBlockParamUnion{
				anthropic.NewBetaToolUseBlock(id, map[string]string{"city": city}, "get_weather"),
			}}},
			anthropic.NewBetaUserMessage(anthropic.NewBetaToolResultBlock(id, strings.Repeat(city+" is sunny, 21 degrees. ", 40), false)),
		)
	}
	last := msgs[len(msgs)-1].OfUser
	last.Content = append(last.Content, anthropic.NewBetaTextBlock(then))
	return msgs
}

// A reply shape: what the fake answers and what the client sends.
type shape struct {
	name   string
	script func() func(*fakeapi.Request) fakeapi.Reply
	params func() anthropic.BetaMessageNewParams
	// upstream calls one client request makes
	calls int
	// memory files the proxy must have written (path under the tenant dir → content)
	files map[string]string
	// check inspects the (non-streamed) message further
	check func(t *testing.T, m *anthropic.BetaMessage)
}

func shapes() []shape {
	script := func(turns ...fakeapi.Reply) func() func(*fakeapi.Request) fakeapi.Reply {
		return func() func(*fakeapi.Request) fakeapi.Reply { return fakeapi.Script(turns...) }
	}
	ask := func() anthropic.BetaMessageParam { return userText("I prefer green tea. Remember that.") }
	return []shape{
		{
			name:   "plain text",
			script: script(fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("Hello! How can I help you today?")}, Usage: usage(120, 12)}),
			params: func() anthropic.BetaMessageNewParams { return baseParams(userText("hi")) },
			calls:  1,
		},
		{
			name: "thinking then text",
			script: script(fakeapi.Reply{Content: []json.RawMessage{
				fakeapi.Thinking("The user greets me; answer briefly.", "sig_compat_1"),
				fakeapi.Text("Hi there."),
			}, Usage: usage(130, 40)}),
			params: func() anthropic.BetaMessageNewParams { return withThinking(baseParams(userText("hi"))) },
			calls:  1,
			check: func(t *testing.T, m *anthropic.BetaMessage) {
				if m.Content[0].Type != "thinking" || m.Content[0].Signature != "sig_compat_1" {
					t.Errorf("first block %s sig %q, want the thinking block with its signature", m.Content[0].Type, m.Content[0].Signature)
				}
			},
		},
		{
			name: "client tool use",
			script: script(fakeapi.Reply{Content: []json.RawMessage{
				fakeapi.Text("Checking the weather."),
				fakeapi.ToolUse("toolu_compat_weather", "get_weather", map[string]string{"city": "Paris"}),
			}, Usage: usage(200, 30)}),
			params: func() anthropic.BetaMessageNewParams {
				p := baseParams(userText("Weather in Paris?"))
				p.Tools = []anthropic.BetaToolUnionParam{weatherTool}
				return p
			},
			calls: 1,
			check: func(t *testing.T, m *anthropic.BetaMessage) {
				if m.StopReason != "tool_use" || m.Content[1].Name != "get_weather" {
					t.Errorf("stop %s content %+v, want the client's get_weather call", m.StopReason, m.Content)
				}
			},
		},
		{
			name: "memory loop",
			script: script(
				fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("Let me check my memory."), fakeapi.MemoryView("/memories")}, Usage: usage(100, 10)},
				fakeapi.Reply{Content: []json.RawMessage{fakeapi.MemoryCreate("/memories/preferences.md", "- drinks green tea\n")}, Usage: usage(200, 20)},
				fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("Noted: you prefer green tea.")}, Usage: usage(300, 30)},
			),
			params: func() anthropic.BetaMessageNewParams { return baseParams(ask()) },
			calls:  3,
			files:  map[string]string{"preferences.md": "- drinks green tea\n"},
			check: func(t *testing.T, m *anthropic.BetaMessage) {
				if m.Usage.InputTokens != 600 || m.Usage.OutputTokens != 60 {
					t.Errorf("usage %d/%d, want the loop's sum 600/60", m.Usage.InputTokens, m.Usage.OutputTokens)
				}
			},
		},
		{
			name: "memory loop with thinking",
			script: script(
				fakeapi.Reply{Content: []json.RawMessage{fakeapi.Thinking("I should look at my memory first.", "sig_m1"), fakeapi.MemoryView("/memories")}, Usage: usage(100, 10)},
				fakeapi.Reply{Content: []json.RawMessage{fakeapi.Thinking("Nothing there; save the preference.", "sig_m2"),
					fakeapi.MemoryCreate("/memories/preferences.md", "- drinks green tea\n")}, Usage: usage(200, 20)},
				fakeapi.Reply{Content: []json.RawMessage{fakeapi.Thinking("Saved.", "sig_m3"), fakeapi.Text("Noted: green tea.")}, Usage: usage(300, 30)},
			),
			params: func() anthropic.BetaMessageNewParams { return withThinking(baseParams(ask())) },
			calls:  3,
			files:  map[string]string{"preferences.md": "- drinks green tea\n"},
		},
		{
			name: "memory call mixed with a client tool",
			script: script(
				fakeapi.Reply{Content: []json.RawMessage{
					fakeapi.Text("Saving your city, then checking the weather."),
					fakeapi.MemoryCreate("/memories/city.md", "Paris\n"),
					fakeapi.ToolUse("toolu_compat_mixed", "get_weather", map[string]string{"city": "Paris"}),
				}, Usage: usage(150, 25)},
			),
			params: func() anthropic.BetaMessageNewParams {
				p := baseParams(userText("I live in Paris. Weather?"))
				p.Tools = []anthropic.BetaToolUnionParam{weatherTool}
				return p
			},
			calls: 1,
			files: map[string]string{"city.md": "Paris\n"},
			check: func(t *testing.T, m *anthropic.BetaMessage) {
				if m.StopReason != "tool_use" || len(m.Content) != 2 || m.Content[1].ID != "toolu_compat_mixed" {
					t.Errorf("stop %s content %+v, want text and the client's own call only", m.StopReason, m.Content)
				}
			},
		},
		{
			name:   "context editing applied",
			script: script(fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("Sunny everywhere.")}}),
			params: func() anthropic.BetaMessageNewParams {
				p := baseParams(weatherHistory("Summarise.")...)
				p.Tools = []anthropic.BetaToolUnionParam{weatherTool}
				return p
			},
			calls: 1,
			check: func(t *testing.T, m *anthropic.BetaMessage) {
				e := m.ContextManagement.AppliedEdits
				if len(e) != 1 || e[0].Type != "clear_tool_uses_20250919" || e[0].ClearedToolUses != 2 || e[0].ClearedInputTokens == 0 {
					t.Errorf("applied_edits %+v, want clear_tool_uses clearing 2", e)
				}
			},
		},
	}
}

// summary is everything the streamed and the non-streamed message must agree
// on: content, stop reason, usage, applied edits. Message ids differ.
func summary(m *anthropic.BetaMessage) string {
	var b strings.Builder
	fmt.Fprintf(&b, "role=%s model=%s stop=%s seq=%q\n", m.Role, m.Model, m.StopReason, m.StopSequence)
	fmt.Fprintf(&b, "usage in=%d out=%d cache_write=%d cache_read=%d\n", m.Usage.InputTokens, m.Usage.OutputTokens,
		m.Usage.CacheCreationInputTokens, m.Usage.CacheReadInputTokens)
	for i, c := range m.Content {
		fmt.Fprintf(&b, "block %d %s", i, c.Type)
		switch c.Type {
		case "text":
			fmt.Fprintf(&b, " text=%q", c.Text)
		case "thinking":
			fmt.Fprintf(&b, " thinking=%q signature=%q", c.Thinking, c.Signature)
		case "redacted_thinking":
			fmt.Fprintf(&b, " data=%q", c.Data)
		case "tool_use":
			fmt.Fprintf(&b, " id=%s name=%s input=%s", c.ID, c.Name, gjson.Parse(string(c.Input)).Get("@ugly").Raw)
		}
		b.WriteByte('\n')
	}
	for _, e := range m.ContextManagement.AppliedEdits {
		fmt.Fprintf(&b, "edit %s tool_uses=%d thinking_turns=%d input_tokens=%d\n", e.Type, e.ClearedToolUses, e.ClearedThinkingTurns, e.ClearedInputTokens)
	}
	// What the client would send back must be the same too.
	p, err := json.Marshal(m.ToParam())
	if err != nil {
		fmt.Fprintf(&b, "to_param error %v\n", err)
	}
	fmt.Fprintf(&b, "as param %s\n", p)
	return b.String()
}

// followUp is the next request of an agent that got m: m as the assistant
// turn, then a user turn answering its tool calls.
func followUp(p anthropic.BetaMessageNewParams, m *anthropic.BetaMessage) anthropic.BetaMessageNewParams {
	var results []anthropic.BetaContentBlockParamUnion
	for _, c := range m.Content {
		if c.Type == "tool_use" {
			results = append(results, anthropic.NewBetaToolResultBlock(c.ID, "12 degrees, cloudy", false))
		}
	}
	results = append(results, anthropic.NewBetaTextBlock("Thanks."))
	p.Messages = append(append([]anthropic.BetaMessageParam{}, p.Messages...), m.ToParam(), anthropic.NewBetaUserMessage(results...))
	return p
}

// run makes one client request of the shape, streamed or not, in a fresh
// proxy + fake, checks what must hold either way and sends the result back
// as the next turn.
func run(t *testing.T, sh shape, stream bool) *anthropic.BetaMessage {
	t.Helper()
	e := start(t, fakeapi.WithTextChunks(4), fakeapi.WithOptions(fakeapi.Options{TextChunks: 4, PingEvery: 3}))
	e.fake.SetResponder(sh.script())
	client := e.client(keyAgent)
	ctx := context.Background()
	params := sh.params()
	var msg *anthropic.BetaMessage
	if stream {
		s := client.Beta.Messages.NewStreaming(ctx, params)
		acc := anthropic.BetaMessage{}
		counts := map[string]int{}
		for s.Next() {
			ev := s.Current()
			counts[ev.Type]++
			if err := acc.Accumulate(ev); err != nil {
				t.Fatalf("accumulate %s: %v", ev.Type, err)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		if counts["message_start"] != 1 || counts["message_delta"] != 1 || counts["message_stop"] != 1 {
			t.Fatalf("events %v, want one message_start, message_delta and message_stop", counts)
		}
		if counts["content_block_start"] != len(acc.Content) || counts["content_block_stop"] != len(acc.Content) {
			t.Fatalf("events %v for %d blocks", counts, len(acc.Content))
		}
		msg = &acc
	} else {
		var err error
		if msg, err = client.Beta.Messages.New(ctx, params); err != nil {
			t.Fatalf("New: %v", err)
		}
	}
	if n := len(e.calls()); n != sh.calls {
		t.Errorf("upstream calls %d, want %d", n, sh.calls)
	}
	for _, c := range msg.Content {
		if c.Type == "tool_use" && c.Name == "memory" {
			t.Errorf("client received a memory tool_use it did not declare: %s", c.RawJSON())
		}
	}
	for rel, want := range sh.files {
		if got, ok := e.memFile("agent", rel); !ok || got != want {
			t.Errorf("memory file %s = %q (exists %v), want %q", rel, got, ok, want)
		}
	}
	if sh.check != nil {
		sh.check(t, msg)
	}

	// The agent's next turn: the message sent back unchanged is a request the
	// upstream accepts (tool_use/tool_result pairing, thinking signatures).
	e.fake.SetResponder(nil)
	before := len(e.calls())
	// The merged message of a memory loop carries thinking blocks made after
	// memory turns the client never saw; the API binds each to the
	// conversation before it and refuses a mismatch by default (binding is
	// always on in the fake, as in the API). The proxy gives the API the
	// turns it hid, so the follow-up passes with nothing dropped.
	next := followUp(params, msg)
	if _, err := client.Beta.Messages.New(ctx, next, option.WithMaxRetries(0)); err != nil {
		t.Fatalf("sending the message back as the next assistant turn: %v", err)
	}
	reqs := e.calls()
	last := reqs[len(reqs)-1]
	if len(reqs) != before+1 || last.Status != http.StatusOK {
		t.Fatalf("follow-up upstream requests %d → %d, last status %d", before, len(reqs), last.Status)
	}
	if len(last.InputTransformations) != 0 {
		t.Errorf("the follow-up's thinking blocks failed their binding: %+v", last.InputTransformations)
	}
	return msg
}

func TestTheSDKsStreamAccumulatesToTheNonStreamedMessage(t *testing.T) {
	for _, sh := range shapes() {
		t.Run(sh.name, func(t *testing.T) {
			plain := run(t, sh, false)
			streamed := run(t, sh, true)
			if got, want := summary(streamed), summary(plain); got != want {
				t.Errorf("streamed message differs from the non-streamed one\nstreamed:\n%s\nnon-streamed:\n%s", got, want)
			}
		})
	}
}

func TestBetaMessagesNewGoesThroughTheProxyRewritten(t *testing.T) {
	e := start(t)
	e.fake.Enqueue(fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("Hello from upstream.")}, Usage: usage(42, 7)})
	client := e.client(keyAgent)
	msg, err := client.Beta.Messages.New(context.Background(), baseParams(userText("hi")))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Content[0].Text != "Hello from upstream." || msg.StopReason != "end_turn" || msg.Usage.InputTokens != 42 || msg.Usage.OutputTokens != 7 {
		t.Fatalf("message %s", msg.RawJSON())
	}
	if !strings.HasPrefix(msg.ID, "msg_fake_") || msg.Model != model {
		t.Fatalf("id %s model %s", msg.ID, msg.Model)
	}
	req, _ := e.fake.LastRequest("/v1/messages")
	if got := req.Header.Get("Authorization"); got != "Bearer "+keyAgent {
		t.Errorf("upstream Authorization %q, want the SDK's key unchanged", got)
	}
	if !strings.Contains(req.Header.Get("Anthropic-Beta"), policy.BetaContextManagement) {
		t.Errorf("upstream anthropic-beta %q lacks %s", req.Header.Get("Anthropic-Beta"), policy.BetaContextManagement)
	}
	if req.Header.Get("X-Stainless-Lang") != "go" || req.Header.Get("Anthropic-Version") == "" {
		t.Errorf("SDK headers not passed on: %v", req.Header)
	}
	body := gjson.ParseBytes(req.Body)
	if body.Get(`tools.#(type=="memory_20250818").name`).Str != "memory" {
		t.Errorf("memory tool not added: %s", body.Get("tools").Raw)
	}
	if body.Get("context_management.edits.0.type").Str != "clear_tool_uses_20250919" ||
		body.Get("context_management.edits.0.exclude_tools").String() != `["memory"]` {
		t.Errorf("context_management %s", body.Get("context_management").Raw)
	}
}

func TestCountTokensThroughTheProxy(t *testing.T) {
	e := start(t)
	p := baseParams(weatherHistory("Summarise.")...)
	client := e.client(keyAgent)
	res, err := client.Beta.Messages.CountTokens(context.Background(), anthropic.BetaMessageCountTokensParams{
		Model:    p.Model,
		Messages: p.Messages,
		Tools:    []anthropic.BetaMessageCountTokensParamsToolUnion{{OfTool: weatherTool.OfTool}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The tenant's clear_tool_uses applies to count_tokens too: fewer tokens
	// after the edits than before.
	if res.InputTokens <= 0 || res.ContextManagement.OriginalInputTokens <= res.InputTokens {
		t.Fatalf("count_tokens %s, want input_tokens below original_input_tokens", res.RawJSON())
	}
	req, ok := e.fake.LastRequest("/v1/messages/count_tokens")
	if !ok || gjson.GetBytes(req.Body, "context_management.edits.0.type").Str != "clear_tool_uses_20250919" {
		t.Fatalf("upstream count_tokens body %s", req.Body)
	}
}

func TestAnUpstreamErrorReachesTheSDKAsItsErrorType(t *testing.T) {
	for _, tc := range []struct {
		status  int
		errType string
	}{
		{400, "invalid_request_error"},
		{401, "authentication_error"},
		{429, "rate_limit_error"},
		{529, "overloaded_error"},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			e := start(t)
			e.fake.Enqueue(fakeapi.ErrorReply(tc.status, tc.errType, "scripted "+tc.errType))
			client := e.client(keyAgent)
			_, err := client.Beta.Messages.New(context.Background(), baseParams(userText("hi")), option.WithMaxRetries(0))
			var apiErr *anthropic.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("error %T %v, want *anthropic.Error", err, err)
			}
			if apiErr.StatusCode != tc.status || string(apiErr.Type()) != tc.errType || apiErr.Message != "scripted "+tc.errType {
				t.Errorf("status %d type %s message %q", apiErr.StatusCode, apiErr.Type(), apiErr.Message)
			}
			// The request-id is the upstream's, passed through.
			if !strings.HasPrefix(apiErr.RequestID, "req_fake_") {
				t.Errorf("RequestID %q, want the upstream's req_fake_...", apiErr.RequestID)
			}
			if n := len(e.calls()); n != 1 {
				t.Errorf("upstream requests %d, want 1", n)
			}
		})
	}
}

func TestTheSDKsOwnRetriesOn529GoThrough(t *testing.T) {
	e := start(t)
	// retry-after-ms keeps the SDK's backoff short.
	overloaded := func() fakeapi.Reply {
		r := fakeapi.Overloaded()
		r.Header = http.Header{"Retry-After-Ms": {"10"}}
		return r
	}
	e.fake.Enqueue(overloaded(), overloaded(), fakeapi.TextReply("third time lucky"))
	client := e.client(keyAgent)
	msg, err := client.Beta.Messages.New(context.Background(), baseParams(userText("hi")))
	if err != nil {
		t.Fatalf("New after two 529s: %v", err)
	}
	if msg.Content[0].Text != "third time lucky" {
		t.Fatalf("message %s", msg.RawJSON())
	}
	reqs := e.calls()
	if len(reqs) != 3 {
		t.Fatalf("upstream requests %d, want 3 (the SDK's two retries)", len(reqs))
	}
	for i, r := range reqs {
		if got := r.Header.Get("X-Stainless-Retry-Count"); got != fmt.Sprint(i) {
			t.Errorf("request %d x-stainless-retry-count %q, want %d", i, got, i)
		}
	}
}
