package jsonstr

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestAppend(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"leaves plain text alone", "hello", `"hello"`},
		{"escapes quotes and backslashes", `a"b\c`, `"a\"b\\c"`},
		{"escapes the common controls by name", "a\nb\rc\td", `"a\nb\rc\td"`},
		{"escapes other controls as \\u00XX", "\x00\x1f", `"\u0000\u001f"`},
		{"keeps multi-byte UTF-8 as is", "café ☃ 😀", `"café ☃ 😀"`},
		{"does not escape HTML", "<a>&", `"<a>&"`},
		{"replaces invalid UTF-8", "a\xffb", `"a\ufffdb"`},
		{"escapes the JavaScript line separators", "a\u2028b\u2029", `"a\u2028b\u2029"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(Append(nil, tt.in))
			if got != tt.want {
				t.Fatalf("Append(%q) = %s, want %s", tt.in, got, tt.want)
			}
			if !json.Valid([]byte(got)) {
				t.Fatalf("%s is not valid JSON", got)
			}
		})
	}
}

func FuzzAppend(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\xff\xfe", "\u2028", "😀\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Append(nil, s)
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%q gave invalid JSON %s: %v", s, out, err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("%q round-tripped to %q", s, back)
		}
	})
}
