package compat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/tidwall/gjson"
	"go.uber.org/zap/zaptest"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/stack"
)

// The API's cache diagnosis ctxproxy asks for (accounting.cache_diagnostics) never
// reaches the client. The same conversation goes through a tenant that asks ("asks") and one
// that does not ("quiet"), both clearing old tool results, against the fake with its prompt
// cache on; what the SDK hands the client must be the same bytes but for the reply ids.

const (
	keyAsks  = "sk-ant-compat-go-cache-asks"
	keyQuiet = "sk-ant-compat-go-cache-quiet"
)

const cacheClearing = `context_management:
  clear_tool_uses:
    trigger: { type: tool_uses, value: 2 }
    keep: { type: tool_uses, value: 1 }
`

// cacheStack is ctxproxy with the two tenants in front of the fake with its cache on (every
// prefix long enough to cache). Its replies are three calls of the tool "read", then text.
func cacheStack(t *testing.T) *env {
	t.Helper()
	fake := fakeapi.New(fakeapi.WithOptions(fakeapi.Options{TextChunks: 3, CacheOptions: fakeapi.CacheOptions{
		Cache: fakeapi.On, MinTokens: map[string]int64{model: 1}}}))
	s, err := stack.Start(stack.Config{Dir: t.TempDir(), Fake: fake, Log: zaptest.NewLogger(t), Policies: map[string]string{
		"default.yaml": stack.DefaultPolicy,
		"asks.yaml":    stack.TenantPolicy("asks", keyAsks, cacheClearing),
		"quiet.yaml":   stack.TenantPolicy("quiet", keyQuiet, cacheClearing+"accounting:\n  cache_diagnostics: false\n"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	s.Fake.SetResponder(func(r *fakeapi.Request) fakeapi.Reply {
		n := len(gjson.GetBytes(r.Body, "messages").Array()) / 2 // the assistant turns sent
		tag := strings.ReplaceAll(gjson.GetBytes(r.Body, "messages.0.content.0.text").Str, " ", "_")
		return fakeapi.Blocks(fakeapi.Text(fmt.Sprintf("step %d", n)),
			fakeapi.ToolUse(fmt.Sprintf("toolu_%s_%d", tag, n), "read", map[string]string{"step": fmt.Sprint(n)}))
	})
	return &env{fake: s.Fake, proxyURL: s.ProxyURL, memDir: s.MemoryDir, keys: s.Keys}
}

// sdkConversation is an SDK client resending its whole history with automatic caching
// (top-level cache_control), answering each tool use with 4,000 bytes.
type sdkConversation struct {
	client  anthropic.Client
	system  string
	stream  bool
	history []anthropic.BetaMessageParam
	got     []string // per call what the SDK handed over: the message's JSON, or each event's and the accumulated message's
}

func (c *sdkConversation) call(t *testing.T) {
	t.Helper()
	params := anthropic.BetaMessageNewParams{Model: model, MaxTokens: 1024, Messages: c.history,
		System: []anthropic.BetaTextBlockParam{{Text: c.system}}}
	cache := option.WithJSONSet("cache_control", map[string]string{"type": "ephemeral"})
	ctx := context.Background()
	var msg anthropic.BetaMessage
	var got strings.Builder
	if c.stream {
		s := c.client.Beta.Messages.NewStreaming(ctx, params, cache)
		for s.Next() {
			ev := s.Current()
			got.WriteString(ev.RawJSON() + "\n")
			if err := msg.Accumulate(ev); err != nil {
				t.Fatalf("accumulate %s: %v", ev.Type, err)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		b, err := json.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		got.Write(b)
	} else {
		m, err := c.client.Beta.Messages.New(ctx, params, cache)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		msg = *m
		got.WriteString(m.RawJSON())
	}
	c.got = append(c.got, got.String())
	var use anthropic.BetaToolUseBlock
	for _, b := range msg.Content {
		if b.Type == "tool_use" {
			use = b.AsToolUse()
		}
	}
	if use.ID == "" {
		t.Fatalf("reply without a tool use: %s", c.got[len(c.got)-1])
	}
	c.history = append(c.history, msg.ToParam(),
		anthropic.NewBetaUserMessage(anthropic.NewBetaToolResultBlock(use.ID, strings.Repeat("x", 4000), false)))
}

var replyIDs = regexp.MustCompile(`msg_[A-Za-z0-9_]+`)

// Through the Go SDK, plain and streamed, the system prompt changed on the fourth call so that
// the API has a diagnosis (system_changed) that ctxproxy must hide from the client.
func TestSDKSeesNoCacheDiagnosticsCtxproxyAskedFor(t *testing.T) {
	e := cacheStack(t)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			tag := fmt.Sprintf("same %v", stream)
			var asks, quiet *sdkConversation
			for _, p := range []**sdkConversation{&asks, &quiet} {
				key := keyAsks
				if p == &quiet {
					key = keyQuiet
				}
				*p = &sdkConversation{client: e.client(key), system: "You are a careful agent.", stream: stream,
					history: []anthropic.BetaMessageParam{userText(tag)}}
			}
			for i := range 5 {
				for _, c := range []*sdkConversation{asks, quiet} {
					if i == 3 {
						c.system = "You are a hasty agent."
					}
					c.call(t)
				}
			}
			for i := range asks.got {
				a, b := replyIDs.ReplaceAllString(asks.got[i], "msg_X"), replyIDs.ReplaceAllString(quiet.got[i], "msg_X")
				if a != b {
					t.Errorf("call %d: the SDK got with cache_diagnostics:\n%s\nwithout:\n%s", i+1, a, b)
				}
			}
			if !strings.Contains(asks.got[3], `"diagnostics":null`) {
				t.Errorf("call 4 has no diagnostics: null:\n%s", asks.got[3])
			}
		})
	}
	// The test means something only if ctxproxy asked, naming the previous reply after the first call.
	var asked, named int
	for _, r := range e.calls() {
		if gjson.GetBytes(r.Body, "diagnostics").Exists() {
			asked++
			if strings.HasPrefix(gjson.GetBytes(r.Body, "diagnostics.previous_message_id").Str, "msg_") {
				named++
			}
		}
	}
	if asked != 10 || named != 8 {
		t.Errorf("%d upstream calls asked the API's diagnosis, %d naming the previous reply; want the asking tenant's 10, 8", asked, named)
	}
}
