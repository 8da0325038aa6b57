package yamldoc

import (
	"errors"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line       int    // of the *Error; -1: ErrEmpty; 0: no error
		msg        string // the *Error's Msg starts with it
	}{
		{"reads one document", "a: 1\n", 0, ""},
		{"refuses a second document", "a: 1\n---\nb: 2\n", 2, "a policy or prices file holds one YAML document"},
		{"places a syntax error at its line", "a: 1\nb: [\n", 2, "invalid YAML: "},
		{"calls no document empty", "", -1, ""},
		{"calls a comment empty", "# nothing\n", -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, err := Read([]byte(tc.yaml))
			var ye *Error
			switch {
			case tc.line == -1:
				if !errors.Is(err, ErrEmpty) {
					t.Fatalf("err = %v, want ErrEmpty", err)
				}
			case tc.line == 0:
				if err != nil || root.Kind != yaml.MappingNode {
					t.Fatalf("Read = %v, %v", root, err)
				}
			case !errors.As(err, &ye) || ye.Line != tc.line || !strings.HasPrefix(ye.Msg, tc.msg):
				t.Fatalf("err = %#v, want line %d %q…", err, tc.line, tc.msg)
			}
		})
	}
}

func TestFields(t *testing.T) {
	root, err := Read([]byte("a: 1\nb: &x 2\na: 3\nc: 4\n<<: {d: 5}\nd: *x\n[e]: 6\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	errs := Fields(root, "top", []string{"a", "b", "d"}, func(key string, _, v *yaml.Node) {
		got = append(got, key+"="+v.Value)
	})
	if strings.Join(got, " ") != "a=1 b=2 d=2" {
		t.Errorf("fields %v, want the known keys once, aliases resolved", got)
	}
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	want := []string{
		`line 3: top: duplicate key "a" (first at line 1)`,
		`line 4: unknown key "c" in top (known: a, b, d)`,
		`line 5: top: merge keys (<<) are not supported`,
		`line 7: top: keys must be plain names`,
	}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}
}
