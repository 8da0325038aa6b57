package fakeapi

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// The large transcript of the bench harness (bench/bodies.go largeBody): a
// first user turn, then pairs of an assistant tool_use and a user
// tool_result of code-like text, about size bytes in all.

func benchFiller(seed, size int) string {
	var sb strings.Builder
	for i := 0; sb.Len() < size; i++ {
		fmt.Fprintf(&sb, "\tfunc handler%d_%d(w http.ResponseWriter, r *http.Request) { log.Printf(\"serving %%s\", r.URL.Path) }\n", seed, i)
	}
	return sb.String()[:size]
}

const benchTools = `[{"name":"read_file","description":"Read a file of the repository.","input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}},` +
	`{"name":"run_tests","description":"Run the test suite.","input_schema":{"type":"object","properties":{"pkg":{"type":"string"}}}}]`

// What ctxproxy's enforce policy of the bench (clear_tool_uses trigger
// 100000 input tokens, keep 3, clear_at_least 5000; memory inject) writes
// into that body: the memory tool and the edits.
const (
	benchMemoryTool = `,{"type":"memory_20250818","name":"memory"}]`
	benchEdits      = `,"context_management":{"edits":[{"type":"clear_tool_uses_20250919","trigger":{"type":"input_tokens","value":100000},"keep":{"type":"tool_uses","value":3},"clear_at_least":{"type":"input_tokens","value":5000},"exclude_tools":["memory"]}]}`
	// With thinking on, ctxproxy puts clear_thinking first (keep: all in
	// the bench policy; keep 1 here so that it clears something).
	benchThinkingEdits = `,"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":1}},{"type":"clear_tool_uses_20250919","trigger":{"type":"input_tokens","value":100000},"keep":{"type":"tool_uses","value":3},"clear_at_least":{"type":"input_tokens","value":5000},"exclude_tools":["memory"]}]}`
)

type transcript struct {
	size, turns int
	stream      bool
	edits       string // "" (the body as the client sends it), benchEdits or benchThinkingEdits
}

// largeTranscript builds the body as bench/bodies.go does, then, with
// edits, as ctxproxy rewrites it.
func largeTranscript(t transcript) []byte {
	pairs := max(t.turns/2, 1)
	thinking := t.edits == benchThinkingEdits
	head := []byte(`{"model":"claude-sonnet-4-5","max_tokens":4096,`)
	if t.stream {
		head = append(head, `"stream":true,`...)
	}
	if thinking {
		head = append(head, `"thinking":{"type":"enabled","budget_tokens":2048},`...)
	}
	head = append(head, `"system":"You are a careful coding agent working in a large Go repository.","tools":`...)
	if t.edits != "" {
		head = append(head, benchTools[:len(benchTools)-1]+benchMemoryTool...)
	} else {
		head = append(head, benchTools...)
	}
	head = append(head, `,"messages":[{"role":"user","content":"Find why the handler tests fail and fix them."}`...)
	pair := func(i int, result string) []byte {
		id := fmt.Sprintf("toolu_bench_%04d", i)
		p := []byte(`,{"role":"assistant","content":[`)
		if thinking {
			p = append(p, `{"type":"thinking","thinking":"The tests point at the next handler.","signature":"c2lnbmF0dXJl"},`...)
		}
		p = append(p, `{"type":"text","text":"Let me read the next file."},{"type":"tool_use","id":"`+id+
			`","name":"read_file","input":{"path":"internal/handlers/h`+fmt.Sprint(i)+`.go"}}]}`...)
		p = append(p, `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"`+id+`","content":`...)
		p = append(p, mustJSON(result)...)
		return append(p, `}]}`...)
	}
	overhead := len(head) + len(`]}`)
	for i := 0; i < pairs; i++ {
		overhead += len(pair(i, ""))
	}
	per := max((t.size-overhead)/pairs, 16)
	var buf bytes.Buffer
	buf.Grow(t.size + 4096)
	buf.Write(head)
	for i := 0; i < pairs; i++ {
		buf.Write(pair(i, benchFiller(i+1, per*100/104)))
	}
	buf.WriteString(`]`)
	buf.WriteString(t.edits)
	buf.WriteString(`}`)
	return buf.Bytes()
}

// BenchmarkLargeTranscript is the fake's cost per 1 MB, 200-turn tool
// transcript (the bench harness's large load), with the default reply: plain
// is the body as the client sends it (row 1), with_edits as ctxproxy's
// enforce policy rewrites it (row 1r); /cache with the prompt cache model on
// and a top-level cache_control (each call reads the previous call's write).
func BenchmarkLargeTranscript(b *testing.B) {
	for _, c := range []struct {
		name string
		t    transcript
	}{
		{"plain", transcript{size: 1 << 20, turns: 200}},
		{"with_edits", transcript{size: 1 << 20, turns: 200, edits: benchEdits}},
		{"with_thinking_edits", transcript{size: 1 << 20, turns: 200, edits: benchThinkingEdits}},
		{"plain/stream", transcript{size: 1 << 20, turns: 200, stream: true}},
		{"with_edits/chunked", transcript{size: 1 << 20, turns: 200, edits: benchEdits}},
		{"with_edits/stream", transcript{size: 1 << 20, turns: 200, stream: true, edits: benchEdits}},
		{"with_edits/cache", transcript{size: 1 << 20, turns: 200, edits: benchEdits}},
	} {
		body := largeTranscript(c.t)
		opts := Options{RecordLimit: 100}
		if strings.HasSuffix(c.name, "/cache") {
			opts.Cache = On
			body = append([]byte(`{"cache_control":{"type":"ephemeral"},`), body[1:]...)
		}
		b.Run(c.name, func(b *testing.B) {
			api := New(WithOptions(opts))
			w := &discard{h: http.Header{}}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/messages", bytes.NewReader(body))
				if strings.HasSuffix(c.name, "/chunked") {
					req.ContentLength = -1 // a body sent without its length
				}
				req.Header.Set("X-Api-Key", "k")
				req.Header.Set("Anthropic-Version", "2023-06-01")
				req.Header.Set("Anthropic-Beta", BetaContextManagement)
				clear(w.h)
				api.ServeHTTP(w, req)
			}
		})
	}
}

// The numbers the fake answered for the bench transcripts before it read
// them with scan.go; they must not move.
func TestTheLargeBenchTranscriptsKeepTheirNumbers(t *testing.T) {
	cases := []struct {
		name  string
		t     transcript
		usage string
		cm    string
	}{
		{"plain", transcript{size: 1 << 20, turns: 200},
			`{"input_tokens":262088,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":7}`, `null`},
		{"as ctxproxy rewrites it", transcript{size: 1 << 20, turns: 200, edits: benchEdits},
			`{"input_tokens":15977,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":7}`,
			`{"applied_edits":[{"type":"clear_tool_uses_20250919","cleared_tool_uses":97,"cleared_input_tokens":246123}]}`},
		{"with thinking, both edits", transcript{size: 1 << 20, turns: 200, edits: benchThinkingEdits},
			`{"input_tokens":15952,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":7}`,
			`{"applied_edits":[{"type":"clear_thinking_20251015","cleared_thinking_turns":99,"cleared_input_tokens":2376},{"type":"clear_tool_uses_20250919","cleared_tool_uses":97,"cleared_input_tokens":243722}]}`},
		{"below the trigger, nothing cleared", transcript{size: 1 << 18, turns: 10, edits: benchEdits},
			`{"input_tokens":65517,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":7}`,
			`{"applied_edits":[]}`},
	}
	api := New()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/v1/messages", bytes.NewReader(largeTranscript(c.t)))
			req.Header.Set("X-Api-Key", "k")
			req.Header.Set("Anthropic-Version", "2023-06-01")
			req.Header.Set("Anthropic-Beta", BetaContextManagement)
			w := httptest.NewRecorder()
			api.ServeHTTP(w, req)
			got := gjson.Parse(w.Body.String())
			if w.Code != 200 || got.Get("usage").Raw != c.usage || got.Get("context_management").Raw != c.cm {
				t.Fatalf("status %d, usage %s, context_management %s; want usage %s, context_management %s",
					w.Code, got.Get("usage").Raw, got.Get("context_management").Raw, c.usage, c.cm)
			}
		})
	}
}
