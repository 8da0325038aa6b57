package cachetrack

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// readReference is what ReadRequest must give, read the plain way: every top-level member, and
// every message's role, through gjson.
func readReference(scope string, body string) Request {
	var r Request
	var messages gjson.Result
	var thread string
	seen := map[string]bool{}
	gjson.Parse(body).ForEach(func(k, v gjson.Result) bool {
		if seen[k.Str] {
			return true
		}
		seen[k.Str] = true
		switch k.Str {
		case "system":
			r.System = Hash([]byte(v.Raw))
		case "tools":
			r.Tools = Hash([]byte(v.Raw))
		case "messages":
			messages = v
		case "diagnostics":
			r.HasDiagnostics = v.Type != gjson.Null
		case "thread":
			if v.Get("type").Str == "continue" {
				thread = v.Get("previous_message_id").Str
			}
		}
		return true
	})
	if thread != "" {
		r.Turn = MessageKey(scope, thread)
		return r
	}
	var last gjson.Result
	messages.ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").Str == "assistant" {
			last = m
		}
		return true
	})
	if last.Exists() {
		r.Turn = TurnKeyOf(scope, last.Get("content"))
	}
	return r
}

// Strings a body's text may hold: quotes and backslashes in every arrangement a backward scan
// could trip on, brackets and JSON-looking text.
var awkward = []string{``, `plain`, `\"`, `\\`, `\\\"`, `\\\\"`, `"quoted"`, `ends with \`, `\\"]}`,
	`{"role":"assistant","content":[{"type":"tool_use","id":"fake"}]}`, `],[`, "tab\tnew\nline", `é ☃ 𝄞`, `\u0022`}

func jsonString(s string) string { return string(appendString(nil, s)) }

func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for _, c := range []byte(s) {
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, `\n`...)
		case '\t':
			b = append(b, `\t`...)
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// randomBody is a Messages request body with members in random order, random white space and
// awkward strings throughout.
func randomBody(rng *rand.Rand) string {
	ws := func() string { return []string{"", "", " ", "\n  ", "\t"}[rng.IntN(5)] }
	text := func() string { return jsonString(awkward[rng.IntN(len(awkward))] + awkward[rng.IntN(len(awkward))]) }
	block := func(i int) string {
		switch rng.IntN(4) {
		case 0:
			return `{"type":"text","text":` + text() + `}`
		case 1: // keys in another order, input first
			return fmt.Sprintf(`{%s"input":{"path":%s,"n":[1,2,{"x":null}]},%s"id":"toolu_%d_%d","name":%s,"type":"tool_use"}`, ws(), text(), ws(), i, rng.IntN(1000), text())
		case 2:
			return fmt.Sprintf(`{"type":"tool_use","id":"toolu_%d","name":"memory","input":{}}`, i)
		default:
			return fmt.Sprintf(`{"type":"tool_result","tool_use_id":"toolu_%d","content":%s}`, i, text())
		}
	}
	message := func(i int) string {
		role := []string{"user", "assistant"}[rng.IntN(2)]
		var content string
		if rng.IntN(4) == 0 {
			content = text()
		} else {
			var bs []string
			for j := range rng.IntN(4) {
				bs = append(bs, block(i*10+j))
			}
			content = "[" + strings.Join(bs, ","+ws()) + "]"
		}
		if rng.IntN(2) == 0 {
			return `{` + ws() + `"content":` + ws() + content + `,"role":` + ws() + `"` + role + `"` + ws() + `}`
		}
		return `{"role":"` + role + `",` + ws() + `"content":` + content + `}`
	}
	var msgs []string
	for i := range rng.IntN(6) + rng.IntN(2)*rng.IntN(12) { // now and then more than the ring of 8 holds
		msgs = append(msgs, message(i))
	}
	members := []string{
		`"model":"claude-sonnet-4-5"`,
		`"max_tokens":1024`,
		`"messages":` + ws() + `[` + ws() + strings.Join(msgs, ws()+`,`+ws()) + ws() + `]`,
	}
	if rng.IntN(2) == 0 {
		members = append(members, `"system":`+text())
	}
	if rng.IntN(2) == 0 {
		members = append(members, `"tools":[{"name":"read","description":`+text()+`}]`)
	}
	if rng.IntN(3) == 0 {
		members = append(members, `"diagnostics":`+[]string{`null`, `{"previous_message_id":null}`}[rng.IntN(2)])
	}
	if rng.IntN(4) == 0 {
		members = append(members, `"thread":{"type":"continue","previous_message_id":"msg_`+fmt.Sprint(rng.IntN(9))+`"}`)
	}
	if rng.IntN(4) == 0 {
		members = append(members, `"m\u0065ssages":[]`) // a duplicate, escaped: the first counts
	}
	rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	return ws() + `{` + ws() + strings.Join(members, ws()+`,`+ws()) + ws() + `}` + ws()
}

func TestReadRequestAgreesWithAFullRead(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 1))
	turns := 0
	for i := range 5000 {
		body := randomBody(rng)
		if !gjson.Valid(body) {
			t.Fatalf("body %d is not valid JSON: %s", i, body)
		}
		got, want := ReadRequest("acme", []byte(body)), readReference("acme", body)
		if got != want {
			t.Fatalf("body %d:\n%s\ngot  %+v\nwant %+v", i, body, got, want)
		}
		// The members as a validating pass gives them: the messages walked from their end.
		m := FindMembers([]byte(body))
		if got := Read("acme", Members{System: m.System, Tools: m.Tools, Messages: m.Messages, Thread: m.Thread, Diagnostics: m.Diagnostics}); got != want {
			t.Fatalf("body %d, read from its members:\n%s\ngot  %+v\nwant %+v", i, body, got, want)
		}
		if want.Turn != 0 {
			turns++
		}
	}
	if turns < 1000 {
		t.Errorf("only %d of the bodies name a conversation: the test does not test", turns)
	}
}

func TestFindMembers(t *testing.T) {
	tests := []struct {
		name, body string
		want       Members
	}{
		{"members in any order and spacing", ` { "tools" : [1, "]"] , "messages":[{"role":"user"}] ,"system":"s\"}" } `,
			Members{Tools: []byte(`[1, "]"]`), Messages: []byte(`[{"role":"user"}]`), System: []byte(`"s\"}"`)}},
		{"an escaped key is what it decodes to", `{"m\u0065ssages":[],"diagnostics":null}`,
			Members{Messages: []byte(`[]`), Diagnostics: []byte(`null`)}},
		{"the first of a duplicate key counts", `{"system":"a","system":"b"}`, Members{System: []byte(`"a"`)}},
		{"not an object", `[{"system":"a"}]`, Members{}},
		{"cut short", `{"system":"a","messages":[{"role":"user","content":"x`, Members{System: []byte(`"a"`)}},
		{"a string that never ends", `{"system":"a\"}`, Members{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := FindMembers([]byte(tt.body))
			got := [][]byte{m.System, m.Tools, m.Messages, m.Thread, m.Diagnostics}
			want := [][]byte{tt.want.System, tt.want.Tools, tt.want.Messages, tt.want.Thread, tt.want.Diagnostics}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
				t.Errorf("got %q\nwant %q", got, want)
			}
		})
	}
}

func TestLastAssistant(t *testing.T) {
	tests := []struct{ name, arr, want string }{
		{"the last of several", `[{"role":"assistant","content":1},{"role":"user"},{"role":"assistant","content":2},{"role":"user","content":"x"}]`, `{"role":"assistant","content":2}`},
		{"role after a content full of quotes and brackets", `[ {"content":"a \\\" ]}{ \\\\","role":"assistant"} , {"role":"user","content":"\\\\"} ]`, `{"content":"a \\\" ]}{ \\\\","role":"assistant"}`},
		{"none", `[{"role":"user"}]`, ``},
		{"an empty array", `[ ]`, ``},
		{"not an array", `{"role":"assistant"}`, ``},
		{"elements that are not objects", `[1,"assistant",null,{"role":"assistant"},"x"]`, `{"role":"assistant"}`},
		{"malformed", `"role":"assistant"}]`, ``},
		{"empty", ``, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(lastAssistant([]byte(tt.arr))); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestLastQuote(t *testing.T) {
	// Bytes next to a quote's in value, and ones that carry or borrow in word arithmetic.
	alphabet := []byte{'"', '!', '#', 0xa2, 0x00, 0xff, 0x7f, 0x80, 'x'}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
			if rng.IntN(3) != 0 {
				b[i] = 'x'
			}
		}
		for i := len(b) - 1; i >= -1; i-- {
			if got, want := lastQuote(b, i), lastQuoteSlow(b, i); got != want {
				t.Fatalf("lastQuote(%q, %d) = %d, want %d", b, i, got, want)
			}
		}
	}
}

func lastQuoteSlow(b []byte, i int) int {
	for ; i >= 0; i-- {
		if b[i] == '"' {
			return i
		}
	}
	return -1
}

// FuzzReadRequest: no body makes the reader panic or read out of bounds, and on valid JSON it
// agrees with the full read.
func FuzzReadRequest(f *testing.F) {
	rng := rand.New(rand.NewPCG(34, 2))
	for range 20 {
		f.Add(randomBody(rng))
	}
	f.Add(`{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a\\"}]}]}`)
	f.Add(`{"messages":[{"role":"assistant"},]}`)
	f.Add(`{"messages":]`)
	f.Fuzz(func(t *testing.T, body string) {
		got := ReadRequest("acme", []byte(body))
		m := FindMembers([]byte(body))
		back := Read("acme", Members{System: m.System, Tools: m.Tools, Messages: m.Messages, Thread: m.Thread, Diagnostics: m.Diagnostics})
		if !gjson.Valid(body) || !gjson.Parse(body).IsObject() {
			return
		}
		if want := readReference("acme", body); got != want || back != want {
			t.Errorf("got %+v, from the end %+v, want %+v", got, back, want)
		}
	})
}
