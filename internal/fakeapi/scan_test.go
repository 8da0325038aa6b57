package fakeapi

import (
	"testing"

	"github.com/tidwall/gjson"
)

// firstMember is the raw value of obj's first member named key, read with
// scan.go.
func firstMember(obj, key string) string {
	raw := ""
	eachMember(obj, skipSpace(obj, 0), func(k string, v int) int {
		end := skipValue(obj, v)
		if k == key && raw == "" {
			raw = obj[v:end]
		}
		return end
	})
	return raw
}

var scanCases = []string{
	`{"a":1}`,
	`{ "a" : "x" , "b" : [1, {"a":2}] }`,
	`{"b":"a\"b","a":"q\\"}`,
	`{"b":"\\\\\"","a":true}`,
	`{"b":"\\","a":null}`,
	`{"\u0061":"escaped key","a":2}`,
	`{"a":1,"a":2}`,
	`{"x":{"a":{"a":1}},"a":[[],{}]}`,
	`{"b":-1.5e+3,"a":0}`,
	"{\n\t\"b\": \"tab\\tline\\n\",\r\n\"a\": \"ok\"\n}",
	`{"b":"}]\"{[","a":"after"}`,
	`{}`,
	`{"b":1}`,
}

func TestScanFindsWhatGjsonGets(t *testing.T) {
	for _, obj := range scanCases {
		t.Run(obj, func(t *testing.T) {
			want := gjson.Get(obj, "a")
			if got := firstMember(obj, "a"); got != want.Raw {
				t.Errorf("member a = %q, gjson %q", got, want.Raw)
			}
			if got := str(firstMember(obj, "a")); got != want.Str {
				t.Errorf("str = %q, gjson %q", got, want.Str)
			}
			if end := skipValue(obj, 0); end != len(obj) {
				t.Errorf("skipValue ends at %d of %d", end, len(obj))
			}
		})
	}
}

func TestScanElementsAreGjsonsElements(t *testing.T) {
	arr := `[ 1, "a\"]", {"x":[2,3]}, [], null ,true]`
	var got []string
	end := eachElement(arr, 0, func(v int) int {
		e := skipValue(arr, v)
		got = append(got, arr[v:e])
		return e
	})
	want := gjson.Parse(arr).Array()
	if end != len(arr) || len(got) != len(want) {
		t.Fatalf("end %d, %d elements; want %d, %d", end, len(got), len(arr), len(want))
	}
	for i := range want {
		if got[i] != want[i].Raw {
			t.Errorf("element %d = %q, gjson %q", i, got[i], want[i].Raw)
		}
	}
}

func TestAnEscapedPlaceholderCountsAsCleared(t *testing.T) {
	for raw, want := range map[string]bool{
		placeholderJSON: true,
		`"\u005btool result cleared by context management]"`:    true,
		`"[tool result cleared by context management] "`:        false,
		`[{"type":"text","text":"` + ClearedPlaceholder + `"}]`: false,
		`""`: false,
		``:   false,
	} {
		if got := isPlaceholder(raw); got != want {
			t.Errorf("isPlaceholder(%s) = %v", raw, got)
		}
	}
}

// FuzzScan holds scan.go to gjson on any valid JSON object: the same first
// member, and never a panic or a hang on what it is given.
func FuzzScan(f *testing.F) {
	for _, c := range scanCases {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, obj string) {
		skipValue(obj, 0)
		firstMember(obj, "a") // malformed: must only return
		if !gjson.Valid(obj) || !gjson.Parse(obj).IsObject() {
			return
		}
		if got, want := firstMember(obj, "a"), gjson.Get(obj, "a").Raw; got != want {
			t.Errorf("member a = %q, gjson %q", got, want)
		}
	})
}
