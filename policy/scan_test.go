package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

func TestScanBody(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		off      int // -1: valid
		msg      string
	}{
		{"object", `{"a":1}`, -1, ""},
		{"whitespace around", " \n{ \"a\" : [ 1 , 2.5e-3 , true , false , null , \"x\" ] }\t\n", -1, ""},
		{"escapes", `{"a":"\"\\\/\b\f\n\r\t\u00e9\uD83D\uDE00"}`, -1, ""},
		{"raw utf-8", `{"a":"café 😀"}`, -1, ""},
		{"long ascii string", `{"a":"` + strings.Repeat("abcdefgh", 100) + `"}`, -1, ""},
		{"scalar root", `"x"`, -1, ""},
		{"trailing comma", `{"a":1,}`, 7, "invalid character '}' looking for beginning of object key string"},
		{"missing colon", `{"a" 1}`, 5, "invalid character '1' after object key"},
		{"missing comma", `{"a":1 "b":2}`, 7, "invalid character '\"' after object key:value pair"},
		{"bad literal", `{"a":tru}`, 8, "invalid character '}' in literal true (expecting 'true')"},
		{"leading zero", `{"a":01}`, 6, "invalid character '1' after object key:value pair"},
		{"bare dot", `{"a":1.}`, 7, "invalid character '}' after decimal point in numeric literal"},
		{"bad exponent", `{"a":1e}`, 7, "invalid character '}' in exponent of numeric literal"},
		{"control char in string", "{\"a\":\"x\ny\"}", 7, "invalid character '\\x0a' in string literal"},
		{"bad escape", `{"a":"\x"}`, 7, "invalid character 'x' in string escape code"},
		{"bad unicode escape", `{"a":"\u00g0"}`, 10, "invalid character 'g' in \\u hexadecimal character escape"},
		{"invalid utf-8", "{\"a\":\"caf\xe9\"}", 9, "invalid UTF-8 in string"},
		{"truncated", `{"a":[1,2`, 9, "unexpected end of JSON input"},
		{"truncated string", `{"a":"abcdefghijklmnop`, 22, "unexpected end of JSON input"},
		{"garbage after", `{} x`, 3, "invalid character 'x' after top-level value"},
		{"mismatched close", `{"a":[1}`, 7, "invalid character '}' after array element"},
		{"empty", ``, 0, "unexpected end of JSON input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m []topMember
			_, _, _, err := scanBody([]byte(tc.in), m, scanAll, span{})
			if tc.off < 0 {
				if err != nil {
					t.Fatalf("valid JSON refused: %+v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("invalid JSON accepted")
			}
			if err.off != tc.off || err.msg != tc.msg {
				t.Fatalf("got %d %q, want %d %q", err.off, err.msg, tc.off, tc.msg)
			}
		})
	}
}

func TestScanDepth(t *testing.T) {
	var m []topMember
	ok := strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)
	if _, _, _, err := scanBody([]byte(ok), m, scanAll, span{}); err != nil {
		t.Fatalf("depth %d refused: %+v", maxDepth, err)
	}
	deep := `{"a":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`
	_, _, _, err := scanBody([]byte(deep), m, scanAll, span{})
	if err == nil || !strings.Contains(err.msg, "nesting deeper") {
		t.Fatalf("100000 levels: got %+v", err)
	}
	_, _, rerr := mustParse(t, "tenant: t\n").Rewrite([]byte(deep), nil)
	if re, ok := rerr.(*RequestError); !ok || re.Status != 400 {
		t.Fatalf("Rewrite of 100000 levels: %v", rerr)
	}
}

// FuzzScan checks the scanner against encoding/json (plus UTF-8 validity, which encoding/json does
// not check) and its top-level members against gjson.
func FuzzScan(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":[1,{"b":"\u00e9"}],"c":null}`, `[1,2]`, `"x"`, `{"a":"café"}`, "{\"a\":\"\xff\"}", `{"a":-0.5e+3}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m []topMember
		m, start, end, err := scanBody(b, m, scanAll, span{})
		want := json.Valid(b) && utf8.Valid(b)
		if (err == nil) != want {
			t.Fatalf("scanBody(%q) error %+v, encoding/json+utf8 valid=%v", b, err, want)
		}
		sm, sstart, send, serr := scanBody(b, nil, scanSkimBulk, span{})
		if err != nil {
			if err.off < 0 || err.off > len(b) {
				t.Fatalf("offset %d outside the body", err.off)
			}
			if serr != nil && (serr.off < 0 || serr.off > len(b)) {
				t.Fatalf("skim offset %d outside the body", serr.off)
			}
			return
		}
		// What the full scan accepts the skim accepts, with the same members.
		if serr != nil || sstart != start || send != end || !slices.Equal(sm, m) {
			t.Fatalf("skim of valid %q: %+v %d %d %v, full scan: %d %d %v", b, serr, sstart, send, sm, start, end, m)
		}
		if !gjson.ValidBytes(b) {
			t.Fatalf("gjson disagrees on %q", b)
		}
		root := string(b[start : end+1])
		if b[start] != '{' {
			return
		}
		var got, wantM []string
		for _, tm := range m {
			got = append(got, string(b[tm.keyStart:tm.keyEnd])+"="+string(b[tm.valStart:tm.valEnd]))
		}
		gjson.Parse(root).ForEach(func(k, v gjson.Result) bool {
			wantM = append(wantM, k.Raw+"="+v.Raw)
			return true
		})
		if strings.Join(got, "\x00") != strings.Join(wantM, "\x00") {
			t.Fatalf("members of %q:\n got %q\nwant %q", b, got, wantM)
		}
	})
}

func TestScanSkimBulk(t *testing.T) {
	deep := `{"messages":` + strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth) + `}`
	for _, tc := range []struct {
		name, in string
		off      int // -1: accepted
		msg      string
	}{
		{"content errors in messages are the API's", "{\"messages\":[{\"content\":\"\\q \x01 \xff\"}, 01, tru]}", -1, ""},
		{"content errors in system and tools are the API's", "{\"system\":\"\\x\",\"tools\":[{\"name\":\"\xfe\"}]}", -1, ""},
		{"an escaped quote does not end a string", `{"messages":["a\"]"]}`, -1, ""},
		{"an escaped backslash before a quote ends it", `{"messages":["a\\"]}`, -1, ""},
		{"three backslashes and a quote do not end it", `{"messages":["a\\\"]"]}`, -1, ""},
		{"other members are validated in full", `{"model":"\q","messages":[]}`, 11, "invalid character 'q' in string escape code"},
		{"a scalar bulk value is validated in full", `{"tools":n }`, 10, "invalid character ' ' in literal null (expecting 'null')"},
		{"mismatched brackets in messages", `{"messages":[{"a":1]]}`, 19, "invalid character ']' after object key:value pair"},
		{"unterminated string in messages", `{"messages":["abc\"]}`, 21, "unexpected end of JSON input"},
		{"unclosed array in messages", `{"messages":[[1]`, 16, "unexpected end of JSON input"},
		{"garbage after a skimmed value", `{"messages":[] x}`, 15, "invalid character 'x' after object key:value pair"},
		{"nesting in messages is bounded", deep, len(`{"messages":`) + maxDepth - 1, fmt.Sprintf("nesting deeper than %d levels", maxDepth)},
		{"an escaped key is validated in full", `{"m\u0065ssages":["\q"]}`, 20, "invalid character 'q' in string escape code"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := scanBody([]byte(tc.in), nil, scanSkimBulk, span{})
			if tc.off < 0 {
				if err != nil {
					t.Fatalf("refused: %+v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if err.off != tc.off || err.msg != tc.msg {
				t.Fatalf("got %d %q, want %d %q", err.off, err.msg, tc.off, tc.msg)
			}
		})
	}
}
