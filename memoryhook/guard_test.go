package memoryhook_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// rawJ builds a JSON object from alternating keys and values, keeping the
// bytes of strings as they are (json.Marshal would turn invalid UTF-8 into
// U+FFFD before the guard could see it).
func rawJ(kv ...any) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(jstr(kv[i].(string)) + ":")
		switch v := kv[i+1].(type) {
		case string:
			b.WriteString(jstr(v))
		case int:
			b.WriteString(strconv.Itoa(v))
		case []int:
			b.WriteString("[" + strconv.Itoa(v[0]) + "," + strconv.Itoa(v[1]) + "]")
		}
	}
	return b.String() + "}"
}

func jstr(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(&b, "\\u%04x", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String() + `"`
}

// hostilePaths are refused by the guard, before any file system call.
var hostilePaths = []struct {
	name, path, want string // want: the start of the error after "Error: "
}{
	{"empty", "", "Path must start with /memories, got: "},
	{"relative", "memories/x.md", "Path must start with /memories"},
	{"dot relative", "./memories/x.md", "Path must start with /memories"},
	{"absolute elsewhere", "/etc/passwd", "Path must start with /memories"},
	{"prefix lookalike", "/memoriesX/a.md", "Path must start with /memories"},
	{"prefix lookalike with dash", "/memories-old", "Path must start with /memories"},
	{"upper case", "/Memories/a.md", "Path must start with /memories"},
	{"double leading slash", "//memories/a.md", "Path must start with /memories"},
	{"leading space", " /memories/a.md", "Path must start with /memories"},
	{"home", "~/memories/a.md", "Path must start with /memories"},
	{"file URL", "file:///memories/a.md", "Path must start with /memories"},
	{"traversal before", "/tmp/../memories/a.md", "Path must start with /memories"},
	{"dotdot", "/memories/..", "Path /memories/.. would escape"},
	{"dotdot slash", "/memories/../", "Path /memories/../ would escape"},
	{"dotdot out", "/memories/../etc/passwd", "Path /memories/../etc/passwd would escape"},
	{"dotdot deep", "/memories/a/b/../../../etc", "would escape"},
	{"dotdot back in", "/memories/../memories/a.md", "would escape"},
	{"dotdot at end", "/memories/a/..", "would escape"},
	{"dot", "/memories/.", "would escape"},
	{"dot inside", "/memories/a/./b.md", "would escape"},
	{"encoded dotdot", "/memories/%2e%2e/etc", "would escape"},
	{"encoded dotdot slash", "/memories/%2e%2e%2fetc", "would escape"},
	{"encoded upper", "/memories/%2E%2E%2F", "would escape"},
	{"half encoded", "/memories/.%2e/etc", "would escape"},
	{"encoded slash", "/memories/..%2fetc", "would escape"},
	{"encoded slash in name", "/memories/a%2fb", "would escape"},
	{"encoded backslash", "/memories/a%5cb", "would escape"},
	{"double encoded", "/memories/%252e%252e%252f", "would escape"},
	{"triple encoded", "/memories/%25252e%25252e", "would escape"},
	{"overlong dot", "/memories/%c0%ae%c0%ae/", "would escape"},
	{"overlong three bytes", "/memories/%e0%80%ae%e0%80%ae", "would escape"},
	{"iis unicode", "/memories/%u002e%u002e/", "would escape"},
	{"encoded NUL", "/memories/a%00b", "would escape"},
	{"backslash traversal", "/memories\\..\\etc", "Path must start with /memories"},
	{"backslash after root", "/memories/..\\..\\etc", "would escape"},
	{"backslash in name", "/memories/a\\b.md", "would escape"},
	{"NUL", "/memories/a\x00.md", "Path contains the character U+0000"},
	{"NUL truncation", "/memories/a.md\x00/../../etc", "Path contains the character U+0000"},
	{"newline", "/memories/a\nb", "Path contains the character U+000A"},
	{"carriage return", "/memories/a\rb", "Path contains the character U+000D"},
	{"tab", "/memories/a\tb", "Path contains the character U+0009"},
	{"escape", "/memories/\x1b[31mred", "Path contains the character U+001B"},
	{"DEL", "/memories/a\x7f", "Path contains the character U+007F"},
	{"C1 NEL", "/memories/a\u0085b", "Path contains the character U+0085"},
	{"bidi override", "/memories/gpj.\u202etxt", "Path contains the character U+202E"},
	{"bidi isolate", "/memories/\u2066a", "Path contains the character U+2066"},
	{"zero width space", "/memories/\u200ba.md", "Path contains the character U+200B"},
	{"BOM", "/memories/\ufeffa.md", "Path contains the character U+FEFF"},
	{"line separator", "/memories/a\u2028b", "Path contains the character U+2028"},
	{"replacement char", "/memories/\ufffd", "Path contains the character U+FFFD"},
	{"invalid UTF-8", "/memories/\xff.md", "Path is not valid UTF-8."},
	{"overlong UTF-8 dot", "/memories/\xc0\xae\xc0\xae", "Path is not valid UTF-8."},
	{"UTF-8 surrogate", "/memories/\xed\xa0\x80", "Path is not valid UTF-8."},
	{"long name", "/memories/" + strings.Repeat("n", 256), "A name in path /memories/nnn"},
	{"long path", "/memories/" + strings.Repeat("ab/", 340), "Path is 1030 bytes long; the limit is 1024 bytes."},
	{"huge path", "/memories/" + strings.Repeat("../", 100000), "Path is 300010 bytes long"},
}

func TestGuardRefusesHostilePathsWithoutTouchingDisk(t *testing.T) {
	if len(hostilePaths) < 40 {
		t.Fatalf("only %d hostile paths", len(hostilePaths))
	}
	s := newSandbox(t)
	before := s.snapshot(t, false)
	s.events(true)
	for _, tc := range hostilePaths {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := memoryhook.ParsePath(tc.path); err == nil {
				t.Fatalf("ParsePath(%q) accepted", tc.path)
			}
			for _, in := range []string{
				rawJ("command", "view", "path", tc.path),
				rawJ("command", "view", "path", tc.path, "view_range", []int{1, -1}),
				rawJ("command", "create", "path", tc.path, "file_text", "pwned"),
				rawJ("command", "str_replace", "path", tc.path, "old_str", "a", "new_str", "b"),
				rawJ("command", "insert", "path", tc.path, "insert_line", 0, "insert_text", "pwned"),
				rawJ("command", "delete", "path", tc.path),
				rawJ("command", "rename", "old_path", tc.path, "new_path", "/memories/stolen.md"),
				rawJ("command", "rename", "old_path", "/memories/note.md", "new_path", tc.path),
			} {
				r := s.exec(in)
				if !r.IsError || r.Wrote || !strings.HasPrefix(r.Content, "Error: Path") && !strings.HasPrefix(r.Content, "Error: A name") || !strings.Contains(r.Content, tc.want) {
					t.Errorf("%.200s\n got %+v", in, r)
				}
				// Nothing at all, not even the tenant root, may be opened.
				s.verify(t, in, before, false, false)
			}
		})
	}
}

func TestParsePathAcceptsAndCanonicalises(t *testing.T) {
	for _, tc := range []struct{ raw, canon, rel string }{
		{"/memories", "/memories", ""},
		{"/memories/", "/memories", ""},
		{"/memories//", "/memories", ""},
		{"/memories/a.md", "/memories/a.md", "a.md"},
		{"/memories/a/b/c.md", "/memories/a/b/c.md", "a/b/c.md"},
		{"/memories//a///b/", "/memories/a/b", "a/b"},
		{"/memories/.hidden", "/memories/.hidden", ".hidden"},
		{"/memories/...", "/memories/...", "..."},
		{"/memories/a..b", "/memories/a..b", "a..b"},
		{"/memories/50% off.md", "/memories/50% off.md", "50% off.md"},
		{"/memories/%41.md", "/memories/%41.md", "%41.md"},
		{"/memories/ünïcødé ✓.md", "/memories/ünïcødé ✓.md", "ünïcødé ✓.md"},
		{"/memories/" + strings.Repeat("n", 255), "/memories/" + strings.Repeat("n", 255), strings.Repeat("n", 255)},
	} {
		p, err := memoryhook.ParsePath(tc.raw)
		if err != nil {
			t.Errorf("ParsePath(%q): %v", tc.raw, err)
			continue
		}
		if p.Raw() != tc.raw || p.String() != tc.canon || p.Rel() != tc.rel || p.IsRoot() != (tc.rel == "") {
			t.Errorf("ParsePath(%q) = raw %q canon %q rel %q", tc.raw, p.Raw(), p.String(), p.Rel())
		}
	}
}
