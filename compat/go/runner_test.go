package compat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/toolrunner"
	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
)

// markerAgent answers as a model that takes steps in order: the next step is
// the one after the latest whose tool call is already in the conversation.
// (fakeapi.Script counts assistant turns, which does not work here: without
// threads the client's history lacks the memory rounds ctxproxy ran.)
func markerAgent(steps []struct {
	marker string
	reply  fakeapi.Reply
}) func(*fakeapi.Request) fakeapi.Reply {
	return func(r *fakeapi.Request) fakeapi.Reply {
		seen := map[string]bool{}
		for _, m := range r.Messages {
			gjson.GetBytes(m, "content").ForEach(func(_, b gjson.Result) bool {
				if b.Get("type").Str == "tool_use" {
					seen[b.Get("name").Str+" "+b.Get("input.command").Str] = true
				}
				return true
			})
		}
		next := 0
		for i, s := range steps {
			if seen[s.marker] {
				next = i + 1
			}
		}
		return steps[min(next, len(steps)-1)].reply
	}
}

// The Go SDK's tool runner (threads on by default, and off) with an agent
// that has only its own tool: ctxproxy runs the memory calls in between.
func TestTheGoToolRunnerWithMemoryInTheProxy(t *testing.T) {
	type weatherIn struct {
		City string `json:"city" jsonschema:"required,description=The city"`
	}
	steps := []struct {
		marker string
		reply  fakeapi.Reply
	}{
		{"memory view", fakeapi.Reply{Content: []json.RawMessage{fakeapi.MemoryView("/memories")}}},
		{"memory create", fakeapi.Reply{Content: []json.RawMessage{fakeapi.MemoryCreate("/memories/city.md", "Paris\n")}}},
		{"get_weather ", fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("Checking."), fakeapi.ToolUse("", "get_weather", map[string]string{"city": "Paris"})}}},
		{"", fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("Sunny in Paris; I noted your city.")}}},
	}
	for _, disable := range []bool{false, true} {
		t.Run(fmt.Sprintf("DisableThread=%v", disable), func(t *testing.T) {
			e := start(t)
			e.fake.SetResponder(markerAgent(steps))
			ran := 0
			tool, err := toolrunner.NewBetaToolFromJSONSchema("get_weather", "Current weather of a city",
				func(ctx context.Context, in weatherIn) (anthropic.BetaToolResultBlockParamContentUnion, error) {
					ran++
					return anthropic.BetaToolResultBlockParamContentUnion{OfText: &anthropic.BetaTextBlockParam{Text: "sunny in " + in.City}}, nil
				})
			if err != nil {
				t.Fatal(err)
			}
			client := e.client(keyAgent)
			runner := client.Beta.Messages.NewToolRunner([]anthropic.BetaTool{tool}, anthropic.BetaToolRunnerParams{
				BetaMessageNewParams: baseParams(userText("I live in Paris. Weather?")),
				DisableThread:        disable,
			})
			final, err := runner.RunToCompletion(context.Background())
			if err != nil {
				t.Fatalf("runner: %v", err)
			}
			if len(final.Content) == 0 || final.Content[len(final.Content)-1].Text != "Sunny in Paris; I noted your city." {
				t.Fatalf("final message %s", final.RawJSON())
			}
			if ran != 1 {
				t.Errorf("get_weather ran %d times, want 1", ran)
			}
			if got, ok := e.memFile("agent", "city.md"); !ok || got != "Paris\n" {
				t.Errorf("memory file city.md = %q (exists %v)", got, ok)
			}
			reqs := e.calls()
			if len(reqs) != 4 {
				t.Fatalf("upstream requests %d, want 4 (view, create, get_weather round, answer)", len(reqs))
			}
			for i, r := range reqs {
				want := ""
				if !disable {
					want = map[bool]string{true: "create", false: "continue"}[i == 0]
				}
				if r.Thread != want {
					t.Errorf("request %d thread %q, want %q", i, r.Thread, want)
				}
				if r.Status != 200 {
					t.Errorf("request %d status %d (%v)", i, r.Status, r.Error)
				}
			}
		})
	}
}

// The Go SDK's tool runner with thinking on (enabled, and between_tools on a model whose
// capabilities list it), threads on and off: the model makes a memory call in its first round
// (ctxproxy runs it, hidden from the client), then calls the agent's own tool; the runner sends
// the merged message back with the tool's result. The fake binds every thinking block it writes
// to the conversation before it and refuses a mismatch (as the API does by default), so that
// request is accepted only if the thinking of the hidden round still matches: it is, with every
// thinking block kept (none dropped, none refused).
func TestTheGoToolRunnerWithMemoryInTheProxyAndThinkingOn(t *testing.T) {
	type weatherIn struct {
		City string `json:"city" jsonschema:"required,description=The city"`
	}
	steps := []struct {
		marker string
		reply  fakeapi.Reply
	}{
		{"memory create", fakeapi.Reply{Content: []json.RawMessage{fakeapi.Thinking("Note the city first.", "sig_run_1"),
			fakeapi.MemoryCreate("/memories/city.md", "Paris\n")}}},
		{"get_weather ", fakeapi.Reply{Content: []json.RawMessage{fakeapi.Thinking("Now the weather.", "sig_run_2"),
			fakeapi.ToolUse("", "get_weather", map[string]string{"city": "Paris"})}}},
		{"", fakeapi.Reply{Content: []json.RawMessage{fakeapi.Thinking("Answer.", "sig_run_3"), fakeapi.Text("Sunny in Paris.")}}},
	}
	thinkings := map[string]func(*anthropic.BetaMessageNewParams){
		"enabled": func(p *anthropic.BetaMessageNewParams) { *p = withThinking(*p) },
		"between_tools": func(p *anthropic.BetaMessageNewParams) {
			p.Model = "claude-opus-4-8" // its capabilities list between_tools
			p.Thinking = anthropic.BetaThinkingConfigParamUnion{OfBetweenTools: &anthropic.BetaThinkingConfigBetweenToolsParam{}}
		},
	}
	for _, thinking := range []string{"enabled", "between_tools"} {
		for _, disable := range []bool{false, true} {
			t.Run(fmt.Sprintf("thinking=%s/DisableThread=%v", thinking, disable), func(t *testing.T) {
				e := start(t)
				e.fake.SetResponder(markerAgent(steps))
				ran := 0
				tool, err := toolrunner.NewBetaToolFromJSONSchema("get_weather", "Current weather of a city",
					func(ctx context.Context, in weatherIn) (anthropic.BetaToolResultBlockParamContentUnion, error) {
						ran++
						return anthropic.BetaToolResultBlockParamContentUnion{OfText: &anthropic.BetaTextBlockParam{Text: "sunny in " + in.City}}, nil
					})
				if err != nil {
					t.Fatal(err)
				}
				params := baseParams(userText("I live in Paris. Weather?"))
				thinkings[thinking](&params)
				client := e.client(keyAgent)
				runner := client.Beta.Messages.NewToolRunner([]anthropic.BetaTool{tool}, anthropic.BetaToolRunnerParams{
					BetaMessageNewParams: params,
					DisableThread:        disable,
				})
				final, err := runner.RunToCompletion(context.Background())
				if err != nil {
					t.Fatalf("runner: %v", err)
				}
				if n := len(final.Content); n == 0 || final.Content[n-1].Text != "Sunny in Paris." {
					t.Fatalf("final message %s", final.RawJSON())
				}
				if ran != 1 {
					t.Errorf("get_weather ran %d times, want 1", ran)
				}
				if got, ok := e.memFile("agent", "city.md"); !ok || got != "Paris\n" {
					t.Errorf("memory file city.md = %q (exists %v)", got, ok)
				}
				reqs := e.calls()
				if len(reqs) != 3 {
					t.Fatalf("upstream requests %d, want 3 (memory round, get_weather round, answer)", len(reqs))
				}
				for i, r := range reqs {
					if r.Status != 200 || len(r.InputTransformations) != 0 {
						t.Errorf("request %d: status %d (%v), input transformations %+v", i, r.Status, r.Error, r.InputTransformations)
					}
				}
				// The runner's request with the tool's result carried the merged message back: the
				// API saw both earlier rounds' thinking, signatures intact.
				var sigs []string
				for _, m := range reqs[2].Messages {
					gjson.GetBytes(m, "content.#(type==\"thinking\")#.signature").ForEach(func(_, s gjson.Result) bool {
						sigs = append(sigs, s.Str)
						return true
					})
				}
				if fmt.Sprint(sigs) != "[sig_run_1 sig_run_2]" {
					t.Errorf("thinking the API saw with the tool's result: %v, want both rounds'", sigs)
				}
			})
		}
	}
}
