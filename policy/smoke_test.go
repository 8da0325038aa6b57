package policy

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/tidwall/gjson"
)

func TestShippedPoliciesLoad(t *testing.T) {
	set, err := LoadDir("../policies")
	if err != nil {
		t.Fatalf("LoadDir(../policies): %v", err)
	}
	if set.Default() == nil {
		t.Fatal("default.yaml did not load as tenant default")
	}
	p, ok := set.Lookup("sk-ctxproxy-example-demo-key")
	if !ok || p.Tenant != "example" {
		t.Fatalf("demo key: got %v %v, want tenant example", p, ok)
	}
	if q, ok := set.Lookup("nobody"); ok || q != set.Default() {
		t.Fatalf("unknown key: got %v %v, want default,false", q, ok)
	}
	for _, p := range set.Tenants() {
		t.Log(p.Summary())
	}
}

func TestShippedExamplesParse(t *testing.T) {
	files, _ := filepath.Glob("../policies/*.yaml.example")
	if len(files) == 0 {
		t.Fatal("no *.yaml.example in policies/")
	}
	for _, f := range files {
		if filepath.Base(f) == PricesFile+".example" {
			continue // the price table's example, held parseable by package tokens
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(f, data); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestSmokeRewrite(t *testing.T) {
	set, err := LoadDir("../policies")
	if err != nil {
		t.Fatal(err)
	}
	p := set.Default()
	body := []byte(`{"model":"m","max_tokens":1.0e3,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"caf\u00e9"}]}`)
	h := http.Header{}
	out, info, err := p.Rewrite(body, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %+v %v", out, info, h)
	if !gjson.ValidBytes(out) {
		t.Fatal("invalid output")
	}
}
