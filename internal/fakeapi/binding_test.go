package fakeapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/tidwall/gjson"
)

func userSays(s string) string { return `{"role":"user","content":` + string(mustJSON(s)) + `}` }

func assistantSaid(content string) string { return `{"role":"assistant","content":` + content + `}` }

func toolResult(id, text string) string {
	return `{"role":"user","content":[{"type":"tool_result","tool_use_id":` + string(mustJSON(id)) + `,"content":` + string(mustJSON(text)) + `}]}`
}

// thinkingBody is a request to claude-opus-4-8 with adaptive thinking and
// the given prefix_mismatch_behavior ("" for the default).
func thinkingBody(behavior string, messages ...string) string {
	th := `{"type":"adaptive"}`
	if behavior != "" {
		th = `{"type":"adaptive","block_binding":{"prefix_mismatch_behavior":"` + behavior + `"}}`
	}
	return body(`{"model":"claude-opus-4-8","thinking":` + th + `,"tools":[` + toolA + `,` + memoryTool + `],"messages":[` + strings.Join(messages, ",") + `]}`)
}

var bindingBeta = map[string]string{"Anthropic-Beta": defaultBetas + "," + BetaThinkingBinding}

// turn sends one request and returns the reply's content array.
func turn(t *testing.T, base string, header map[string]string, b string) string {
	t.Helper()
	resp, out := do(t, base, call{body: b, header: header})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	return gjson.GetBytes(out, "content").Raw
}

var (
	think1 = Thinking("The user greets me.", "sig_t1")
	think2 = Thinking("The memory is empty; answer.", "sig_t2")
)

func transforms(out []byte) string { return gjson.GetBytes(out, "input_transformations").Raw }

func TestThinkingBlockBinding(t *testing.T) {
	type check struct {
		status     int
		message    string // substring of error.message
		transforms string // input_transformations as served ("" = absent)
	}
	cases := []struct {
		name   string
		opts   December
		header map[string]string // of the second request (the first uses bindingBeta)
		// second builds the second request from the first reply's content.
		second func(content string) string
		want   check
	}{
		{name: "a block sent back with its conversation passes, reported as []",
			second: func(c string) string { return thinkingBody("", userSays("hi"), assistantSaid(c), userSays("thanks")) },
			want:   check{status: 200, transforms: `[]`}},
		{name: "key order, whitespace, cache_control and a string versus a text block do not matter",
			second: func(c string) string {
				var blocks []map[string]any
				_ = json.Unmarshal([]byte(c), &blocks)
				reordered, _ := json.MarshalIndent(blocks, "", "  ") // encoding/json sorts the keys
				return thinkingBody("", `{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}`,
					assistantSaid(string(reordered)), userSays("thanks"))
			},
			want: check{status: 200, transforms: `[]`}},
		{name: "an earlier message changed since: 400 by default",
			second: func(c string) string {
				return thinkingBody("", userSays("hello"), assistantSaid(c), userSays("thanks"))
			},
			want: check{status: 400, message: "messages.1.content.0: this thinking block failed its binding check (prefix_binding_mismatch)"}},
		{name: "an earlier message changed since, with drop_block: dropped and reported",
			second: func(c string) string {
				return thinkingBody("drop_block", userSays("hello"), assistantSaid(c), userSays("thanks"))
			},
			want: check{status: 200, transforms: `[{"type":"thinking_dropped","path":"messages.1.content.0","reason":"prefix_binding_mismatch"}]`}},
		{name: "a prefix drop takes the rest of the turn's consecutive thinking blocks, even one the fake never wrote",
			second: func(c string) string {
				blocks := gjson.Parse(c).Array()
				c = "[" + string(RedactedThinking("not-ours")) + "," + blocks[0].Raw + "," + string(RedactedThinking("not-ours-either")) + "," + blocks[1].Raw + "]"
				return thinkingBody("drop_block", userSays("hello"), assistantSaid(c), userSays("thanks"))
			},
			// [R0 (unknown, passes), T1 (fails), R2 (goes with it), text]
			want: check{status: 200, transforms: `[{"type":"thinking_dropped","path":"messages.1.content.1","reason":"prefix_binding_mismatch"},` +
				`{"type":"thinking_dropped","path":"messages.1.content.2","reason":"prefix_binding_mismatch"}]`}},
		{name: "without the beta nothing is reported, and the block is still dropped",
			header: map[string]string{"Anthropic-Beta": defaultBetas},
			second: func(c string) string {
				return thinkingBody("drop_block", userSays("hello"), assistantSaid(c), userSays("thanks"))
			},
			want: check{status: 200}},
		{name: "another organization's block is dropped even under error",
			header: map[string]string{"X-Api-Key": "sk-other", "Anthropic-Beta": bindingBeta["Anthropic-Beta"]},
			second: func(c string) string { return thinkingBody("", userSays("hi"), assistantSaid(c), userSays("thanks")) },
			want:   check{status: 200, transforms: `[{"type":"thinking_dropped","path":"messages.1.content.0","reason":"organization_binding_mismatch"}]`}},
		{name: "two credentials of one organization share their blocks",
			opts:   December{Organizations: map[string]string{"sk-test": "org_1", "sk-other": "org_1"}},
			header: map[string]string{"X-Api-Key": "sk-other", "Anthropic-Beta": bindingBeta["Anthropic-Beta"]},
			second: func(c string) string { return thinkingBody("", userSays("hi"), assistantSaid(c), userSays("thanks")) },
			want:   check{status: 200, transforms: `[]`}},
		{name: "the organization check comes before the prefix check",
			header: map[string]string{"X-Api-Key": "sk-other", "Anthropic-Beta": bindingBeta["Anthropic-Beta"]},
			second: func(c string) string {
				return thinkingBody("", userSays("hello"), assistantSaid(c), userSays("thanks"))
			},
			want: check{status: 200, transforms: `[{"type":"thinking_dropped","path":"messages.1.content.0","reason":"organization_binding_mismatch"}]`}},
		{name: "another end user's block is dropped",
			header: map[string]string{HeaderUserProfile: "uprof_2", "Anthropic-Beta": bindingBeta["Anthropic-Beta"]},
			second: func(c string) string { return thinkingBody("", userSays("hi"), assistantSaid(c), userSays("thanks")) },
			want:   check{status: 200, transforms: `[{"type":"thinking_dropped","path":"messages.1.content.0","reason":"end_user_binding_mismatch"}]`}},
		{name: "with EndUser metadata_user_id the end user is metadata.user_id",
			opts: December{EndUser: EndUserMetadata},
			second: func(c string) string {
				return strings.Replace(thinkingBody("", userSays("hi"), assistantSaid(c), userSays("thanks")), `{`, `{"metadata":{"user_id":"u2"},`, 1)
			},
			want: check{status: 200, transforms: `[{"type":"thinking_dropped","path":"messages.1.content.0","reason":"end_user_binding_mismatch"}]`}},
		{name: "another model's block is dropped",
			second: func(c string) string {
				return strings.Replace(thinkingBody("", userSays("hi"), assistantSaid(c), userSays("thanks")), "claude-opus-4-8", "claude-opus-5", 1)
			},
			want: check{status: 200, transforms: `[{"type":"thinking_dropped","path":"messages.1.content.0","reason":"model_binding_mismatch"}]`}},
		{name: "BindingMismatchRefuses refuses another model's block",
			opts: December{BindingMismatchRefuses: true},
			second: func(c string) string {
				return strings.Replace(thinkingBody("", userSays("hi"), assistantSaid(c), userSays("thanks")), "claude-opus-4-8", "claude-opus-5", 1)
			},
			want: check{status: 400, message: "model_binding_mismatch"}},
		{name: "on a model that does not enforce the prefix the block stays, reported as thinking_mismatch_allowed",
			opts: December{PrefixBindingUnenforced: []string{"claude-opus-4-8"}},
			second: func(c string) string {
				return thinkingBody("", userSays("hello"), assistantSaid(c), userSays("thanks"))
			},
			want: check{status: 200, transforms: `[{"type":"thinking_mismatch_allowed","path":"messages.1.content.0","reason":"prefix_binding_mismatch"}]`}},
		{name: "a block the fake never wrote passes",
			second: func(string) string {
				return thinkingBody("", userSays("hello"), assistantSaid(`[`+string(Thinking("forged", "sig_x"))+`,{"type":"text","text":"x"}]`), userSays("thanks"))
			},
			want: check{status: 200, transforms: `[]`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			api, base := newServer(t, WithOptions(Options{December: c.opts}))
			api.Enqueue(Blocks(think1, Text("Hello!")), TextReply("You're welcome."))
			content := turn(t, base, bindingBeta, thinkingBody("", userSays("hi")))
			header := c.header
			if header == nil {
				header = bindingBeta
			}
			resp, out := do(t, base, call{body: c.second(content), header: header})
			if resp.StatusCode != c.want.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.want.status, out)
			}
			if !strings.Contains(gjson.GetBytes(out, "error.message").Str, c.want.message) {
				t.Errorf("message %s, want %q", out, c.want.message)
			}
			if got := transforms(out); got != c.want.transforms {
				t.Errorf("input_transformations %s, want %s", got, c.want.transforms)
			}
			last, _ := api.LastRequest("/v1/messages")
			if c.want.status == 200 && c.want.transforms == "" {
				// Not reported, but recorded: the test sees what happened.
				if len(last.InputTransformations) != 1 || last.InputTransformations[0].Type != TransformThinkingDropped {
					t.Errorf("recorded %+v", last.InputTransformations)
				}
			}
		})
	}
}

func TestADroppedBlockLeavesThePromptAndNotTheRecord(t *testing.T) {
	api, base := newServer(t)
	api.Enqueue(Blocks(think1, Text("Hello!")))
	content := turn(t, base, bindingBeta, thinkingBody("", userSays("hi")))
	dropped := thinkingBody("drop_block", userSays("hello"), assistantSaid(content), userSays("thanks"))
	without := thinkingBody("drop_block", userSays("hello"), assistantSaid(`[{"type":"text","text":"Hello!"}]`), userSays("thanks"))
	_, a := do(t, base, call{body: dropped, header: bindingBeta})
	_, b := do(t, base, call{body: without, header: bindingBeta})
	if ua, ub := gjson.GetBytes(a, "usage.input_tokens").Int(), gjson.GetBytes(b, "usage.input_tokens").Int(); ua != ub || ua == 0 {
		t.Errorf("input_tokens %d with the dropped block, %d without it: a removed block must add nothing", ua, ub)
	}
	reqs := api.Requests()
	if got := gjson.GetBytes(reqs[1].Messages[1], "content.0.type").Str; got != "thinking" {
		t.Errorf("the recorded conversation is the one sent; content.0 is %q", got)
	}
}

// The memory splice: a proxy running the model's memory calls itself hands
// its client one merged assistant message without them. The block of the
// later round was made after the tool_use/tool_result turns, which the
// client never sends back.
func TestAMergedToolLoopFailsTheLaterBlocksPrefix(t *testing.T) {
	setup := func(t *testing.T) (string, string, string) {
		api, base := newServer(t)
		api.SetResponder(Script(
			Blocks(think1, ToolUse("toolu_mem", "memory", map[string]any{"command": "view", "path": "/memories"})),
			Blocks(think2, Text("Hello!")),
			TextReply("ok"),
		))
		c1 := turn(t, base, bindingBeta, thinkingBody("", userSays("hi")))
		c2 := turn(t, base, bindingBeta, thinkingBody("", userSays("hi"), assistantSaid(c1), toolResult("toolu_mem", "empty")))
		var merged []json.RawMessage
		for _, c := range []string{c1, c2} {
			for _, b := range gjson.Parse(c).Array() {
				if b.Get("type").Str != "tool_use" {
					merged = append(merged, json.RawMessage(b.Raw))
				}
			}
		}
		return base, string(mustJSON(merged)), c1 + "\x00" + c2
	}
	t.Run("the turns as the model made them pass", func(t *testing.T) {
		base, _, both := setup(t)
		c1, c2, _ := strings.Cut(both, "\x00")
		resp, out := do(t, base, call{header: bindingBeta,
			body: thinkingBody("", userSays("hi"), assistantSaid(c1), toolResult("toolu_mem", "empty"), assistantSaid(c2), userSays("thanks"))})
		if resp.StatusCode != 200 || transforms(out) != "[]" {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
	})
	t.Run("the merged message is refused by default at the later block", func(t *testing.T) {
		base, merged, _ := setup(t)
		resp, out := do(t, base, call{header: bindingBeta, body: thinkingBody("", userSays("hi"), assistantSaid(merged), userSays("thanks"))})
		if resp.StatusCode != 400 || !strings.Contains(string(out), "messages.1.content.1: this thinking block failed its binding check (prefix_binding_mismatch)") {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
	})
	t.Run("with drop_block the later block is dropped and the first kept", func(t *testing.T) {
		base, merged, _ := setup(t)
		resp, out := do(t, base, call{header: bindingBeta, body: thinkingBody("drop_block", userSays("hi"), assistantSaid(merged), userSays("thanks"))})
		if want := `[{"type":"thinking_dropped","path":"messages.1.content.1","reason":"prefix_binding_mismatch"}]`; resp.StatusCode != 200 || transforms(out) != want {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
	})
}

func TestBindingAcrossThreadsCompactionAndStreams(t *testing.T) {
	t.Run("a thread continue passes, and its reply is bound for a full replay", func(t *testing.T) {
		api, base := newServer(t)
		api.Enqueue(Blocks(think1, ToolUse("toolu_1", "get_weather", nil)), Blocks(think2, Text("Sunny.")), TextReply("ok"))
		thread := `,"thread":{"type":"create"}}`
		first := strings.TrimSuffix(thinkingBody("", userSays("weather?")), "}") + thread
		_, out := do(t, base, call{body: first, header: bindingBeta})
		id, c1 := gjson.GetBytes(out, "id").Str, gjson.GetBytes(out, "content").Raw
		cont := body(`{"model":"claude-opus-4-8","thinking":{"type":"adaptive"},"thread":{"type":"continue","previous_message_id":"` + id + `"},"messages":[` + toolResult("toolu_1", "sunny") + `]}`)
		resp, out := do(t, base, call{body: cont, header: bindingBeta})
		if resp.StatusCode != 200 || transforms(out) != "[]" {
			t.Fatalf("continue: %d %s", resp.StatusCode, out)
		}
		c2 := gjson.GetBytes(out, "content").Raw
		resp, out = do(t, base, call{header: bindingBeta, body: thinkingBody("",
			userSays("weather?"), assistantSaid(c1), toolResult("toolu_1", "sunny"), assistantSaid(c2), userSays("thanks"))})
		if resp.StatusCode != 200 || transforms(out) != "[]" {
			t.Fatalf("replay: %d %s", resp.StatusCode, out)
		}
	})
	t.Run("messages before a compaction block do not count", func(t *testing.T) {
		api, base := newServer(t)
		api.Enqueue(Blocks(think1, Text("Summarised and answered.")), TextReply("ok"), TextReply("ok"))
		big := strings.Repeat("log line ", 30000)
		edit := `"context_management":{"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens","value":50000}}]}`
		withEdit := func(b string) string { return strings.TrimSuffix(b, "}") + "," + edit + "}" }
		c := turn(t, base, bindingBeta, withEdit(thinkingBody("", userSays(big))))
		if gjson.Get(c, "0.type").Str != "compaction" || gjson.Get(c, "1.type").Str != "thinking" {
			t.Fatalf("reply %.300s", c)
		}
		for _, first := range []string{big, "a client that dropped what the summary replaces"} {
			resp, out := do(t, base, call{header: bindingBeta, body: withEdit(thinkingBody("", userSays(first), assistantSaid(c), userSays("thanks")))})
			if resp.StatusCode != 200 || transforms(out) != "[]" {
				t.Fatalf("%d %.300s", resp.StatusCode, out)
			}
		}
	})
	t.Run("a stream reports input_transformations in message_start", func(t *testing.T) {
		api, base := newServer(t)
		api.Enqueue(Blocks(think1, Text("Hello!")), TextReply("ok"))
		c := turn(t, base, bindingBeta, thinkingBody("", userSays("hi")))
		stream := strings.TrimSuffix(thinkingBody("drop_block", userSays("hello"), assistantSaid(c), userSays("thanks")), "}") + `,"stream":true}`
		_, out := do(t, base, call{body: stream, header: bindingBeta})
		evs, err := parseSSE(t, strings.NewReader(string(out)))
		if err != nil {
			t.Fatal(err)
		}
		start := gjson.Get(evs[0].data, "message.input_transformations").Raw
		if start != `[{"type":"thinking_dropped","path":"messages.1.content.0","reason":"prefix_binding_mismatch"}]` {
			t.Errorf("message_start %s", evs[0].data)
		}
		for _, e := range evs[1:] {
			if gjson.Get(e.data, "input_transformations").Exists() {
				t.Errorf("%s carries input_transformations without a fallback: %s", e.name, e.data)
			}
		}
	})
	t.Run("a streamed block is bound as the client accumulates it", func(t *testing.T) {
		api, base := newServer(t)
		api.Enqueue(Blocks(think1, Text("Let me look."), ToolUse("toolu_s", "get_weather", map[string]any{"city": "Paris", "days": []int{1, 2}})), TextReply("ok"))
		stream := strings.TrimSuffix(thinkingBody("", userSays("weather?")), "}") + `,"stream":true}`
		_, out := do(t, base, call{body: stream, header: bindingBeta})
		evs, err := parseSSE(t, strings.NewReader(string(out)))
		if err != nil {
			t.Fatal(err)
		}
		c := accumulateContent(t, evs)
		resp, out := do(t, base, call{header: bindingBeta, body: thinkingBody("", userSays("weather?"), assistantSaid(c), toolResult("toolu_s", "sunny"))})
		if resp.StatusCode != 200 || transforms(out) != "[]" {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
	})
}

// accumulateContent rebuilds a streamed message's content array.
func accumulateContent(t *testing.T, evs []event) string {
	t.Helper()
	var blocks []map[string]any
	partial := map[int]string{}
	for _, e := range evs {
		d := gjson.Parse(e.data)
		i := int(d.Get("index").Int())
		switch e.name {
		case "content_block_start":
			var b map[string]any
			_ = json.Unmarshal([]byte(d.Get("content_block").Raw), &b)
			blocks = append(blocks, b)
		case "content_block_delta":
			switch d.Get("delta.type").Str {
			case "text_delta":
				blocks[i]["text"] = blocks[i]["text"].(string) + d.Get("delta.text").Str
			case "thinking_delta":
				blocks[i]["thinking"] = blocks[i]["thinking"].(string) + d.Get("delta.thinking").Str
			case "signature_delta":
				blocks[i]["signature"] = blocks[i]["signature"].(string) + d.Get("delta.signature").Str
			case "input_json_delta":
				partial[i] += d.Get("delta.partial_json").Str
			}
		case "content_block_stop":
			if p, ok := partial[i]; ok {
				var in any
				_ = json.Unmarshal([]byte(p), &in)
				blocks[i]["input"] = in
			}
		}
	}
	return string(mustJSON(blocks))
}

// The Go SDK sends back what it received in its own serialization; the
// binding must take it.
func TestTheGoSDKsToolLoopKeepsItsThinkingBound(t *testing.T) {
	api, base := newServer(t)
	api.Enqueue(Blocks(think1, Text("Checking."), ToolUse("toolu_g", "get_weather", map[string]any{"city": "Paris"})),
		Blocks(think2, Text("Sunny.")))
	client := anthropic.NewClient(option.WithBaseURL(base), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	params := anthropic.BetaMessageNewParams{
		Model: "claude-opus-4-8", MaxTokens: 4096,
		Betas:    []anthropic.AnthropicBeta{BetaThinkingBinding},
		Thinking: anthropic.BetaThinkingConfigParamUnion{OfAdaptive: &anthropic.BetaThinkingConfigAdaptiveParam{}},
		Tools: []anthropic.BetaToolUnionParam{{OfTool: &anthropic.BetaToolParam{Name: "get_weather",
			InputSchema: anthropic.BetaToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}}}},
		Messages: []anthropic.BetaMessageParam{anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock("weather?"))},
	}
	ctx := context.Background()
	first, err := client.Beta.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	params.Messages = append(params.Messages, first.ToParam(),
		anthropic.NewBetaUserMessage(anthropic.NewBetaToolResultBlock("toolu_g", "sunny", false)))
	var raw *http.Response
	if _, err := client.Beta.Messages.New(ctx, params, option.WithResponseInto(&raw)); err != nil {
		t.Fatal(err)
	}
	last, _ := api.LastRequest("/v1/messages")
	if last.Status != 200 || len(last.InputTransformations) != 0 || !slices.Contains(last.Betas, BetaThinkingBinding) {
		t.Fatalf("the SDK's second request: status %d, transformations %+v", last.Status, last.InputTransformations)
	}
}

func TestBindingsAreForgottenWholeAndOnReset(t *testing.T) {
	var s bindingStore
	s.init(3)
	a, b := thinkingID("a", "1"), thinkingID("b", "2")
	s.add(a, binding{model: "m1"})
	s.add(a, binding{model: "m2"})
	s.add(b, binding{model: "m1"})
	if s.check(a, binding{model: "m3"}) != ReasonModel || s.check(a, binding{model: "m2"}) != "" {
		t.Fatal("a block bound twice passes where either binding matches")
	}
	s.add(b, binding{model: "m2"}) // over 3: the oldest block goes whole
	if s.known(a) || !s.known(b) || s.check(a, binding{model: "m9"}) != "" {
		t.Errorf("the oldest block must be forgotten whole, and then pass")
	}
	s.reset()
	if s.known(b) {
		t.Error("reset keeps bindings")
	}
}
