package fakeapi

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// cacheFake is a fake with the prompt cache model on.
type cacheFake struct {
	t    *testing.T
	api  *API
	base string
}

// newCacheFake turns the cache on over o. Unless o says otherwise, unknown
// models (the tests' claude-test) cache from 1 token, so a test's prefixes
// need not be large.
func newCacheFake(t *testing.T, o CacheOptions, opts ...Option) *cacheFake {
	t.Helper()
	o.Cache = On
	if o.MinTokensDefault == 0 {
		o.MinTokensDefault = 1
	}
	opts = append([]Option{WithOptions(Options{CacheOptions: o})}, opts...)
	api, base := newServer(t, opts...)
	return &cacheFake{t, api, base}
}

// send posts body with the credential key and returns the reply (200 or the test fails).
func (f *cacheFake) send(key, body string) gjson.Result {
	f.t.Helper()
	resp, out := do(f.t, f.base, call{body: body, header: map[string]string{"X-Api-Key": key}})
	if resp.StatusCode != 200 {
		f.t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	return gjson.ParseBytes(out)
}

// stream posts body as a stream and returns message_start.message and the
// message_delta event.
func (f *cacheFake) stream(key, body string) (start, delta gjson.Result, evs []event) {
	f.t.Helper()
	body = streaming(body)
	resp, out := do(f.t, f.base, call{body: body, header: map[string]string{"X-Api-Key": key}})
	if resp.StatusCode != 200 {
		f.t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	evs, err := parseSSE(f.t, bytes.NewReader(out))
	if err != nil {
		f.t.Fatal(err)
	}
	for _, e := range evs {
		switch e.name {
		case "message_start":
			start = gjson.Get(e.data, "message")
		case "message_delta":
			delta = gjson.Parse(e.data)
		}
	}
	return start, delta, evs
}

func streaming(body string) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		panic(err)
	}
	m["stream"] = json.RawMessage("true")
	out, _ := json.Marshal(m)
	return string(out)
}

// count is count_tokens' input_tokens for body.
func (f *cacheFake) count(body string) int64 {
	f.t.Helper()
	resp, out := do(f.t, f.base, call{path: "/v1/messages/count_tokens", body: body})
	if resp.StatusCode != 200 {
		f.t.Fatalf("count_tokens status %d: %s", resp.StatusCode, out)
	}
	return gjson.GetBytes(out, "input_tokens").Int()
}

// use is a reply's input-side usage.
type use struct{ read, w5m, w1h, input int64 }

func (u use) total() int64 { return u.read + u.w5m + u.w1h + u.input }

// usageOf reads usage and checks that cache_creation_input_tokens is the
// sum of its split.
func usageOf(t *testing.T, u gjson.Result) use {
	t.Helper()
	got := use{u.Get("cache_read_input_tokens").Int(), u.Get("cache_creation.ephemeral_5m_input_tokens").Int(),
		u.Get("cache_creation.ephemeral_1h_input_tokens").Int(), u.Get("input_tokens").Int()}
	if c := u.Get("cache_creation_input_tokens").Int(); c != got.w5m+got.w1h {
		t.Errorf("cache_creation_input_tokens %d, split %d + %d", c, got.w5m, got.w1h)
	}
	if !u.Get("cache_creation").IsObject() {
		t.Errorf("usage has no cache_creation: %s", u.Raw)
	}
	return got
}

// conv builds a request body.
type conv struct {
	model  string   // default claude-test
	system string   // raw JSON; "" for none
	tools  string   // raw JSON array; "" for none
	msgs   []string // raw JSON messages
	extra  []string // raw top-level members, e.g. `"cache_control":{"type":"ephemeral"}`
}

func (c conv) body() string {
	model := c.model
	if model == "" {
		model = "claude-test"
	}
	var b strings.Builder
	b.WriteString(`{"model":"` + model + `","max_tokens":2048`)
	if c.system != "" {
		b.WriteString(`,"system":` + c.system)
	}
	if c.tools != "" {
		b.WriteString(`,"tools":` + c.tools)
	}
	for _, e := range c.extra {
		b.WriteString("," + e)
	}
	b.WriteString(`,"messages":[` + strings.Join(c.msgs, ",") + `]}`)
	return b.String()
}

// with returns c with more messages (the slice is copied).
func (c conv) with(msgs ...string) conv {
	c.msgs = append(append([]string(nil), c.msgs...), msgs...)
	return c
}

func (c conv) plus(extra ...string) conv {
	c.extra = append(append([]string(nil), c.extra...), extra...)
	return c
}

const (
	auto    = `"cache_control":{"type":"ephemeral"}`
	auto1h  = `"cache_control":{"type":"ephemeral","ttl":"1h"}`
	mark5m  = `{"type":"ephemeral"}`
	mark1h  = `{"type":"ephemeral","ttl":"1h"}`
	noDiags = ""
)

// words is n bytes of text.
func words(n int) string { return strings.Repeat("lorem ipsu", n/10+1)[:n] }

// txt is a text block, with a cache_control when cc is not "".
func txt(s, cc string) string {
	b, _ := json.Marshal(s)
	if cc == "" {
		return `{"type":"text","text":` + string(b) + `}`
	}
	return `{"type":"text","text":` + string(b) + `,"cache_control":` + cc + `}`
}

func user(blocks ...string) string {
	return `{"role":"user","content":[` + strings.Join(blocks, ",") + `]}`
}

func assistant(blocks ...string) string {
	return `{"role":"assistant","content":[` + strings.Join(blocks, ",") + `]}`
}

func toolUseBlock(id, name, input string) string {
	return `{"type":"tool_use","id":"` + id + `","name":"` + name + `","input":` + input + `}`
}

func toolResultBlock(id, content, cc string) string {
	b, _ := json.Marshal(content)
	s := `{"type":"tool_result","tool_use_id":"` + id + `","content":` + string(b)
	if cc != "" {
		s += `,"cache_control":` + cc
	}
	return s + `}`
}

func thinkingBlock(text string) string {
	b, _ := json.Marshal(text)
	return `{"type":"thinking","thinking":` + string(b) + `,"signature":"sig"}`
}

// systemBlock is a one-block system array.
func systemBlock(text, cc string) string { return `[` + txt(text, cc) + `]` }

// entryPaths lists the live entries' paths (with TTL) for one credential.
func entryPaths(api *API, credential string) []string {
	var out []string
	for _, e := range api.CacheEntries() {
		if e.Credential == credential {
			out = append(out, e.Path+"@"+e.TTL)
		}
	}
	return out
}
