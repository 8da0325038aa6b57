package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/stack"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// Savings net of the prompt cache, through the built binary against the fake with
// its cache on: a clearing first costs the cache it invalidates, then pays off.

const savingsKey = "sk-ant-savings-test"

// Prices of claude-sonnet-4-5 in nano-USD per token (USD per million tokens × 1000): input 3,
// cache read 0.30, 5-minute cache write 3.75.
const (
	sonnetInput = 3000
	sonnetRead  = 300
	sonnetWrite = 3750
	// sonnetWrite1h is the 1-hour cache write, 6 USD per million.
	sonnetWrite1h = 6000
)

// savingsStack is the binary in front of an in-process fake whose prompt cache is on, with
// tenants "clears" (clear_tool_uses once a conversation has made 3 tool uses, keeping 1, never
// clearing the tool "note") and "quiet" (the same edits, accounting.cache_diagnostics false).
type savingsStack struct {
	fake   *fakeapi.API
	proc   interface{ Log() string }
	addr   string
	debug  string
	ledger string
}

const clearingPolicy = `context_management:
  clear_tool_uses:
    trigger: { type: tool_uses, value: 2 }
    keep: { type: tool_uses, value: 1 }
    exclude_tools: [note]
`

func newSavingsStack(t *testing.T, flags ...string) *savingsStack {
	t.Helper()
	dir, _, err := stack.Layout(t.TempDir(), map[string]string{
		"clears.yaml": stack.TenantPolicy("clears", savingsKey, clearingPolicy),
		"quiet.yaml":  stack.TenantPolicy("quiet", savingsKey+"-quiet", clearingPolicy+"accounting:\n  cache_diagnostics: false\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	fake := fakeapi.New(fakeapi.WithOptions(fakeapi.Options{CacheOptions: fakeapi.CacheOptions{
		Cache: fakeapi.On, MinTokens: map[string]int64{"claude-sonnet-4-5": 1}}}))
	srv := httpTestServer(t, fake)
	fake.SetResponder(conversationReplies)
	ledger := filepath.Join(t.TempDir(), "ledger.jsonl")
	p := startProxy(t, append([]string{"--upstream", srv, "--policies", dir, "--memory-dir", t.TempDir(),
		"--ledger", "file:" + ledger, "--admin-token", "adm", "--debug-addr", "127.0.0.1:0", "--debug-manual-clock"}, flags...)...)
	return &savingsStack{fake: fake, proc: p, addr: p.Addr, debug: p.Addrs["debug listening"], ledger: ledger}
}

// conversationReplies answers step n of a conversation (n = the assistant turns it has sent):
// three calls of the tool "read", then calls of "note", each with an id of its own.
func conversationReplies(r *fakeapi.Request) fakeapi.Reply {
	tag := gjson.GetBytes(r.Body, "messages.0.content").Str
	n := 0
	gjson.GetBytes(r.Body, "messages").ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").Str == "assistant" {
			n++
		}
		return true
	})
	name := "read"
	if n >= 3 {
		name = "note"
	}
	return fakeapi.Blocks(fakeapi.Text(fmt.Sprintf("step %d", n)),
		fakeapi.ToolUse(fmt.Sprintf("toolu_%s_%d", strings.ReplaceAll(tag, " ", "_"), n), name, map[string]string{"step": fmt.Sprint(n)}))
}

// advanceClocks pauses the conversation for d: the fake's cache clock and ctxproxy's.
func (s *savingsStack) advanceClocks(t *testing.T, d string) {
	t.Helper()
	s.fake.AdvanceClock(mustDuration(t, d))
	resp, err := http.Post("http://"+s.debug+"/debug/clock", "application/json", strings.NewReader(`{"advance":"`+d+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /debug/clock: %d", resp.StatusCode)
	}
}

// conversation is a client that resends its whole history, as the SDKs do.
type conversation struct {
	key, system string
	stream      bool
	noCache     bool   // no cache_control: the request caches nothing
	readBytes   int    // what the tool "read" answers; 4,000 bytes when 0
	ttl         string // the cache's TTL, "1h"; "" for the default 5 minutes
	messages    []json.RawMessage
	replies     []string // each reply as the client got it (a stream: its events)
	sent        []string // each request's body as the client sent it
	headers     []http.Header
}

func newConversation(key, tag string, stream bool) *conversation {
	c := &conversation{key: key, system: "You are a careful agent.", stream: stream}
	c.messages = append(c.messages, json.RawMessage(`{"role":"user","content":`+jsonString(tag)+`}`))
	return c
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

// call sends the conversation with automatic caching, keeps the reply's turn, and answers its
// tool use: a tool "read" with 4,000 bytes, a "note" with a line.
func (c *conversation) call(t *testing.T, addr string) {
	t.Helper()
	cache := `"cache_control":{"type":"ephemeral"},`
	if c.ttl != "" {
		cache = `"cache_control":{"type":"ephemeral","ttl":"` + c.ttl + `"},`
	}
	if c.noCache {
		cache = ""
	}
	body := fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":256,"stream":%v,%s`+
		`"system":%s,"tools":[{"name":"read","input_schema":{"type":"object"}},{"name":"note","input_schema":{"type":"object"}}],"messages":[%s]}`,
		c.stream, cache, jsonString(c.system), joinRaw(c.messages))
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/messages", strings.NewReader(body))
	req.Header.Set("X-Api-Key", c.key)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("call %d: %d %s", len(c.replies)+1, resp.StatusCode, got)
	}
	c.replies = append(c.replies, string(got))
	c.sent = append(c.sent, body)
	c.headers = append(c.headers, resp.Header)
	content := gjson.GetBytes(got, "content").Raw
	if c.stream {
		content = streamedContent(t, got)
	}
	c.messages = append(c.messages, json.RawMessage(`{"role":"assistant","content":`+content+`}`))
	tool := gjson.Get(content, `#(type=="tool_use")`)
	result := "noted"
	if tool.Get("name").Str == "read" {
		result = strings.Repeat("file contents ", max(c.readBytes, 4000)/14)
	}
	c.messages = append(c.messages, json.RawMessage(`{"role":"user","content":[{"type":"tool_result","tool_use_id":`+
		jsonString(tool.Get("id").Str)+`,"content":`+jsonString(result)+`}]}`))
}

// streamedContent is the content a stream's events build, as an SDK accumulates it.
func streamedContent(t *testing.T, stream []byte) string {
	t.Helper()
	var blocks []string
	for _, line := range strings.Split(string(stream), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		switch gjson.Get(data, "type").Str {
		case "content_block_start":
			blocks = append(blocks, gjson.Get(data, "content_block").Raw)
		case "content_block_delta":
			i := int(gjson.Get(data, "index").Int())
			d := gjson.Get(data, "delta")
			switch d.Get("type").Str {
			case "text_delta":
				blocks[i], _ = sjson.Set(blocks[i], "text", gjson.Get(blocks[i], "text").Str+d.Get("text").Str)
			case "input_json_delta":
				partial := gjson.Get(blocks[i], "_partial").Str + d.Get("partial_json").Str
				blocks[i], _ = sjson.Set(blocks[i], "_partial", partial)
			}
		case "content_block_stop":
			i := int(gjson.Get(data, "index").Int())
			if p := gjson.Get(blocks[i], "_partial"); p.Exists() {
				blocks[i], _ = sjson.SetRaw(blocks[i], "input", p.Str)
				blocks[i], _ = sjson.Delete(blocks[i], "_partial")
			}
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("a stream without content blocks:\n%s", stream)
	}
	return "[" + strings.Join(blocks, ",") + "]"
}

func joinRaw(ms []json.RawMessage) string {
	var b bytes.Buffer
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	return b.String()
}

// lines are the ledger's lines of tenant, once it holds n lines in all.
func (s *savingsStack) lines(t *testing.T, n int, tenant string) []gjson.Result {
	t.Helper()
	all := (&moneyStack{ledger: s.ledger}).ledgerLines(t, n)
	var out []gjson.Result
	for _, l := range all {
		if l.Get("tenant").Str == tenant {
			out = append(out, l)
		}
	}
	return out
}

// cached is what a ledger line's call read from and wrote to the cache: the next call's P.
func cached(l gjson.Result) int64 {
	return l.Get("usage.cache_read_input_tokens").Int() + l.Get("usage.cache_creation_input_tokens").Int()
}

func money(t *testing.T, l gjson.Result, field string) tokens.Money {
	t.Helper()
	m, err := tokens.ParseMoney(l.Get(field).Raw)
	if err != nil {
		t.Fatalf("%s: %v in %s", field, err, l.Raw)
	}
	return m
}

func TestBinarySavingsAreNetOfThePromptCache(t *testing.T) {
	s := newSavingsStack(t)
	total := 0
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v: a clearing costs the cache it invalidates, then saves at the read price", stream), func(t *testing.T) {
			c := newConversation(savingsKey, fmt.Sprintf("go %v", stream), stream)
			total += 6
			checkClearingConversation(t, s, c, total)
		})
	}
	t.Run("with a 1-hour cache the missed tokens are charged at the 1-hour write price", func(t *testing.T) {
		c := newConversation(savingsKey, "go 1h", false)
		c.ttl = "1h"
		total += 6
		checkClearingConversation(t, s, c, total)
	})
	t.Run("the report's savings are the sum of the lines, net", func(t *testing.T) {
		lines := s.lines(t, total, "clears")
		var net, gross, penalty tokens.Money
		for _, l := range lines {
			net += money(t, l, "savings_usd")
			gross += money(t, l, "savings_gross_usd")
			penalty += money(t, l, "cache_penalty_usd")
		}
		rep := s.reportTotals(t, "clears")
		if rep.SavingsUSD != net || rep.SavingsGrossUSD != gross || rep.CachePenaltyUSD != penalty || gross-penalty != net || penalty == 0 {
			t.Errorf("report net %s gross %s penalty %s; lines %s %s %s", rep.SavingsUSD, rep.SavingsGrossUSD, rep.CachePenaltyUSD, net, gross, penalty)
		}
	})
}

// A conversation whose bodies outgrow the short ones (64 KiB, from the second call on) is read
// from the rewrite's own pass, its first call before the rewrite; with --forward-while-reading
// its bodies from 256 KiB (the fourth call on) go while they arrive. The calls are one
// conversation all the same.
func TestBinarySavingsOfLongTranscripts(t *testing.T) {
	for _, flags := range [][]string{nil, {"--forward-while-reading"}} {
		t.Run(fmt.Sprintf("flags %q", flags), func(t *testing.T) {
			s := newSavingsStack(t, flags...)
			total := 0
			for _, stream := range []bool{false, true} {
				t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
					c := newConversation(savingsKey, fmt.Sprintf("long %v", stream), stream)
					c.readBytes = 100_000
					total += 6
					checkClearingConversation(t, s, c, total)
				})
			}
		})
	}
}

// checkClearingConversation makes six calls of c, the ledger's total-th line its last, and
// checks each one's savings: none before the clearing, C × read − M × (write − read) on the
// call where it starts, C × read on the calls after it.
func checkClearingConversation(t *testing.T, s *savingsStack, c *conversation, total int) {
	t.Helper()
	for range 6 {
		c.call(t, s.addr)
	}
	lines := s.lines(t, total, "clears")
	lines = lines[len(lines)-6:]
	for i, l := range lines[:3] {
		if l.Get("cleared_input_tokens").Int() != 0 || money(t, l, "savings_usd") != 0 || l.Get("cache_effect").Str != "none" {
			t.Errorf("call %d, before any clearing: %s", i+1, l.Raw)
		}
	}
	first, prev := lines[3], lines[2]
	C := first.Get("cleared_input_tokens").Int()
	R := first.Get("usage.cache_read_input_tokens").Int()
	M := cached(prev) - R
	// The call's writes are all of one TTL, so M is charged at its write price (M₁ₕ = M or 0).
	write, oneHour := int64(sonnetWrite), int64(0)
	if c.ttl == "1h" {
		write, oneHour = sonnetWrite1h, first.Get("usage.cache_creation_input_tokens").Int()
	}
	if C <= 0 || M <= 0 || first.Get("usage.cache_creation_1h_input_tokens").Int() != oneHour {
		t.Fatalf("the clearing call cleared %d and missed %d: %s", C, M, first.Raw)
	}
	want := tokens.Money(C*sonnetRead - M*(write-sonnetRead))
	if got := money(t, first, "savings_usd"); got != want || want >= 0 {
		t.Errorf("the clearing call saved %s, want C×read − M×(write−read) = %d×%d − %d×%d nano-USD = %s (negative)", got, C, sonnetRead, M, write-sonnetRead, want)
	}
	if first.Get("cache_missed_input_tokens").Int() != M || first.Get("cache_miss_cause").Str != "edits" ||
		first.Get("cache_effect").Str != "measured" || money(t, first, "savings_gross_usd") != tokens.Money(C*sonnetRead) ||
		money(t, first, "cache_penalty_usd") != tokens.Money(M*(write-sonnetRead)) {
		t.Errorf("the clearing call's parts: %s", first.Raw)
	}
	for i, l := range lines[4:] {
		c := l.Get("cleared_input_tokens").Int()
		if c != C || l.Get("cache_missed_input_tokens").Int() != 0 || l.Get("cache_effect").Str != "measured" ||
			money(t, l, "savings_usd") != tokens.Money(c*sonnetRead) {
			t.Errorf("call %d, the same content cleared and the cache hit again: want %d×0.30 saved: %s", i+5, C, l.Raw)
		}
	}
}

// reportTotals is tenant's totals in /admin/report.
func (s *savingsStack) reportTotals(t *testing.T, tenant string) tokens.Totals {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.addr+"/admin/report?tenant="+tenant, nil)
	req.Header.Set("Authorization", "Bearer adm")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep tokens.Report
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	return rep.Total
}

func httpTestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The clearing call (the fourth) of a conversation whose previous calls something else
// invalidated: the miss is recorded under its own cause and the edits are charged nothing.
func TestBinaryCacheMissesOfOtherCausesAreNotChargedToTheEdits(t *testing.T) {
	s := newSavingsStack(t)
	n := 0
	clearingCall := func(t *testing.T, tag string, before func(c *conversation)) gjson.Result {
		t.Helper()
		c := newConversation(savingsKey, tag, false)
		for range 3 {
			c.call(t, s.addr)
		}
		before(c)
		c.call(t, s.addr)
		n += 4
		lines := s.lines(t, n, "clears")
		return lines[len(lines)-1]
	}
	for _, tt := range []struct {
		name, cause string
		before      func(c *conversation)
	}{
		{"a pause longer than the TTL is expiry", "expiry", func(*conversation) { s.advanceClocks(t, "6m") }},
		{"a changed system prompt is the system's", "system", func(c *conversation) { c.system = "You are a hasty agent." }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := clearingCall(t, tt.name, tt.before)
			C := l.Get("cleared_input_tokens").Int()
			if C == 0 || l.Get("cache_missed_input_tokens").Int() == 0 || l.Get("cache_miss_cause").Str != tt.cause ||
				l.Get("cache_effect").Str != "measured" || money(t, l, "cache_penalty_usd") != 0 || money(t, l, "savings_usd") != tokens.Money(C*sonnetRead) {
				t.Errorf("want the miss under %s, no penalty, C×read saved: %s", tt.cause, l.Raw)
			}
		})
	}
	t.Run("a conversation without cache_control saves at the input price, as before", func(t *testing.T) {
		c := newConversation(savingsKey, "uncached", false)
		c.noCache = true
		for range 4 {
			c.call(t, s.addr)
		}
		n += 4
		lines := s.lines(t, n, "clears")
		l := lines[len(lines)-1]
		C := l.Get("cleared_input_tokens").Int()
		if C == 0 || cached(l) != 0 || l.Get("cache_effect").Str != "none" || money(t, l, "savings_usd") != tokens.Money(C*sonnetInput) {
			t.Errorf("want C×input saved, cache_effect none: %s", l.Raw)
		}
	})
}

// msgIDs are the reply ids, which differ from one conversation to the next.
var msgIDs = regexp.MustCompile(`msg_[A-Za-z0-9_]+`)

// A client sees the bytes it would have seen had ctxproxy not asked the API's diagnosis: the
// same conversation through a tenant that asks and one that does not (cache_diagnostics
// false), plain and streamed, the system prompt changed on the fourth call so that the API
// has a diagnosis (system_changed) to hide.
func TestBinaryDiagnosticsCtxproxyAsksLeaveTheClientsBytesAlone(t *testing.T) {
	s := newSavingsStack(t)
	var asked []fakeapi.Request
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			tag := fmt.Sprintf("same %v", stream)
			on, off := newConversation(savingsKey, tag, stream), newConversation(savingsKey+"-quiet", tag, stream)
			for i := range 5 {
				for _, c := range []*conversation{on, off} {
					if i == 3 {
						c.system = "You are a hasty agent."
					}
					c.call(t, s.addr)
				}
			}
			for i := range on.replies {
				a, b := msgIDs.ReplaceAllString(on.replies[i], "msg_X"), msgIDs.ReplaceAllString(off.replies[i], "msg_X")
				if a != b {
					t.Errorf("reply %d differs with cache_diagnostics:\n%s\nwithout:\n%s", i+1, a, b)
				}
			}
			if !strings.Contains(on.replies[3], `"diagnostics":null`) {
				t.Errorf("reply 4 has no diagnostics: null:\n%s", on.replies[3])
			}
		})
	}
	for _, r := range proxiedCalls(s.fake) {
		if gjson.GetBytes(r.Body, "diagnostics").Exists() {
			asked = append(asked, r)
		}
	}
	if len(asked) != 10 {
		t.Errorf("%d upstream requests asked the API's diagnosis, want the 10 of the tenant that asks", len(asked))
	}
	for _, r := range asked {
		if gjson.GetBytes(r.Body, "messages.0.content").Str == "same false" && len(gjson.GetBytes(r.Body, "messages").Array()) > 1 &&
			!strings.HasPrefix(gjson.GetBytes(r.Body, "diagnostics.previous_message_id").Str, "msg_") {
			t.Errorf("a later call does not name its previous reply: %s", gjson.GetBytes(r.Body, "diagnostics").Raw)
		}
	}
}
