package console

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

func TestTree(t *testing.T) {
	tests := []struct {
		name  string
		paths []string
		want  string
	}{
		{"files at the root have depth 0", []string{"a.md", "b.md"}, "0 a.md|0 b.md"},
		{"a directory is shown once before its files", []string{"notes/a.md", "notes/b.md"}, "0 notes/|1 a.md|1 b.md"},
		{"a sibling directory opens after the first closes", []string{"a/x.md", "a/y/z.md", "b/w.md", "top.md"},
			"0 a/|1 x.md|1 y/|2 z.md|0 b/|1 w.md|0 top.md"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ms []memoryhook.Memory
			for _, p := range tc.paths {
				ms = append(ms, memoryhook.Memory{Path: p})
			}
			var got []string
			for _, r := range tree(ms) {
				if r.Dir != "" {
					got = append(got, fmt.Sprintf("%d %s/", r.Depth, r.Dir))
				} else {
					got = append(got, fmt.Sprintf("%d %s", r.Depth, r.Name))
				}
			}
			if g := strings.Join(got, "|"); g != tc.want {
				t.Errorf("tree = %s, want %s", g, tc.want)
			}
		})
	}
}
