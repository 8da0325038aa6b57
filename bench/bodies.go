package main

import (
	"bytes"
	"fmt"
	"strings"
)

// The request bodies of the loads. They are valid for the fake (roles
// alternate, every tool_use is answered by a tool_result in the next turn)
// and built once per run, so every row sends exactly the same bytes.

const benchModel = "claude-sonnet-4-5"

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// filler is size bytes of code-like text: quotes, newlines and tabs, so JSON
// escaping is exercised as in a real tool transcript.
func filler(seed, size int) string {
	var sb strings.Builder
	for i := 0; sb.Len() < size; i++ {
		fmt.Fprintf(&sb, "\tfunc handler%d_%d(w http.ResponseWriter, r *http.Request) { log.Printf(\"serving %%s\", r.URL.Path) }\n", seed, i)
	}
	return sb.String()[:size]
}

var toolsJSON = `[{"name":"read_file","description":"Read a file of the repository.","input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}},` +
	`{"name":"run_tests","description":"Run the test suite.","input_schema":{"type":"object","properties":{"pkg":{"type":"string"}}}}]`

// smallBody is a short agent turn of about size bytes (non-streaming unless
// stream is set).
func smallBody(size int, stream bool) []byte {
	b := []byte(`{"model":"` + benchModel + `","max_tokens":1024,`)
	if stream {
		b = append(b, `"stream":true,`...)
	}
	b = append(b, `"system":"You are a careful coding agent. Answer briefly.","tools":`...)
	b = append(b, toolsJSON...)
	b = append(b, `,"messages":[{"role":"user","content":`...)
	// The rest of the budget goes to the user's text.
	rest := size - len(b) - len(`}]}`) - 2
	if rest < 16 {
		rest = 16
	}
	b = appendJSONString(b, filler(0, rest))
	b = append(b, `}]}`...)
	return b
}

// largeBody is a tool transcript of turns messages after the first user
// turn (turns/2 tool_use / tool_result pairs), about size bytes in all.
func largeBody(size, turns int, stream bool) []byte {
	pairs := turns / 2
	if pairs < 1 {
		pairs = 1
	}
	head := []byte(`{"model":"` + benchModel + `","max_tokens":4096,`)
	if stream {
		head = append(head, `"stream":true,`...)
	}
	head = append(head, `"system":"You are a careful coding agent working in a large Go repository.","tools":`...)
	head = append(head, toolsJSON...)
	head = append(head, `,"messages":[{"role":"user","content":"Find why the handler tests fail and fix them."}`...)
	// Measure one pair without its result text to size the results.
	pair := func(i int, result string) []byte {
		id := fmt.Sprintf("toolu_bench_%04d", i)
		p := []byte(`,{"role":"assistant","content":[{"type":"text","text":"Let me read the next file."},{"type":"tool_use","id":"` + id +
			`","name":"read_file","input":{"path":"internal/handlers/h` + fmt.Sprint(i) + `.go"}}]}`)
		p = append(p, `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"`+id+`","content":`...)
		p = appendJSONString(p, result)
		return append(p, `}]}`...)
	}
	overhead := len(head) + len(`]}`)
	for i := 0; i < pairs; i++ {
		overhead += len(pair(i, ""))
	}
	per := (size - overhead) / pairs
	if per < 16 {
		per = 16
	}
	var buf bytes.Buffer
	buf.Grow(size + 4096)
	buf.Write(head)
	for i := 0; i < pairs; i++ {
		// Escaping grows the text; shrink the raw text so the JSON lands near per.
		raw := filler(i+1, per*100/104)
		buf.Write(pair(i, raw))
	}
	buf.WriteString(`]}`)
	return buf.Bytes()
}

// thinkingBody is body (smallBody's or largeBody's) with extended thinking on and each assistant
// turn's text block a thinking block; every tenth turn is shaped as a memory loop's merged
// message, a second thinking block after a text block, which the proxy looks up among the
// hidden rounds it keeps. The signatures are ones the fake never wrote, which it lets pass.
func thinkingBody(body []byte) []byte {
	const text = `{"type":"text","text":"Let me read the next file."}`
	out := make([]byte, 0, len(body)+len(body)/50)
	out = append(out, `{"thinking":{"type":"enabled","budget_tokens":1024},`...)
	// The smallest budget is 1024 tokens, and max_tokens must be above it.
	rest := bytes.Replace(body[1:], []byte(`"max_tokens":1024,`), []byte(`"max_tokens":2048,`), 1)
	for n := 0; ; n++ {
		i := bytes.Index(rest, []byte(text))
		if i < 0 {
			break
		}
		out = append(out, rest[:i]...)
		out = fmt.Appendf(out, `{"type":"thinking","thinking":"Let me read the next file.","signature":"sig_bench_%d"}`, n)
		if n%10 == 9 {
			out = fmt.Appendf(out, `,{"type":"text","text":"Noted."},{"type":"thinking","thinking":"Now the file.","signature":"sig_bench_later_%d"}`, n)
		}
		rest = rest[i+len(text):]
	}
	return append(out, rest...)
}
