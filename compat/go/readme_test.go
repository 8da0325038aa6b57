package compat_test

import (
	"os"
	"strings"
	"testing"
)

// The README's SDK snippets are the code the compat tests run.
func TestREADMESnippetsAreTheTestedCode(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []struct{ file, begin, end string }{
		{"harness_test.go", "// README:go-begin\n", "\t// README:go-end"},
		{"../ts/test/messages.test.mjs", "// README:ts-begin\n", "  // README:ts-end"},
	} {
		b, err := os.ReadFile(src.file)
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok := strings.Cut(string(b), src.begin)
		snippet, _, ok2 := strings.Cut(rest, src.end)
		if !ok || !ok2 || strings.TrimSpace(snippet) == "" {
			t.Fatalf("%s has no README snippet markers", src.file)
		}
		if !strings.Contains(string(readme), snippet) {
			t.Errorf("README does not show the snippet of %s as it is:\n%s", src.file, snippet)
		}
	}
}
