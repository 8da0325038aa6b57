package fakeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

func sdkClient(base string) *anthropic.Client {
	c := anthropic.NewClient(option.WithBaseURL(base), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	return &c
}

func sdkParams() anthropic.BetaMessageNewParams {
	return anthropic.BetaMessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 4096,
		Betas:     []anthropic.AnthropicBeta{anthropic.AnthropicBetaContextManagement2025_06_27},
		Thinking:  anthropic.BetaThinkingConfigParamUnion{OfEnabled: &anthropic.BetaThinkingConfigEnabledParam{BudgetTokens: 1024}},
		Messages:  []anthropic.BetaMessageParam{anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock("weather in Paris?"))},
	}
}

// summary is what must agree between a message and its accumulated stream.
func summary(m *anthropic.BetaMessage) string {
	var b strings.Builder
	fmt.Fprintf(&b, "id=%s model=%s stop=%s usage=%d/%d/%d/%d\n", m.ID, m.Model, m.StopReason,
		m.Usage.InputTokens, m.Usage.OutputTokens, m.Usage.CacheCreationInputTokens, m.Usage.CacheReadInputTokens)
	for _, c := range m.Content {
		in := ""
		if len(c.Input) > 0 {
			in = compactJSON(string(c.Input))
		}
		fmt.Fprintf(&b, "%s text=%q thinking=%q sig=%q data=%q id=%s name=%s input=%s\n", c.Type, c.Text, c.Thinking, c.Signature, c.Data, c.ID, c.Name, in)
	}
	for _, e := range m.ContextManagement.AppliedEdits {
		fmt.Fprintf(&b, "edit %s %d %d %d\n", e.Type, e.ClearedToolUses, e.ClearedThinkingTurns, e.ClearedInputTokens)
	}
	return b.String()
}

func TestTheGoSDKAccumulatesAStreamIntoTheSameMessage(t *testing.T) {
	api, base := newServer(t, WithTextChunks(5), WithOptions(Options{TextChunks: 5, PingEvery: 2}))
	api.Enqueue(richReply(), richReply())
	client := sdkClient(base)
	ctx := context.Background()

	plain, err := client.Beta.Messages.New(ctx, sdkParams())
	if err != nil {
		t.Fatal(err)
	}
	stream := client.Beta.Messages.NewStreaming(ctx, sdkParams())
	var acc anthropic.BetaMessage
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := summary(&acc), summary(plain); got != want {
		t.Errorf("streamed\n%s\nplain\n%s", got, want)
	}
	if len(plain.Content) != 5 || plain.ContextManagement.AppliedEdits[0].ClearedToolUses != 2 {
		t.Errorf("plain %s", summary(plain))
	}
	reqs := api.Requests()
	if len(reqs) != 2 || !reqs[1].Stream || reqs[0].Header.Get("Anthropic-Beta") != BetaContextManagement {
		t.Errorf("requests %+v", reqs)
	}
}

func TestTheGoSDKSeesAPIErrorsWithTheirType(t *testing.T) {
	api, base := newServer(t)
	api.Enqueue(RateLimited("3"))
	_, err := sdkClient(base).Beta.Messages.New(context.Background(), sdkParams())
	var apiErr *anthropic.Error
	if !asError(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Type() != "rate_limit_error" ||
		!strings.HasPrefix(apiErr.RequestID, "req_fake_") || apiErr.Response.Header.Get("Retry-After") != "3" {
		t.Fatalf("err %v", err)
	}
}

func TestTheGoSDKThreadRunsAgainstTheFake(t *testing.T) {
	api, base := newServer(t)
	api.Enqueue(TextReply("first"), TextReply("second"))
	client := sdkClient(base)
	thread := client.Beta.Messages.NewThread(anthropic.BetaMessageThreadCreateParams{
		Model: "claude-sonnet-4-5", MaxTokens: 1024,
		System: []anthropic.BetaTextBlockParam{{Text: "Be brief."}},
	})
	ctx := context.Background()
	for _, text := range []string{"one", "two"} {
		if _, err := thread.Send(ctx, anthropic.BetaMessageThreadSendParams{MaxTokens: 1024,
			Messages: []anthropic.BetaMessageParam{anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock(text))}}); err != nil {
			t.Fatal(err)
		}
	}
	reqs := api.Requests()
	if len(reqs) != 2 || reqs[0].Thread != "create" || reqs[1].Thread != "continue" || reqs[1].PreviousMessageID != reqs[0].ReplyID {
		t.Fatalf("requests %+v", reqs)
	}
	// The continue's conversation is the whole history.
	var roles []string
	for _, m := range reqs[1].Messages {
		var v struct{ Role string }
		_ = json.Unmarshal(m, &v)
		roles = append(roles, v.Role)
	}
	if strings.Join(roles, ",") != "user,assistant,user" || reqs[1].AssistantTurns != 1 {
		t.Errorf("resolved roles %v", roles)
	}
}
