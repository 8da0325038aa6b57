package fakeapi

import (
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

func diagConv() conv {
	return conv{
		tools:  `[{"name":"a","input_schema":{"type":"object"}},{"name":"b","input_schema":{"type":"object"}}]`,
		system: `[` + txt(words(2000), "") + `,` + txt(words(1000), "") + `]`,
		msgs:   []string{user(txt(words(800), "")), assistant(txt(words(400), "")), user(txt(words(300), ""))},
	}.plus(auto)
}

func asking(c conv, prev string) conv {
	if prev == "" {
		return c.plus(`"diagnostics":{"previous_message_id":null}`)
	}
	return c.plus(`"diagnostics":{"previous_message_id":"` + prev + `"}`)
}

func TestCacheDiagnosticsReasons(t *testing.T) {
	type want struct {
		typ    string // "" for "diagnostics": null
		missed string // "total", "less", "none" (no field)
	}
	edited := diagConv()
	edited.msgs = append([]string{user(txt("changed "+words(800), ""))}, edited.msgs[1:]...)
	cases := []struct {
		name  string
		opts  CacheOptions
		first conv // asked with previous_message_id null unless noAsk
		noAsk bool
		next  func(prev string) conv
		key   string
		wait  time.Duration
		want  want
	}{
		{name: "an appended turn diverges nowhere",
			next: func(p string) conv { return asking(diagConv().with(assistant(txt("x", "")), user(txt("y", ""))), p) }},
		{name: "the same request again diverges nowhere, even once the cache expired", wait: 30 * time.Minute,
			next: func(p string) conv { return asking(diagConv(), p) }},
		{name: "a moved cache_control is no divergence",
			next: func(p string) conv {
				c := diagConv()
				c.system = `[` + txt(words(2000), mark5m) + `,` + txt(words(1000), "") + `]`
				return asking(c, p)
			}},
		{name: "a changed model", want: want{"model_changed", "total"},
			next: func(p string) conv { c := diagConv(); c.model = "claude-other"; return asking(c, p) }},
		{name: "a changed speed counts as a model change", want: want{"model_changed", "total"},
			next: func(p string) conv { return asking(diagConv().plus(`"speed":"fast"`), p) }},
		{name: "a changed first tool misses everything", want: want{"tools_changed", "total"},
			next: func(p string) conv {
				c := diagConv()
				c.tools = `[{"name":"a2","input_schema":{"type":"object"}},{"name":"b","input_schema":{"type":"object"}}]`
				return asking(c, p)
			}},
		{name: "a changed second system block", want: want{"system_changed", "less"},
			next: func(p string) conv {
				c := diagConv()
				c.system = `[` + txt(words(2000), "") + `,` + txt("other", "") + `]`
				return asking(c, p)
			}},
		{name: "an edited earlier message", want: want{"messages_changed", "less"},
			next: func(p string) conv { return asking(edited.with(assistant(txt("x", "")), user(txt("y", ""))), p) }},
		{name: "a truncated history", want: want{"messages_changed", "less"},
			next: func(p string) conv { c := diagConv(); c.msgs = c.msgs[:1]; return asking(c, p) }},
		{name: "a changed tool_choice cannot be diagnosed", want: want{"unavailable", "none"},
			next: func(p string) conv { return asking(diagConv().plus(`"tool_choice":{"type":"auto"}`), p) }},
		{name: "changed context_management cannot be diagnosed", want: want{"unavailable", "none"},
			next: func(p string) conv { return asking(diagConv().plus(`"context_management":{"edits":[]}`), p) }},
		{name: "an unknown id", want: want{"previous_message_not_found", "none"},
			next: func(string) conv { return asking(diagConv(), "msg_unknown") }},
		{name: "a previous request that did not ask left no fingerprint", noAsk: true, want: want{"previous_message_not_found", "none"},
			next: func(p string) conv { return asking(diagConv(), p) }},
		{name: "another credential's fingerprint is not found", key: "sk-other", want: want{"previous_message_not_found", "none"},
			next: func(p string) conv { return asking(diagConv(), p) }},
		{name: "a fingerprint is kept an hour", wait: time.Hour, want: want{"previous_message_not_found", "none"},
			next: func(p string) conv { return asking(diagConv(), p) }},
		{name: "fingerprint_ttl keeps it longer", opts: CacheOptions{FingerprintTTL: "2h"}, wait: time.Hour,
			next: func(p string) conv { return asking(diagConv(), p) }},
		{name: "past the horizon a messages change cannot be diagnosed", opts: CacheOptions{DiagnosticsHorizon: 2}, want: want{"unavailable", "none"},
			next: func(p string) conv { return asking(edited.with(assistant(txt("x", "")), user(txt("y", ""))), p) }},
		{name: "within the horizon it can", opts: CacheOptions{DiagnosticsHorizon: 10}, want: want{"messages_changed", "less"},
			next: func(p string) conv { return asking(edited.with(assistant(txt("x", "")), user(txt("y", ""))), p) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newCacheFake(t, c.opts)
			first := asking(diagConv(), "")
			if c.noAsk {
				first = diagConv()
			}
			r1 := f.send("sk-a", first.body())
			if d := r1.Get("diagnostics"); d.Type != gjson.Null || !d.Exists() {
				t.Fatalf("first reply diagnostics %s, want null", d.Raw)
			}
			f.api.AdvanceClock(c.wait)
			key := c.key
			if key == "" {
				key = "sk-a"
			}
			r2 := f.send(key, c.next(r1.Get("id").Str).body())
			d := r2.Get("diagnostics")
			if c.want.typ == "" {
				if !d.Exists() || d.Type != gjson.Null {
					t.Fatalf("diagnostics %s, want null", d.Raw)
				}
				return
			}
			reason := d.Get("cache_miss_reason")
			if got := reason.Get("type").Str; got != c.want.typ {
				t.Fatalf("diagnostics %s, want %s", d.Raw, c.want.typ)
			}
			// The previous request's total: what a model change misses.
			f2 := newCacheFake(t, c.opts)
			m := f2.send("sk-a", first.body())
			mc := diagConv()
			mc.model = "claude-other"
			total := f2.send("sk-a", asking(mc, m.Get("id").Str).body()).Get("diagnostics.cache_miss_reason.cache_missed_input_tokens").Int()
			missed := reason.Get("cache_missed_input_tokens")
			switch c.want.missed {
			case "none":
				if missed.Exists() {
					t.Errorf("%s carries cache_missed_input_tokens: %s", c.want.typ, d.Raw)
				}
			case "total":
				if missed.Int() != total || total <= 0 {
					t.Errorf("missed %s, want the previous total %d", missed.Raw, total)
				}
			case "less":
				if n := missed.Int(); n <= 0 || n >= total {
					t.Errorf("missed %s, want between 0 and %d", missed.Raw, total)
				}
			}
		})
	}
}

// The tokens a change misses shrink the later the first divergence lies.
func TestCacheDiagnosticsMissedTokensFollowTheDivergence(t *testing.T) {
	f := newCacheFake(t, CacheOptions{})
	missed := func(change func(*conv)) int64 {
		r1 := f.send("sk-a", asking(diagConv(), "").body())
		c := diagConv()
		change(&c)
		return f.send("sk-a", asking(c, r1.Get("id").Str).body()).Get("diagnostics.cache_miss_reason.cache_missed_input_tokens").Int()
	}
	tools := missed(func(c *conv) { c.tools = `[{"name":"z","input_schema":{"type":"object"}}]` })
	system := missed(func(c *conv) { c.system = `"short"` })
	firstMsg := missed(func(c *conv) { c.msgs = append([]string{user(txt("other", ""))}, c.msgs[1:]...) })
	lastMsg := missed(func(c *conv) { c.msgs = append(append([]string(nil), c.msgs[:2]...), user(txt("other", ""))) })
	if !(tools > system && system > firstMsg && firstMsg > lastMsg && lastMsg > 0) {
		t.Errorf("missed: tools %d, system %d, first message %d, last message %d", tools, system, firstMsg, lastMsg)
	}
}

func TestCacheDiagnosticsShapes(t *testing.T) {
	cases := []struct {
		name   string
		opts   CacheOptions
		asked  bool
		prev   bool // previous_message_id is the first reply's id (else null)
		stream bool
		want   string // the diagnostics member as sent; "absent" for none
	}{
		{"a request that did not ask gets null", CacheOptions{}, false, false, false, "null"},
		{"streamed too", CacheOptions{}, false, false, true, "null"},
		{"diagnostics_absent omit leaves the field out", CacheOptions{DiagnosticsAbsent: "omit"}, false, false, false, "absent"},
		{"previous_message_id null gets null", CacheOptions{}, true, false, false, "null"},
		{"no divergence gets null", CacheOptions{}, true, true, false, "null"},
		{"pending always", CacheOptions{DiagnosticsPending: "always"}, true, true, false, `{"cache_miss_reason":null}`},
		{"pending streams: a plain reply gets the diagnosis", CacheOptions{DiagnosticsPending: "streams"}, true, true, false, "null"},
		{"pending streams: a stream gets pending", CacheOptions{DiagnosticsPending: "streams"}, true, true, true, `{"cache_miss_reason":null}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newCacheFake(t, c.opts)
			r1 := f.send("sk-a", asking(diagConv(), "").body())
			next := diagConv()
			if c.asked {
				id := ""
				if c.prev {
					id = r1.Get("id").Str
				}
				next = asking(next, id)
			}
			var msg gjson.Result
			if c.stream {
				start, delta, evs := f.stream("sk-a", next.body())
				msg = start
				if delta.Get("diagnostics").Exists() {
					t.Errorf("message_delta carries diagnostics: %s", delta.Raw)
				}
				for _, e := range evs {
					if e.name != "message_start" && strings.Contains(e.data, `"diagnostics"`) {
						t.Errorf("%s carries diagnostics", e.name)
					}
				}
			} else {
				msg = f.send("sk-a", next.body())
			}
			d := msg.Get("diagnostics")
			got := d.Raw
			if !d.Exists() {
				got = "absent"
			}
			if got != c.want {
				t.Errorf("diagnostics %s, want %s", got, c.want)
			}
		})
	}
}

// Server-side clearing: as sent, the requests only append (null); seen as
// the prompt after the edits, the earlier result changed.
func TestCacheDiagnosticsViewOfServerSideClearing(t *testing.T) {
	clear := `{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":3},"keep":{"type":"tool_uses","value":1}}`
	for _, c := range []struct {
		view, want string
	}{{"", ""}, {"request", ""}, {"prompt", "messages_changed"}} {
		t.Run("view "+c.view, func(t *testing.T) {
			f := newCacheFake(t, CacheOptions{DiagnosticsView: c.view})
			r1 := f.send("sk-a", asking(cachedToolLoop(3, clear), "").body())
			r2 := f.send("sk-a", asking(cachedToolLoop(4, clear), r1.Get("id").Str).body())
			if n := r2.Get("context_management.applied_edits.0.cleared_tool_uses").Int(); n != 3 {
				t.Fatalf("cleared %d", n)
			}
			u := usageOf(t, r2.Get("usage"))
			if u.read == 0 || u.w5m == 0 {
				t.Errorf("the clearing should read up to the cleared result and write after it: %+v", u)
			}
			if got := r2.Get("diagnostics.cache_miss_reason.type").Str; got != c.want {
				t.Errorf("diagnostics %s, want %q", r2.Get("diagnostics").Raw, c.want)
			}
		})
	}
}

func TestCacheStreamedUsageMatchesThePlainReply(t *testing.T) {
	c := conv{system: systemBlock(words(3000), mark1h), msgs: baseConv().msgs}.plus(auto)
	plain := newCacheFake(t, CacheOptions{})
	streamed := newCacheFake(t, CacheOptions{})
	for call := 1; call <= 2; call++ {
		want := plain.send("sk-a", asking(c, "").body())
		start, delta, _ := streamed.stream("sk-a", asking(c, "").body())
		u, su := usageOf(t, want.Get("usage")), usageOf(t, start.Get("usage"))
		if u != su {
			t.Errorf("call %d: message_start usage %+v, plain %+v", call, su, u)
		}
		if call == 1 && (u.w1h == 0 || u.w5m == 0) || call == 2 && u.read == 0 {
			t.Errorf("call %d: usage %+v", call, u)
		}
		if start.Get("usage.output_tokens").Int() != 1 {
			t.Errorf("message_start output_tokens %d", start.Get("usage.output_tokens").Int())
		}
		du := delta.Get("usage")
		if du.Get("cache_creation").Exists() {
			t.Errorf("message_delta repeats cache_creation: %s", du.Raw)
		}
		if du.Get("input_tokens").Int() != u.input || du.Get("cache_read_input_tokens").Int() != u.read ||
			du.Get("cache_creation_input_tokens").Int() != u.w5m+u.w1h || du.Get("output_tokens").Int() != want.Get("usage.output_tokens").Int() {
			t.Errorf("call %d: message_delta usage %s, plain %s", call, du.Raw, want.Get("usage").Raw)
		}
		if start.Get("diagnostics").Raw != "null" {
			t.Errorf("message_start diagnostics %s", start.Get("diagnostics").Raw)
		}
	}
}
