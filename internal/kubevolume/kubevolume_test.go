package kubevolume

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteLaysOutAndSwapsLikeTheKubelet(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	if err := Write(dir, map[string]string{"a.yaml": "a1", "b.yaml": "b1"}); err != nil {
		t.Fatal(err)
	}
	first, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil || !strings.HasPrefix(first, "..20") {
		t.Fatalf("..data -> %q, %v", first, err)
	}
	if l, _ := os.Readlink(filepath.Join(dir, "a.yaml")); l != "..data/a.yaml" {
		t.Errorf("a.yaml -> %q, want ..data/a.yaml", l)
	}
	if err := Write(dir, map[string]string{"a.yaml": "a2", "c.yaml": "c2"}); err != nil {
		t.Fatal(err)
	}
	second, _ := os.Readlink(filepath.Join(dir, "..data"))
	if second == first {
		t.Fatal("the update did not swap ..data")
	}
	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Errorf("the old folder %s is still there", first)
	}
	for name, want := range map[string]string{"a.yaml": "a2", "c.yaml": "c2"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", name, b, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "b.yaml")); !os.IsNotExist(err) {
		t.Error("b.yaml is still shown after it left the volume")
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 4 { // ..<ts>, ..data, a.yaml, c.yaml
		t.Errorf("entries %v", names)
	}
}
