package tokens

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBuiltinPrices(t *testing.T) {
	p := BuiltinPrices()
	for model, input := range map[string]string{
		"claude-sonnet-4-5-20250929": "0.000003", // $3 per million
		"claude-opus-4-8":            "0.000005",
		"claude-haiku-4-5":           "0.000001",
	} {
		e, ok := p.Lookup(model)
		if !ok || e.Price.Input.String() != input {
			t.Errorf("%s: %v %v, want input %s per token", model, e, ok, input)
		}
	}
}

func TestPricesOver(t *testing.T) {
	base := BuiltinPrices()
	over, err := ParsePrices([]byte("factors:\n  batch: 0.4\nmodels:\n" +
		"  - prefix: claude-sonnet-4-5\n    input: 2\n    output: 10\n" +
		"  - model: my-finetune\n    input: 7\n    output: 9\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := base.Over(over)
	t.Run("an entry of the file replaces the built-in one of the same prefix", func(t *testing.T) {
		if e, _ := p.Lookup("claude-sonnet-4-5-20250929"); e.Price.Input.String() != "0.000002" {
			t.Fatalf("input %s", e.Price.Input)
		}
	})
	t.Run("a new entry is added, the others stay", func(t *testing.T) {
		if e, ok := p.Lookup("my-finetune"); !ok || e.Price.Output.String() != "0.000009" {
			t.Fatalf("my-finetune %v %v", e, ok)
		}
		if e, ok := p.Lookup("claude-opus-4-8"); !ok || e.Price.Input.String() != "0.000005" {
			t.Fatalf("opus %v %v", e, ok)
		}
		if len(p.Models()) != len(base.Models())+1 {
			t.Fatalf("%d labels, want %d", len(p.Models()), len(base.Models())+1)
		}
	})
	t.Run("the file's factors apply, the built-in table is unchanged", func(t *testing.T) {
		if p.Factors().Batch != 400 || base.Factors().Batch != 500 {
			t.Fatalf("batch factor %d (base %d)", p.Factors().Batch, base.Factors().Batch)
		}
		if e, _ := base.Lookup("claude-sonnet-4-5"); e.Price.Input.String() != "0.000003" {
			t.Fatal("Over changed the built-in table")
		}
	})
}

func TestOpenPrices(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "prices.yaml")
	os.WriteFile(good, []byte("models:\n  - prefix: claude-opus-4-8\n    input: 1\n    output: 2\n  - model: new-model\n    input: 1\n    output: 2\n"), 0o644)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("models:\n  - model: x\n    input: 1\n"), 0o644)
	missing := filepath.Join(dir, "none.yaml")
	tests := []struct {
		name     string
		path     string
		required bool
		want     string // in Describe, or the error
		wantErr  bool
	}{
		{"no file in the folder: the built-in table", missing, false, "built-in price table (", false},
		{"a file named with --prices must exist", missing, true, "no such file", true},
		{"a file in force is laid over the built-in table", good, false, "(1 entries overridden, 1 added)", false},
		{"a broken file is an error naming the line", bad, false, "line 2", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := OpenPrices(tc.path, tc.required)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil || !strings.Contains(tab.Describe("prices.yaml"), tc.want) {
				t.Fatalf("%v: %q, want %q", err, tab.Describe("prices.yaml"), tc.want)
			}
		})
	}
}

func TestShippedPricesExampleLoads(t *testing.T) {
	tab, err := OpenPrices("../policies/prices.yaml.example", true)
	if err != nil {
		t.Fatal(err)
	}
	if tab.Overridden != 1 || tab.Added != 1 {
		t.Fatalf("example: %d overridden, %d added", tab.Overridden, tab.Added)
	}
	if e, _ := tab.Lookup("claude-sonnet-4-5-20250929"); e.Price.Input.String() != "0.0000027" {
		t.Fatalf("sonnet input %s", e.Price.Input)
	}
}
