package fakeapi

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// A conversation of a few turns with a system prompt, for the tests below.
func baseConv() conv {
	return conv{
		system: systemBlock(words(3000), ""),
		msgs: []string{
			user(txt(words(800), "")),
			assistant(txt(words(400), "")),
			user(txt(words(300), "")),
		},
	}
}

func TestCacheOffKeepsRepliesAsTheyWere(t *testing.T) {
	api, base := newServer(t)
	b := baseConv().plus(auto).body()
	resp, out := do(t, base, call{body: b})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	r := gjson.ParseBytes(out)
	if r.Get("diagnostics").Exists() || r.Get("usage.cache_creation").Exists() {
		t.Errorf("cache off: reply carries cache fields: %s", out)
	}
	if r.Get("usage.cache_read_input_tokens").Int() != 0 || r.Get("usage.cache_creation_input_tokens").Int() != 0 {
		t.Errorf("cache off: cache usage %s", r.Get("usage").Raw)
	}
	_, cnt := do(t, base, call{path: "/v1/messages/count_tokens", body: b})
	if got, want := r.Get("usage.input_tokens").Int(), gjson.GetBytes(cnt, "input_tokens").Int(); got != want {
		t.Errorf("input_tokens %d, count_tokens %d", got, want)
	}
	if n := len(api.CacheEntries()); n != 0 {
		t.Errorf("cache off wrote %d entries", n)
	}
}

// Whatever the prompt, the cache splits the fake's one estimate: read +
// writes + input = count_tokens = the cache-off input_tokens, on a first
// call (writes) and on a second (reads).
func TestCacheUsageAddsUpToTheEstimate(t *testing.T) {
	edits := `"context_management":{"edits":[{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":1},"keep":{"type":"tool_uses","value":1},"clear_tool_inputs":true}]}`
	loop := conv{system: `"` + words(2000) + `"`, tools: `[{"name":"grep","input_schema":{"type":"object"}},{"name":"read","input_schema":{"type":"object"},"cache_control":` + mark1h + `}]`,
		msgs: []string{user(txt("find it", "")),
			assistant(toolUseBlock("t1", "grep", `{"q":"a"}`), toolUseBlock("t2", "read", `{"p":"b"}`)),
			user(toolResultBlock("t1", words(3000), ""), toolResultBlock("t2", words(2000), mark5m)),
			assistant(toolUseBlock("t3", "grep", `{"q":"c"}`)),
			user(toolResultBlock("t3", words(1000), ""), txt("go on", ""))}}
	thinking := conv{extra: []string{`"thinking":{"type":"enabled","budget_tokens":1024}`},
		msgs: []string{user(txt(words(500), "")), assistant(thinkingBlock(words(900)), txt("a", "")), user(txt("b", "")),
			assistant(thinkingBlock(words(700)), txt("c", "")), user(txt("d", ""))}}
	cases := []struct {
		name string
		body string
	}{
		{"a string message and no cache_control", conv{msgs: []string{`{"role":"user","content":"` + words(5000) + `"}`}}.body()},
		{"automatic caching over system and messages", baseConv().plus(auto).body()},
		{"a tool loop with parallel calls, markers on a tool and a result", loop.plus(auto).body()},
		{"a tool loop whose results and inputs are cleared", loop.plus(auto, edits).body()},
		{"thinking kept", thinking.plus(auto).body()},
		{"thinking cleared but the last turn", thinking.plus(auto, `"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":1}}]}`).body()},
		{"thinking stripped on a last-turn-only model", conv{model: "claude-sonnet-4-5", extra: thinking.extra, msgs: thinking.msgs}.plus(auto).body()},
		{"a replayed compaction block", conv{msgs: []string{user(txt(words(4000), "")),
			assistant(`{"type":"compaction","content":"summary"}`, txt("after", "")), user(txt("next", mark5m))}}.body()},
		{"a hidden system message", conv{msgs: []string{user(txt("a", "")),
			`{"role":"system","content":"note ` + words(800) + `","clear_at":"next_user_message"}`, assistant(txt("b", "")), user(txt("c", ""))}}.plus(auto).body()},
		{"pretty-printed JSON", "{\n  \"model\": \"claude-test\",\n  \"max_tokens\": 10,\n  \"cache_control\": {\"type\": \"ephemeral\"},\n  \"system\": [ {\"type\": \"text\", \"text\": \"" + words(900) + "\"} ],\n  \"messages\": [\n    {\"role\": \"user\", \"content\": [ {\"type\": \"text\", \"text\": \"hi\"} ] }\n  ]\n}"},
		{"a marker nested in a tool result", conv{msgs: []string{user(txt("x", "")), assistant(toolUseBlock("t1", "grep", `{}`)),
			user(`{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"` + words(3000) + `","cache_control":{"type":"ephemeral"}}]}`)}}.body()},
	}
	_, offBase := newServer(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newCacheFake(t, CacheOptions{})
			_, out := do(t, offBase, call{body: c.body})
			want := gjson.GetBytes(out, "usage.input_tokens").Int()
			if want == 0 {
				t.Fatalf("cache-off reply: %s", out)
			}
			if n := f.count(c.body); n != want {
				t.Errorf("count_tokens %d, cache-off input_tokens %d", n, want)
			}
			first := usageOf(t, f.send("sk-a", c.body).Get("usage"))
			second := usageOf(t, f.send("sk-a", c.body).Get("usage"))
			if first.total() != want || second.total() != want {
				t.Errorf("usage totals %+v then %+v, want %d", first, second, want)
			}
			if first.read != 0 || second.read != first.w5m+first.w1h || second.w5m+second.w1h != 0 {
				t.Errorf("second call should read what the first wrote: %+v then %+v", first, second)
			}
		})
	}
}

func TestCacheBreakpointPlacement(t *testing.T) {
	sys := words(2000)
	tools := `[{"name":"a","input_schema":{"type":"object"}},{"name":"b","input_schema":{"type":"object"},"cache_control":` + mark5m + `}]`
	cases := []struct {
		name  string
		conv  conv
		paths []string // the entries the first call writes
		// written: the write ends at the last entry (input_tokens after it).
		oneHour string // the path whose prefix is written for 1h ("" none)
	}{
		{name: "without cache_control nothing is written or read",
			conv: baseConv()},
		{name: "the top-level cache_control writes at the last block",
			conv: baseConv().plus(auto), paths: []string{"messages.2.content.0@5m"}},
		{name: "a top-level 1h TTL writes for an hour",
			conv: baseConv().plus(auto1h), paths: []string{"messages.2.content.0@1h"}, oneHour: "messages.2.content.0"},
		{name: "the automatic breakpoint walks back past empty text",
			conv:  conv{msgs: []string{user(txt(words(900), ""), txt("", ""))}}.plus(auto),
			paths: []string{"messages.0.content.0@5m"}},
		{name: "the automatic breakpoint walks back past thinking to the last cacheable block",
			conv: conv{extra: []string{`"thinking":{"type":"enabled","budget_tokens":1024}`},
				msgs: []string{user(txt(words(900), "")), assistant(txt("x", ""), thinkingBlock("hmm"))}}.plus(auto),
			paths: []string{"messages.1.content.0@5m"}},
		{name: "a string message is one block",
			conv:  conv{system: `"` + sys + `"`, msgs: []string{`{"role":"user","content":"hello"}`}}.plus(auto),
			paths: []string{"messages.0.content@5m"}},
		{name: "an explicit marker on system writes the prefix through system",
			conv:  conv{system: systemBlock(sys, mark1h), msgs: baseConv().msgs},
			paths: []string{"system.0@1h"}, oneHour: "system.0"},
		{name: "a marker on a tool definition writes the tools prefix",
			conv: conv{tools: tools, msgs: baseConv().msgs}, paths: []string{"tools.1@5m"}},
		{name: "a marker on a deferred tool lands on the tool before it",
			conv: conv{tools: `[{"name":"a","input_schema":{"type":"object"}},{"name":"b","defer_loading":true,"input_schema":{"type":"object"},"cache_control":` + mark5m + `}]`,
				msgs: baseConv().msgs},
			paths: []string{"tools.0@5m"}},
		{name: "1h on system and 5m at the end split the write",
			conv:  conv{system: systemBlock(sys, mark1h), msgs: baseConv().msgs}.plus(auto),
			paths: []string{"system.0@1h", "messages.2.content.0@5m"}, oneHour: "system.0"},
		{name: "four breakpoints write four entries",
			conv: conv{tools: tools, system: systemBlock(sys, mark5m),
				msgs: []string{user(txt(words(500), mark5m)), assistant(txt("b", "")), user(txt("c", ""))}}.plus(auto),
			paths: []string{"tools.1@5m", "system.0@5m", "messages.0.content.0@5m", "messages.2.content.0@5m"}},
		{name: "a marker inside a tool result's content is a breakpoint on the result",
			conv: conv{msgs: []string{user(txt(words(900), "")), assistant(toolUseBlock("t1", "grep", `{}`)),
				user(`{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r","cache_control":{"type":"ephemeral"}}]}`, txt("more", ""))}},
			paths: []string{"messages.2.content.0@5m"}},
		{name: "a marker on the second result of a run is a breakpoint on the whole run",
			conv: conv{msgs: []string{user(txt(words(900), "")), assistant(toolUseBlock("t1", "a", `{}`), toolUseBlock("t2", "a", `{}`)),
				user(toolResultBlock("t1", "one", ""), toolResultBlock("t2", "two", mark5m))}},
			paths: []string{"messages.2.content.0@5m"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newCacheFake(t, CacheOptions{})
			b := c.conv.body()
			total := f.count(b)
			u := usageOf(t, f.send("sk-a", b).Get("usage"))
			got := entryPaths(f.api, "sk-a")
			if !slices.Equal(got, c.paths) {
				t.Fatalf("entries %v, want %v", got, c.paths)
			}
			entries := f.api.CacheEntries()
			var last, hour int64
			for _, e := range entries {
				last = max(last, e.Tokens)
				if e.Path == c.oneHour {
					hour = e.Tokens
				}
			}
			if u.read != 0 || u.w1h != hour || u.w5m != last-hour || u.input != total-last {
				t.Errorf("usage %+v; want 1h %d, 5m %d, input %d (total %d)", u, hour, last-hour, total-last, total)
			}
			again := usageOf(t, f.send("sk-a", b).Get("usage"))
			if again.read != last || again.w1h+again.w5m != 0 || again.input != total-last {
				t.Errorf("second call %+v; want read %d, input %d", again, last, total-last)
			}
		})
	}
}

// The ToolRunsOnePosition switch: off, each result is its own position.
func TestCacheToolRunSwitch(t *testing.T) {
	c := conv{msgs: []string{user(txt(words(900), "")), assistant(toolUseBlock("t1", "a", `{}`), toolUseBlock("t2", "a", `{}`)),
		user(toolResultBlock("t1", "one", ""), toolResultBlock("t2", "two", mark5m))}}
	f := newCacheFake(t, CacheOptions{ToolRunsOnePosition: Off})
	f.send("sk-a", c.body())
	if got := entryPaths(f.api, "sk-a"); !slices.Equal(got, []string{"messages.2.content.1@5m"}) {
		t.Errorf("entries %v", got)
	}
}

// grown is c followed by n more user/assistant exchanges of one small text
// block each, then a last user turn; each adds positions.
func grown(c conv, blocks int) conv {
	var more []string
	more = append(more, assistant(txt("reply", "")))
	var bs []string
	for i := 0; i < blocks; i++ {
		bs = append(bs, txt(fmt.Sprintf("note %d", i), ""))
	}
	return c.with(append(more, user(bs...))...)
}

func TestCacheLookback(t *testing.T) {
	// The first call writes at its last block (position p); the second adds
	// 1 + n positions after it and has its automatic breakpoint at p+1+n.
	first := conv{system: systemBlock(words(2000), ""), msgs: []string{user(txt(words(900), ""))}}.plus(auto)
	runs := func(n int) conv {
		var uses, results []string
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("t%d", i)
			uses = append(uses, toolUseBlock(id, "a", `{}`))
			results = append(results, toolResultBlock(id, "r", ""))
		}
		return first.with(assistant(uses...), user(results...), assistant(txt("done", "")), user(txt("next", "")))
	}
	cases := []struct {
		name   string
		opts   CacheOptions
		second conv
		hit    bool
	}{
		{"19 positions back (20 counting the breakpoint) is found", CacheOptions{}, grown(first, 18), true},
		{"20 positions back is past the window", CacheOptions{}, grown(first, 19), false},
		{"a shorter lookback finds 4 back", CacheOptions{Lookback: 5}, grown(first, 3), true},
		{"a shorter lookback misses 5 back", CacheOptions{Lookback: 5}, grown(first, 4), false},
		{"an earlier explicit breakpoint searches its own window",
			CacheOptions{}, conv{system: first.system, extra: first.extra,
				msgs: []string{user(txt(words(900), mark5m))}}.with(grown(conv{}, 30).msgs...), true},
		{"runs of 30 tool calls and results are two positions", CacheOptions{}, runs(30), true},
		{"without runs they are 60", CacheOptions{ToolRunsOnePosition: Off}, runs(30), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newCacheFake(t, c.opts)
			w := usageOf(t, f.send("sk-a", first.body()).Get("usage"))
			u := usageOf(t, f.send("sk-a", c.second.body()).Get("usage"))
			if c.hit && u.read != w.w5m {
				t.Errorf("read %d, want the first call's %d", u.read, w.w5m)
			}
			if !c.hit && u.read != 0 {
				t.Errorf("read %d, want a miss", u.read)
			}
		})
	}
}

func TestCacheMinimumLength(t *testing.T) {
	// About 2000 tokens: over 512 and 1024, under 4096.
	b := func(model string) string {
		return conv{model: model, system: systemBlock(words(4000), mark5m), msgs: []string{user(txt(words(4000), ""))}}.plus(auto).body()
	}
	cases := []struct {
		name, model string
		opts        CacheOptions
		want        []string
	}{
		{"Haiku 4.5 caches nothing under 4096 tokens", "claude-haiku-4-5-20251001", CacheOptions{}, nil},
		{"Opus 4.5 (4096) neither", "claude-opus-4-5", CacheOptions{}, nil},
		{"Opus 5.5 (512) caches both breakpoints", "claude-opus-5-5", CacheOptions{}, []string{"system.0@5m", "messages.0.content.0@5m"}},
		{"Sonnet 4.5 (1024) caches only the longer prefix", "claude-sonnet-4-5", CacheOptions{}, []string{"messages.0.content.0@5m"}},
		{"Haiku 3.5 by its old name (2048) neither", "claude-3-5-haiku-20241022", CacheOptions{}, nil},
		{"an unknown model takes min_tokens_default", "other-model", CacheOptions{MinTokensDefault: 1500}, []string{"messages.0.content.0@5m"}},
		{"min_tokens overrides the table by prefix", "claude-haiku-4-5-20251001", CacheOptions{MinTokens: map[string]int64{"claude-haiku": 100}},
			[]string{"system.0@5m", "messages.0.content.0@5m"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newCacheFake(t, c.opts)
			body := b(c.model)
			total := f.count(body)
			u := usageOf(t, f.send("sk-a", body).Get("usage"))
			if got := entryPaths(f.api, "sk-a"); !slices.Equal(got, c.want) {
				t.Errorf("entries %v, want %v", got, c.want)
			}
			if len(c.want) == 0 && (u.w5m != 0 || u.read != 0 || u.input != total) {
				t.Errorf("usage %+v, want all %d as input", u, total)
			}
		})
	}
	t.Run("the minimum is inclusive", func(t *testing.T) {
		body := conv{msgs: []string{user(txt(words(4000), ""))}}.plus(auto).body()
		for _, d := range []struct {
			delta int64
			write bool
		}{{0, true}, {1, false}} {
			f := newCacheFake(t, CacheOptions{})
			total := f.count(body)
			f.api.SetOptions(Options{CacheOptions: CacheOptions{Cache: On, MinTokens: map[string]int64{"claude-test": total + d.delta}}})
			u := usageOf(t, f.send("sk-a", body).Get("usage"))
			if (u.w5m == total) != d.write {
				t.Errorf("minimum total+%d: usage %+v", d.delta, u)
			}
		}
	})
}

func TestCacheTTLsOnTheTestClock(t *testing.T) {
	sysMarked := func(cc string) conv { return conv{system: systemBlock(words(3000), cc), msgs: baseConv().msgs} }
	type step struct {
		advance time.Duration
		conv    conv
		read    string // "all", "system", "none": what the call reads
	}
	base5m := baseConv().plus(auto)
	changedLast := func(c conv) conv {
		c.msgs = append(append([]string(nil), c.msgs[:len(c.msgs)-1]...), user(txt("something else", "")))
		return c
	}
	cases := []struct {
		name  string
		opts  CacheOptions
		steps []step
	}{
		{"a 5m entry lives 4m59s", CacheOptions{}, []step{{0, base5m, "none"}, {5*time.Minute - time.Second, base5m, "all"}}},
		{"a 5m entry is gone at 5m", CacheOptions{}, []step{{0, base5m, "none"}, {5 * time.Minute, base5m, "none"}}},
		{"a read refreshes: read at 4m, still there at 8m", CacheOptions{},
			[]step{{0, base5m, "none"}, {4 * time.Minute, base5m, "all"}, {4 * time.Minute, base5m, "all"}}},
		{"a 1h entry lives 59m", CacheOptions{}, []step{{0, baseConv().plus(auto1h), "none"}, {59 * time.Minute, baseConv().plus(auto1h), "all"}}},
		{"a 1h entry is gone at 1h", CacheOptions{}, []step{{0, baseConv().plus(auto1h), "none"}, {time.Hour, baseConv().plus(auto1h), "none"}}},
		{"1h system and 5m messages: at 6m only the system is read", CacheOptions{},
			[]step{{0, sysMarked(mark1h).plus(auto), "none"}, {6 * time.Minute, sysMarked(mark1h).plus(auto), "system"}}},
		{"a read refreshes the whole chain: the system entry outlives its TTL", CacheOptions{},
			[]step{{0, sysMarked(mark5m).plus(auto), "none"}, {4 * time.Minute, sysMarked(mark5m).plus(auto), "all"},
				{4 * time.Minute, changedLast(sysMarked(mark5m)).plus(auto), "system"}}},
		{"refresh_scope hit refreshes only the entry read", CacheOptions{RefreshScope: "hit"},
			[]step{{0, sysMarked(mark5m).plus(auto), "none"}, {4 * time.Minute, sysMarked(mark5m).plus(auto), "all"},
				{4 * time.Minute, changedLast(sysMarked(mark5m)).plus(auto), "none"}}},
		{"a refresh keeps the entry's own TTL", CacheOptions{},
			[]step{{0, base5m, "none"}, {4 * time.Minute, baseConv().plus(auto1h), "all"}, {20 * time.Minute, base5m, "none"}}},
		{"refresh_ttl breakpoint gives the reader's TTL", CacheOptions{RefreshTTL: "breakpoint"},
			[]step{{0, base5m, "none"}, {4 * time.Minute, baseConv().plus(auto1h), "all"}, {20 * time.Minute, base5m, "all"}}},
		{"a 5m marker reads a 1h entry", CacheOptions{},
			[]step{{0, sysMarked(mark1h), "none"}, {time.Minute, sysMarked(mark5m), "system"}}},
		{"ttl_in_key: a 5m marker does not read a 1h entry", CacheOptions{TTLInKey: On},
			[]step{{0, sysMarked(mark1h), "none"}, {time.Minute, sysMarked(mark5m), "none"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newCacheFake(t, c.opts)
			var sysTokens int64
			for i, s := range c.steps {
				f.api.AdvanceClock(s.advance)
				b := s.conv.body()
				total := f.count(b)
				u := usageOf(t, f.send("sk-a", b).Get("usage"))
				for _, e := range f.api.CacheEntries() {
					if e.Path == "system.0" {
						sysTokens = e.Tokens
					}
				}
				var want int64
				switch s.read {
				case "all":
					want = total - u.input
				case "system":
					want = sysTokens
				}
				if u.read != want || (s.read == "none" && u.read != 0) || (s.read != "none" && want == 0) {
					t.Errorf("step %d (+%v): read %d, want %s (%d); usage %+v", i, s.advance, u.read, s.read, want, u)
				}
			}
		})
	}
}

func TestCacheClockControl(t *testing.T) {
	f := newCacheFake(t, CacheOptions{})
	b := baseConv().plus(auto).body()
	f.send("sk-a", b)
	start := f.api.Now()
	res, err := httpPost(f.base+"/_fake/clock", `{"advance":"5m"}`)
	if err != nil || res.status != 200 {
		t.Fatalf("advance: %v %+v", err, res)
	}
	if now := gjson.Get(res.body, "now").Time(); !now.Equal(start.Add(5 * time.Minute)) {
		t.Errorf("now %v after advancing 5m from %v", now, start)
	}
	if u := usageOf(t, f.send("sk-a", b).Get("usage")); u.read != 0 {
		t.Errorf("read %d after 5m", u.read)
	}
	res, _ = httpPost(f.base+"/_fake/clock", `{"advance_ms":1000}`)
	if now := gjson.Get(res.body, "now").Time(); !now.Equal(start.Add(5*time.Minute + time.Second)) {
		t.Errorf("now %v after 1000 ms more", now)
	}
	for _, bad := range []string{`{"advance":"-1m"}`, `{"advance":"soon"}`, `{"advance":"1m","advance_ms":1}`, `nope`} {
		if res, _ := httpPost(f.base+"/_fake/clock", bad); res.status != 400 || gjson.Get(res.body, "error.type").Str != "invalid_request_error" {
			t.Errorf("%s: %+v", bad, res)
		}
	}
	res, _ = httpGet(f.base + "/_fake/cache")
	if n := len(gjson.Get(res.body, "entries").Array()); n != 1 || gjson.Get(res.body, "entries.0.path").Str != "messages.2.content.0" {
		t.Errorf("GET /_fake/cache: %s", res.body)
	}
	if res, _ := httpPost(f.base+"/_fake/cache/reset", ``); res.status != 200 || len(f.api.CacheEntries()) != 0 {
		t.Errorf("reset: %+v, %d entries left", res, len(f.api.CacheEntries()))
	}
	t.Run("WithClock sets the clock's base", func(t *testing.T) {
		at := time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)
		api := New(WithClock(func() time.Time { return at }))
		api.AdvanceClock(time.Minute)
		if got := api.Now(); !got.Equal(at.Add(time.Minute)) {
			t.Errorf("Now %v", got)
		}
	})
}

func TestCacheIsPerCredentialAndModel(t *testing.T) {
	b := baseConv().plus(auto)
	other := b
	other.model = "claude-other"
	cases := []struct {
		name string
		key  string
		body string
		hit  bool
	}{
		{"the same credential and model reads", "sk-a", b.body(), true},
		{"another credential does not read another organization's cache", "sk-b", b.body(), false},
		{"another model has its own cache", "sk-a", other.body(), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newCacheFake(t, CacheOptions{})
			f.send("sk-a", b.body())
			if u := usageOf(t, f.send(c.key, c.body).Get("usage")); (u.read > 0) != c.hit {
				t.Errorf("usage %+v, hit %v", u, c.hit)
			}
		})
	}
	t.Run("a Bearer token is a credential too", func(t *testing.T) {
		f := newCacheFake(t, CacheOptions{})
		resp, _ := do(t, f.base, call{body: b.body(), header: map[string]string{"X-Api-Key": "", "Authorization": "Bearer tok-1"}})
		if resp.StatusCode != 200 || !slices.Equal(entryPaths(f.api, "tok-1"), []string{"messages.2.content.0@5m"}) {
			t.Errorf("status %d, entries %+v", resp.StatusCode, f.api.CacheEntries())
		}
	})
}

// toolLoop is a conversation of n tool calls of big results, with a marker
// on the first call's tool_use block (so an entry ends right before the
// first result) and the automatic breakpoint.
func cachedToolLoop(n int, edits string) conv {
	c := conv{system: systemBlock(words(2000), mark5m), tools: `[{"name":"grep","input_schema":{"type":"object"}}]`,
		msgs: []string{user(txt("task: "+words(400), ""))}}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("t%d", i)
		use := toolUseBlock(id, "grep", fmt.Sprintf(`{"q":"%s"}`, words(200)))
		if i == 1 {
			use = use[:len(use)-1] + `,"cache_control":` + mark5m + `}`
		}
		c = c.with(assistant(use), user(toolResultBlock(id, words(4000), "")))
	}
	c = c.plus(auto)
	if edits != "" {
		c = c.plus(`"context_management":{"edits":[` + edits + `]}`)
	}
	return c
}

func TestCacheEditsApplyBeforeTheLookup(t *testing.T) {
	// Clearing fires past 3 tool uses and keeps the last one.
	clear := `{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":3},"keep":{"type":"tool_uses","value":1}}`
	clearInputs := `{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":3},"keep":{"type":"tool_uses","value":1},"clear_tool_inputs":true}`
	f := newCacheFake(t, CacheOptions{})
	entryTokens := func(path string) int64 {
		for _, e := range f.api.CacheEntries() {
			if e.Path == path {
				return e.Tokens
			}
		}
		t.Fatalf("no entry at %s: %+v", path, f.api.CacheEntries())
		return 0
	}

	// Call 1: three uses, nothing cleared; entries at system, the first
	// tool_use and the end.
	c1 := cachedToolLoop(3, clear)
	r1 := f.send("sk-a", c1.body())
	u1 := usageOf(t, r1.Get("usage"))
	if n := len(r1.Get("context_management.applied_edits").Array()); n != 0 {
		t.Fatalf("call 1 cleared: %s", r1.Get("context_management").Raw)
	}
	beforeFirstResult := entryTokens("messages.1.content.0")

	t.Run("without edits the next call reads everything the last one wrote", func(t *testing.T) {
		f2 := newCacheFake(t, CacheOptions{})
		f2.send("sk-a", cachedToolLoop(3, "").body())
		u := usageOf(t, f2.send("sk-a", cachedToolLoop(4, "").body()).Get("usage"))
		if u.read != u1.w5m {
			t.Errorf("read %d, want %d", u.read, u1.w5m)
		}
	})

	// Call 2: a fourth use crosses the trigger; t1..t3 are cleared, so the
	// prompt changes at t1's result: the read ends right before it.
	c2 := cachedToolLoop(4, clear)
	total2 := f.count(c2.body())
	r2 := f.send("sk-a", c2.body())
	u2 := usageOf(t, r2.Get("usage"))
	if got := r2.Get("context_management.applied_edits.0.cleared_tool_uses").Int(); got != 3 {
		t.Fatalf("call 2 cleared %d uses: %s", got, r2.Get("context_management").Raw)
	}
	if u2.read != beforeFirstResult || u2.total() != total2 || u2.w5m != total2-beforeFirstResult-u2.input {
		t.Errorf("call 2: usage %+v; want read %d (up to the first cleared result), total %d", u2, beforeFirstResult, total2)
	}

	// Call 3: a user turn without a new tool use clears the same uses: the
	// edited prefix is stable and read whole.
	c3 := c2.with(assistant(txt("found it", "")), user(txt("thanks", "")))
	u3 := usageOf(t, f.send("sk-a", c3.body()).Get("usage"))
	if want := u2.read + u2.w5m; u3.read != want {
		t.Errorf("call 3 read %d, want call 2's prefix %d", u3.read, want)
	}

	t.Run("clearing inputs too changes the prompt at the first tool_use", func(t *testing.T) {
		f := newCacheFake(t, CacheOptions{})
		f.send("sk-a", cachedToolLoop(3, clearInputs).body())
		var system int64
		for _, e := range f.api.CacheEntries() {
			if e.Path == "system.0" {
				system = e.Tokens
			}
		}
		u := usageOf(t, f.send("sk-a", cachedToolLoop(4, clearInputs).body()).Get("usage"))
		if u.read != system {
			t.Errorf("read %d, want the system prefix %d", u.read, system)
		}
	})
}

func TestCacheThinkingEdits(t *testing.T) {
	thinkingOn := `"thinking":{"type":"enabled","budget_tokens":1024}`
	// Two assistant turns with thinking; a marker on the first user turn
	// ends an entry right before the first thinking block.
	c := conv{extra: []string{thinkingOn, auto},
		msgs: []string{user(txt(words(2000), mark5m)), assistant(thinkingBlock(words(1500)), txt("a", "")), user(txt("b", "")),
			assistant(thinkingBlock(words(1500)), txt("c", "")), user(txt("d", ""))}}
	keepAll := c.plus(`"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]}`)
	keepAllObj := c.plus(`"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":{"type":"all"}}]}`)
	keepOne := c.plus(`"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":1}}]}`)
	cases := []struct {
		name          string
		first, second conv
		model         string
		opts          CacheOptions
		read          string // "all" (the whole first prefix) or "first" (up to the first thinking block)
	}{
		{"keep all changes nothing: a request without the edit reads it", keepAll, c, "", CacheOptions{}, "all"},
		{"keep {type: all} changes nothing either", c, keepAllObj, "", CacheOptions{}, "all"},
		{"clearing a thinking turn misses from the cleared block on", c, keepOne, "", CacheOptions{}, "first"},
		{"the same clearing again reads it all", keepOne, keepOne, "", CacheOptions{}, "all"},
		{"a last-turn-only model strips earlier thinking after a new user text", c.with(), c, "claude-sonnet-4-5", CacheOptions{}, "all"},
		{"strip_prior_thinking never keeps it", c, c, "claude-sonnet-4-5", CacheOptions{StripPriorThinking: "never"}, "all"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newCacheFake(t, tc.opts)
			first, second := tc.first, tc.second
			first.model, second.model = tc.model, tc.model
			u1 := usageOf(t, f.send("sk-a", first.body()).Get("usage"))
			var firstEntry int64
			for _, e := range f.api.CacheEntries() {
				if e.Path == "messages.0.content.0" {
					firstEntry = e.Tokens
				}
			}
			u2 := usageOf(t, f.send("sk-a", second.body()).Get("usage"))
			want := u1.w5m
			if tc.read == "first" {
				want = firstEntry
			}
			if u2.read != want {
				t.Errorf("read %d, want %s = %d (first call %+v)", u2.read, tc.read, want, u1)
			}
		})
	}
	t.Run("on a last-turn-only model a new user text turn misses from the earlier thinking", func(t *testing.T) {
		loop := conv{model: "claude-sonnet-4-5", extra: []string{thinkingOn, auto},
			msgs: []string{user(txt(words(5000), mark5m)), assistant(thinkingBlock(words(1500)), toolUseBlock("t1", "a", `{}`)),
				user(toolResultBlock("t1", words(500), ""))}}
		for _, strip := range []string{"by_model", "never"} {
			f := newCacheFake(t, CacheOptions{StripPriorThinking: strip})
			u1 := usageOf(t, f.send("sk-a", loop.body()).Get("usage"))
			next := loop.with(assistant(txt("done", "")), user(txt("new question", "")))
			u2 := usageOf(t, f.send("sk-a", next.body()).Get("usage"))
			var userEntry int64
			for _, e := range f.api.CacheEntries() {
				if e.Path == "messages.0.content.0" {
					userEntry = e.Tokens
				}
			}
			want := u1.w5m
			if strip == "by_model" {
				want = userEntry
			}
			if u2.read != want {
				t.Errorf("%s: read %d, want %d", strip, u2.read, want)
			}
		}
	})
}

// Parameters outside the blocks invalidate the level the spec gives them.
func TestCacheParameterLevels(t *testing.T) {
	tools := `[{"name":"a","input_schema":{"type":"object"},"cache_control":` + mark5m + `}]`
	base := conv{tools: tools, system: systemBlock(words(3000), mark5m), msgs: baseConv().msgs}.plus(auto)
	withWeb := base
	withWeb.tools = `[{"name":"a","input_schema":{"type":"object"},"cache_control":` + mark5m + `},{"type":"web_search_20250305","name":"web_search"}]`
	cases := []struct {
		name   string
		opts   CacheOptions
		second conv
		read   string // "all", "system", "tools", "none"
	}{
		{"the same request reads it all", CacheOptions{}, base, "all"},
		{"tool_choice keeps tools and system", CacheOptions{}, base.plus(`"tool_choice":{"type":"any"}`), "system"},
		{"thinking keeps tools and system", CacheOptions{}, base.plus(`"thinking":{"type":"enabled","budget_tokens":2000}`), "system"},
		{"thinking_level tools: thinking keeps only tools", CacheOptions{ThinkingLevel: "tools"}, base.plus(`"thinking":{"type":"enabled","budget_tokens":2000}`), "tools"},
		{"effort high is the default", CacheOptions{}, base.plus(`"output_config":{"effort":"high"}`), "all"},
		{"effort low keeps tools and system", CacheOptions{}, base.plus(`"output_config":{"effort":"low"}`), "system"},
		{"a web search tool keeps the tools cache only", CacheOptions{}, withWeb, "tools"},
		{"speed keeps the tools cache only", CacheOptions{}, base.plus(`"speed":"fast"`), "tools"},
		{"speed_level none: speed changes nothing", CacheOptions{SpeedLevel: "none"}, base.plus(`"speed":"fast"`), "all"},
		{"context_management is not in the key by default", CacheOptions{}, base.plus(`"context_management":{"edits":[]}`), "all"},
		{"context_management_in_key: it is", CacheOptions{ContextManagementInKey: On}, base.plus(`"context_management":{"edits":[]}`), "system"},
		{"a tool definition changes everything", CacheOptions{}, conv{tools: `[{"name":"b","input_schema":{"type":"object"},"cache_control":` + mark5m + `}]`, system: base.system, msgs: base.msgs, extra: base.extra}, "none"},
		{"a cache_control moved is not a change", CacheOptions{}, conv{tools: tools, system: systemBlock(words(3000), ""), msgs: baseConv().msgs}.plus(auto), "all"},
		{"an image anywhere keeps tools and system", CacheOptions{}, base.with(assistant(txt("x", "")),
			user(`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}`, txt("see", ""))), "system"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newCacheFake(t, c.opts)
			u1 := usageOf(t, f.send("sk-a", base.body()).Get("usage"))
			at := map[string]int64{"all": u1.w5m}
			for _, e := range f.api.CacheEntries() {
				switch e.Path {
				case "system.0":
					at["system"] = e.Tokens
				case "tools.0":
					at["tools"] = e.Tokens
				}
			}
			u2 := usageOf(t, f.send("sk-a", c.second.body()).Get("usage"))
			if u2.read != at[c.read] {
				t.Errorf("read %d, want %s (%d); entries %v", u2.read, c.read, at[c.read], entryPaths(f.api, "sk-a"))
			}
		})
	}
}

func TestCacheBetasInKey(t *testing.T) {
	b := baseConv().plus(auto).body()
	cases := []struct {
		name, mode, beta string
		hit              bool
	}{
		{"betas are not in the key by default", "", "fast-mode-2026-02-01", true},
		{"fast_mode: a fast-mode beta is", "fast_mode", "fast-mode-2026-02-01", false},
		{"fast_mode: another beta is not", "fast_mode", "files-api-2025-04-14", true},
		{"all: any beta is", "all", "files-api-2025-04-14", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newCacheFake(t, CacheOptions{BetasInKey: c.mode})
			f.send("sk-a", b)
			resp, out := do(t, f.base, call{body: b, header: map[string]string{"Anthropic-Beta": defaultBetas + "," + c.beta, "X-Api-Key": "sk-a"}})
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, out)
			}
			if u := usageOf(t, gjson.GetBytes(out, "usage")); (u.read > 0) != c.hit {
				t.Errorf("usage %+v, want hit %v", u, c.hit)
			}
		})
	}
}

func TestCacheHiddenSystemMessages(t *testing.T) {
	note := `{"role":"system","content":"reminder","clear_at":"next_user_message"}`
	first := conv{msgs: []string{user(txt(words(2000), "")), note}}.plus(auto)
	second := first.with(assistant(txt("ok", "")), user(txt("next", "")))
	for _, c := range []struct {
		hides Switch
		hit   bool
	}{{"", false}, {Off, true}} {
		t.Run("clear_at_hides="+string(c.hides), func(t *testing.T) {
			f := newCacheFake(t, CacheOptions{ClearAtHides: c.hides})
			f.send("sk-a", first.body())
			// Once a user message follows it, the note is gone from the
			// prompt, and the first call's entry (which ended on it) misses.
			if u := usageOf(t, f.send("sk-a", second.body()).Get("usage")); (u.read > 0) != c.hit {
				t.Errorf("usage %+v, want hit %v", u, c.hit)
			}
		})
	}
}

func TestCacheThreadsSeeTheWholeConversation(t *testing.T) {
	f := newCacheFake(t, CacheOptions{})
	first := conv{system: systemBlock(words(3000), mark5m), msgs: []string{user(txt(words(500), ""))}}.plus(auto, `"thread":{"type":"create"}`)
	r1 := f.send("sk-a", first.body())
	u1 := usageOf(t, r1.Get("usage"))
	next := conv{msgs: []string{user(txt("and then?", ""))}}.plus(auto, `"thread":{"type":"continue","previous_message_id":"`+r1.Get("id").Str+`"}`)
	u2 := usageOf(t, f.send("sk-a", next.body()).Get("usage"))
	if u2.read != u1.w5m {
		t.Errorf("continue read %d, want the create's %d", u2.read, u1.w5m)
	}
}

func TestCacheCompactionIterations(t *testing.T) {
	f := newCacheFake(t, CacheOptions{})
	b := conv{system: systemBlock(words(4000), mark5m), msgs: []string{user(txt(words(220000), "")),
		assistant(txt("noted", "")), user(txt("go on", ""))}}.plus(auto, `"context_management":{"edits":[`+compactEdit+`]}`).body()
	r := f.send("sk-a", b)
	its := r.Get("usage.iterations").Array()
	if len(its) != 2 || its[0].Get("type").Str != "compaction" || its[1].Get("type").Str != "message" {
		t.Fatalf("iterations %s", r.Get("usage.iterations").Raw)
	}
	var system int64
	for _, e := range f.api.CacheEntries() {
		if e.Path == "system.0" {
			system = e.Tokens
		}
	}
	comp, msg := usageOf(t, its[0]), usageOf(t, its[1])
	// The compaction iteration writes the system prefix and the whole
	// conversation; the message iteration then reads the system prefix it
	// wrote and writes the summary and the last turn.
	if comp.read != 0 || comp.w5m != f.count(b)-comp.input {
		t.Errorf("compaction iteration %+v", comp)
	}
	if msg.read != system || msg.w5m == 0 {
		t.Errorf("message iteration %+v, want read %d", msg, system)
	}
	if top := usageOf(t, r.Get("usage")); top != msg {
		t.Errorf("top-level usage %+v is not the message iteration %+v", top, msg)
	}
}

// httpPost posts a JSON body to a control endpoint.
func httpPost(url, body string) (getResult, error) {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return getResult{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return getResult{resp.StatusCode, resp.Header, string(b)}, err
}
