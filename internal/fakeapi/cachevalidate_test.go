package fakeapi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// The API checks cache_control and diagnostics whatever the fake models, so
// every case runs with the cache model off and on.
func TestCacheFieldsAreValidated(t *testing.T) {
	m := func(blocks ...string) conv { return conv{msgs: []string{user(blocks...)}} }
	cases := []struct {
		name  string
		body  string
		path  string // "" for /v1/messages
		opts  CacheOptions
		error string // "" for 200; else a part of the 400 message
	}{
		{name: "a marker with a 5m TTL", body: m(txt("a", `{"type":"ephemeral","ttl":"5m"}`)).body()},
		{name: "a marker with a null TTL", body: m(txt("a", `{"type":"ephemeral","ttl":null}`)).body()},
		{name: "a null marker", body: m(txt("a", `null`)).body()},
		{name: "a top-level null", body: m(txt("a", "")).plus(`"cache_control":null`).body()},
		{name: "a type other than ephemeral", body: m(txt("a", `{"type":"persistent"}`)).body(),
			error: "messages.0.content.0.cache_control.type: Input should be 'ephemeral'"},
		{name: "a missing type", body: m(txt("a", `{"ttl":"5m"}`)).body(),
			error: "messages.0.content.0.cache_control.type: Field required"},
		{name: "a TTL the API does not know", body: m(txt("a", `{"type":"ephemeral","ttl":"10m"}`)).body(),
			error: "messages.0.content.0.cache_control.ttl: Input should be '5m' or '1h'"},
		{name: "an extra key", body: m(txt("a", `{"type":"ephemeral","scope":"global"}`)).body(),
			error: "messages.0.content.0.cache_control.scope: Extra inputs are not permitted"},
		{name: "not an object", body: m(txt("a", `"ephemeral"`)).body(),
			error: "messages.0.content.0.cache_control: Input should be a valid dictionary"},
		{name: "a bad top-level marker", body: m(txt("a", "")).plus(`"cache_control":{"type":"ephemeral","ttl":"1d"}`).body(),
			error: "cache_control.ttl: Input should be '5m' or '1h'"},
		{name: "a bad marker on a tool", body: conv{tools: `[{"name":"a","input_schema":{"type":"object"},"cache_control":{"type":"x"}}]`, msgs: []string{user(txt("a", ""))}}.body(),
			error: "tools.0.cache_control.type: Input should be 'ephemeral'"},
		{name: "a bad marker on a system block", body: conv{system: systemBlock("s", `{"type":"ephemeral","ttl":5}`), msgs: []string{user(txt("a", ""))}}.body(),
			error: "system.0.cache_control.ttl: Input should be '5m' or '1h'"},
		{name: "a bad marker nested in a tool result", body: conv{msgs: []string{user(txt("a", "")), assistant(toolUseBlock("t1", "x", `{}`)),
			user(`{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r","cache_control":{"type":"nope"}}]}`)}}.body(),
			error: "messages.2.content.0.tool_result.content.0.cache_control.type: Input should be 'ephemeral'"},
		{name: "a marker on a thinking block", body: conv{extra: []string{`"thinking":{"type":"enabled","budget_tokens":1024}`},
			msgs: []string{user(txt("a", "")), assistant(`{"type":"thinking","thinking":"t","signature":"s","cache_control":{"type":"ephemeral"}}`, txt("b", "")), user(txt("c", ""))}}.body(),
			error: "messages.1.content.0.thinking.cache_control: Extra inputs are not permitted"},
		{name: "a marker on a redacted thinking block", body: conv{extra: []string{`"thinking":{"type":"enabled","budget_tokens":1024}`},
			msgs: []string{user(txt("a", "")), assistant(`{"type":"redacted_thinking","data":"d","cache_control":{"type":"ephemeral"}}`, txt("b", "")), user(txt("c", ""))}}.body(),
			error: "messages.1.content.0.redacted_thinking.cache_control: Extra inputs are not permitted"},
		{name: "a marker on an empty text block", body: m(txt("a", ""), txt("", mark5m)).body(),
			error: "messages.0.content.1.text: cache_control cannot be set for empty text blocks"},
		{name: "four markers", body: conv{tools: `[{"name":"a","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}]`,
			system: systemBlock("s", mark5m), msgs: []string{user(txt("a", mark5m), txt("b", mark5m))}}.body()},
		{name: "five markers", body: conv{tools: `[{"name":"a","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}]`,
			system: systemBlock("s", mark5m), msgs: []string{user(txt("a", mark5m), txt("b", mark5m), txt("c", mark5m))}}.body(),
			error: "A maximum of 4 blocks with cache_control may be provided. Found 5."},
		{name: "four markers and the top-level one", body: conv{system: systemBlock("s", mark5m),
			msgs: []string{user(txt("a", mark5m), txt("b", mark5m), txt("c", mark5m), txt("d", ""))}}.plus(auto).body(),
			error: "Found 5."},
		{name: "the top-level one on a block with the same TTL is not counted again", body: conv{system: systemBlock("s", mark5m),
			msgs: []string{user(txt("a", mark5m), txt("b", mark5m), txt("c", mark5m))}}.plus(auto).body()},
		{name: "the top-level one on a block with another TTL", body: m(txt("a", mark5m)).plus(auto1h).body(),
			error: "cache_control: the automatic breakpoint falls on messages.0.content.0"},
		{name: "nested markers count", body: conv{system: systemBlock("s", mark5m), msgs: []string{user(txt("a", "")), assistant(toolUseBlock("t1", "x", `{}`)),
			user(`{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r","cache_control":{"type":"ephemeral"}},{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"cache_control":{"type":"ephemeral"}}`, txt("z", mark5m))}}.body(),
			error: "Found 5."},
		{name: "1h before 5m", body: conv{system: systemBlock("s", mark1h), msgs: []string{user(txt("a", mark5m))}}.body()},
		{name: "1h after 5m", body: conv{system: systemBlock("s", mark5m), msgs: []string{user(txt("a", mark1h))}}.body(),
			error: "messages.0.content.0.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. Note that blocks are processed in the following order: tools, system, messages."},
		{name: "a 1h system after a 5m tool", body: conv{tools: `[{"name":"a","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}]`,
			system: systemBlock("s", mark1h), msgs: []string{user(txt("a", ""))}}.body(),
			error: "system.0.cache_control.ttl: a ttl='1h'"},
		{name: "a 1h top-level after a 5m block", body: conv{system: systemBlock("s", mark5m), msgs: []string{user(txt("a", ""))}}.plus(auto1h).body(),
			error: "cache_control.ttl: a ttl='1h'"},
		{name: "auto_in_ttl_order off lets the top-level 1h follow", opts: CacheOptions{AutoInTTLOrder: Off},
			body: conv{system: systemBlock("s", mark5m), msgs: []string{user(txt("a", ""))}}.plus(auto1h).body()},
		{name: "diagnostics with an id", body: m(txt("a", "")).plus(`"diagnostics":{"previous_message_id":"msg_1"}`).body()},
		{name: "diagnostics empty", body: m(txt("a", "")).plus(`"diagnostics":{}`).body()},
		{name: "diagnostics null", body: m(txt("a", "")).plus(`"diagnostics":null`).body()},
		{name: "diagnostics not an object", body: m(txt("a", "")).plus(`"diagnostics":"msg_1"`).body(),
			error: "diagnostics: Input should be a valid dictionary"},
		{name: "diagnostics with an extra key", body: m(txt("a", "")).plus(`"diagnostics":{"previous_message_id":null,"verbose":true}`).body(),
			error: "diagnostics.verbose: Extra inputs are not permitted"},
		{name: "diagnostics with a number id", body: m(txt("a", "")).plus(`"diagnostics":{"previous_message_id":7}`).body(),
			error: "diagnostics.previous_message_id: Input should be a valid string"},
		{name: "count_tokens takes cache_control", path: "/v1/messages/count_tokens", body: m(txt("a", mark5m)).plus(auto).body()},
		{name: "count_tokens refuses diagnostics", path: "/v1/messages/count_tokens",
			body: m(txt("a", "")).plus(`"diagnostics":{"previous_message_id":null}`).body(), error: "diagnostics: Extra inputs are not permitted"},
		{name: "count_tokens_diagnostics ignore", path: "/v1/messages/count_tokens", opts: CacheOptions{CountTokensDiagnostics: "ignore"},
			body: m(txt("a", "")).plus(`"diagnostics":{"previous_message_id":null}`).body()},
	}
	for _, cache := range []Switch{Off, On} {
		for _, c := range cases {
			t.Run("cache "+string(cache)+"/"+c.name, func(t *testing.T) {
				o := c.opts
				o.Cache = cache
				_, base := newServer(t, WithOptions(Options{CacheOptions: o}))
				resp, out := do(t, base, call{path: c.path, body: c.body})
				if c.error == "" {
					if resp.StatusCode != 200 {
						t.Fatalf("status %d: %s", resp.StatusCode, out)
					}
					return
				}
				r := gjson.ParseBytes(out)
				if resp.StatusCode != 400 || r.Get("type").Str != "error" || r.Get("error.type").Str != "invalid_request_error" ||
					!strings.HasPrefix(r.Get("request_id").Str, "req_") {
					t.Fatalf("status %d: %s", resp.StatusCode, out)
				}
				if msg := r.Get("error.message").Str; !strings.Contains(msg, c.error) {
					t.Errorf("message %q, want %q", msg, c.error)
				}
			})
		}
	}
}

// Claude Code's own requests carry three markers; with the cache on, the
// second identical request reads what the first wrote.
func TestCacheClaudeCodeRequests(t *testing.T) {
	for _, file := range []string{"sonnet45-request.json", "opus55-tool-turn2-request.json"} {
		t.Run(file, func(t *testing.T) {
			f := newCacheFake(t, CacheOptions{MinTokensDefault: 1024})
			b := readTestdata(t, "claude-code/"+file)
			var u [2]use
			for i := range u {
				resp, out := do(t, f.base, call{path: "/v1/messages?beta=true", body: b, header: map[string]string{"Anthropic-Beta": claudeCodeBetas}})
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, out)
				}
				// Claude Code streams: the usage is message_start's.
				evs, err := parseSSE(t, strings.NewReader(string(out)))
				if err != nil || len(evs) == 0 || evs[0].name != "message_start" {
					t.Fatalf("stream %v: %.300s", err, out)
				}
				u[i] = usageOf(t, gjson.Get(evs[0].data, "message.usage"))
			}
			if u[0].read != 0 || u[0].w5m == 0 || u[1].read != u[0].w5m || u[1].total() != u[0].total() {
				t.Errorf("usage %+v then %+v", u[0], u[1])
			}
			if n := len(f.api.CacheEntries()); n != 3 {
				t.Errorf("%d entries: %+v", n, f.api.CacheEntries())
			}
		})
	}
}

func TestCacheOptionsOverHTTP(t *testing.T) {
	api, base := newServer(t)
	res, err := httpPost(base+"/_fake/options", `{"cache":"on","lookback":5,"min_tokens":{"claude-test":10},"diagnostics_pending":"streams","tool_runs_one_position":false}`)
	if err != nil || res.status != 200 {
		t.Fatalf("%v %+v", err, res)
	}
	o := api.CurrentOptions().CacheOptions
	if !o.on() || o.Lookback != 5 || o.MinTokens["claude-test"] != 10 || o.DiagnosticsPending != "streams" || o.ToolRunsOnePosition != Off {
		t.Errorf("options %+v", o)
	}
	if g := gjson.Get(res.body, "cache").Str; g != "on" {
		t.Errorf("options reply %s", res.body)
	}
	for _, bad := range []string{`{"cache":"yes"}`, `{"refresh_scope":"all"}`, `{"fingerprint_ttl":"forever"}`, `{"lookback":-1}`} {
		if res, _ := httpPost(base+"/_fake/options", bad); res.status != 400 {
			t.Errorf("%s: %+v", bad, res)
		}
	}
	if o := api.CurrentOptions(); !o.on() {
		t.Error("a refused update changed the options")
	}
	if res, _ := httpPost(base+"/_fake/options", `{"cache":"off"}`); res.status != 200 || api.CurrentOptions().Cache != Off {
		t.Errorf("off: %+v", res)
	}
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
