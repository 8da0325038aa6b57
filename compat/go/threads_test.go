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

// Whether the API refuses context_management in threads is unverified, so the
// Go SDK's tool runner (threads on, its default) runs a multi-turn run with
// memory in the proxy against a fake that takes edits in threads and one that
// refuses them (400 thread_unsupported_request), under both
// context_management.threads settings. Every run finishes with no memory
// result lost and the edits in force on every request that reached the model;
// a refused thread costs the run one upstream call under pass and none under
// unthread_edits.
func TestTheGoToolRunnerWhenThreadsRefuseEdits(t *testing.T) {
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
	cases := []struct {
		setting, key string
		strict       bool
		refusals     int  // upstream 400s
		threaded     bool // the run stays threaded
	}{
		{"pass", keyAgent, false, 0, true},
		{"pass", keyAgent, true, 1, false},
		{"unthread_edits", keyUnthread, false, 0, false},
		{"unthread_edits", keyUnthread, true, 0, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("threads=%s/strict=%v", tc.setting, tc.strict), func(t *testing.T) {
			var opts []fakeapi.Option
			if tc.strict {
				opts = append(opts, fakeapi.WithThreadsRefuse("context_management"))
			}
			e := start(t, opts...)
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
			client := e.client(tc.key)
			runner := client.Beta.Messages.NewToolRunner([]anthropic.BetaTool{tool}, anthropic.BetaToolRunnerParams{
				BetaMessageNewParams: baseParams(userText("I live in Paris. Weather?")),
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
			tenant := map[string]string{keyAgent: "agent", keyUnthread: "unthread"}[tc.key]
			if got, ok := e.memFile(tenant, "city.md"); !ok || got != "Paris\n" {
				t.Errorf("memory file city.md = %q (exists %v): a memory result was lost", got, ok)
			}
			refusals, served := 0, 0
			for i, r := range e.calls() {
				if r.Status == 400 {
					refusals++
					if r.Error == nil || gjson.GetBytes(r.Body, "thread.type").Str == "" {
						t.Errorf("request %d: a 400 that is not a thread refusal: %+v", i, r.Error)
					}
					continue
				}
				served++
				if r.Status != 200 {
					t.Errorf("request %d status %d (%v)", i, r.Status, r.Error)
				}
				if !gjson.GetBytes(r.Body, "context_management.edits").IsArray() {
					t.Errorf("request %d reached the model without the tenant's edits: %s", i, r.Body)
				}
				if (r.Thread != "") != tc.threaded {
					t.Errorf("request %d thread %q, want threaded=%v", i, r.Thread, tc.threaded)
				}
			}
			if refusals != tc.refusals || served != 4 {
				t.Errorf("upstream: %d refused, %d served; want %d and 4 (view, create, get_weather round, answer)", refusals, served, tc.refusals)
			}
		})
	}
}
