package fakeapi

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"
)

// cacheSummary is what must agree between a cached message and its
// accumulated stream, read through the Go SDK's types.
func cacheSummary(m *anthropic.BetaMessage) string {
	u := m.Usage
	d := "null"
	if m.JSON.Diagnostics.Valid() {
		d = "pending"
		if r := m.Diagnostics.CacheMissReason; m.Diagnostics.JSON.CacheMissReason.Valid() {
			d = fmt.Sprintf("%s/%d", r.Type, r.CacheMissedInputTokens)
		}
	}
	return fmt.Sprintf("in=%d read=%d create=%d (5m %d, 1h %d) out=%d diagnostics=%s", u.InputTokens, u.CacheReadInputTokens,
		u.CacheCreationInputTokens, u.CacheCreation.Ephemeral5mInputTokens, u.CacheCreation.Ephemeral1hInputTokens, u.OutputTokens, d)
}

func TestTheGoSDKReadsCacheUsageAndDiagnostics(t *testing.T) {
	f := newCacheFake(t, CacheOptions{})
	client := sdkClient(f.base)
	ctx := context.Background()
	params := func(model, prev string) anthropic.BetaMessageNewParams {
		p := anthropic.BetaMessageNewParams{
			Model: anthropic.Model(model), MaxTokens: 1024,
			System: []anthropic.BetaTextBlockParam{{Text: words(4000),
				CacheControl: anthropic.BetaCacheControlEphemeralParam{TTL: anthropic.BetaCacheControlEphemeralTTLTTL1h}}},
			CacheControl: anthropic.NewBetaCacheControlEphemeralParam(),
			Diagnostics:  anthropic.BetaDiagnosticsParam{PreviousMessageID: param.Null[string]()},
			Messages:     []anthropic.BetaMessageParam{anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock(words(2000)))},
		}
		if prev != "" {
			p.Diagnostics.PreviousMessageID = anthropic.String(prev)
		}
		return p
	}
	first, err := client.Beta.Messages.New(ctx, params("claude-test", ""))
	if err != nil {
		t.Fatal(err)
	}
	if got := cacheSummary(first); !strings.Contains(got, "read=0") || first.Usage.CacheCreation.Ephemeral1hInputTokens == 0 ||
		first.Usage.CacheCreation.Ephemeral5mInputTokens == 0 || !strings.HasSuffix(got, "diagnostics=null") {
		t.Errorf("first: %s", got)
	}
	plain, err := client.Beta.Messages.New(ctx, params("claude-other", first.ID))
	if err != nil {
		t.Fatal(err)
	}
	if got := cacheSummary(plain); !strings.Contains(got, "diagnostics=model_changed/") {
		t.Errorf("plain: %s", got)
	}
	stream := client.Beta.Messages.NewStreaming(ctx, params("claude-other", first.ID))
	var acc anthropic.BetaMessage
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	// The stream repeats the plain call, so it reads what the plain one wrote.
	want := cacheSummary(plain)
	want = strings.Replace(want, fmt.Sprintf("read=%d create=%d (5m %d, 1h %d)", plain.Usage.CacheReadInputTokens, plain.Usage.CacheCreationInputTokens,
		plain.Usage.CacheCreation.Ephemeral5mInputTokens, plain.Usage.CacheCreation.Ephemeral1hInputTokens),
		fmt.Sprintf("read=%d create=0 (5m 0, 1h 0)", plain.Usage.CacheReadInputTokens+plain.Usage.CacheCreationInputTokens), 1)
	if got := cacheSummary(&acc); got != want {
		t.Errorf("streamed %s\nwant     %s", got, want)
	}
}
