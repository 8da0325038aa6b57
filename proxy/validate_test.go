package proxy

import (
	"strings"
	"testing"
)

func TestCheckBody(t *testing.T) {
	deep := func(n int) string { return `{"a":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}` }
	tests := []struct {
		name string
		body string
		ok   bool
	}{
		{"accepts an ordinary request", simpleBody, true},
		{"accepts nesting at the limit", deep(maxNesting - 1), true},
		{"refuses nesting past the limit", deep(maxNesting), false},
		{"ignores brackets inside strings", `{"a":"` + strings.Repeat("[", 10000) + `"}`, true},
		{"ignores escaped quotes inside strings", `{"a":"x\"` + strings.Repeat("[", 10000) + `"}`, true},
		{"sees a string end after an escaped backslash", `{"a":"x\\"` + strings.Repeat(",[", 1000) + `}`, false},
		{"refuses invalid UTF-8", "{\"a\":\"\xff\"}", false},
		{"refuses a lone surrogate byte sequence", "{\"a\":\"\xed\xa0\x80\"}", false},
		{"accepts multi-byte UTF-8", `{"a":"café ☃ 😀"}`, true},
		{"refuses a top-level key given twice", `{"model":"a","stream":false,"model":"b"}`, false},
		{"refuses a top-level key given twice with other spacing", `{ "stream" : false , "x":{"stream":1}, "stream":true }`, false},
		{"accepts the same key at different levels", `{"type":"a","x":{"type":"b"},"y":[{"type":"c"}]}`, true},
		{"accepts a value equal to a key", `{"model":"model","m":"model"}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkBody([]byte(tt.body))
			if (err == nil) != tt.ok {
				t.Fatalf("checkBody = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func BenchmarkCheckBody1MB(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"m","max_tokens":1,"messages":[`)
	for i := range 200 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"` + strings.Repeat("some tool output, ", 290) + `"}]}`)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := checkBody(body); err != nil {
			b.Fatal(err)
		}
	}
}
