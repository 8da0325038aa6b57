package proxy

import (
	"path/filepath"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/callpath"
	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// TestCallPath serves the product's main path, a streamed Messages request
// whose reply makes one memory call, with the ledger and metrics on, and
// logs the calls it makes when the build records them: run
// `go run ./internal/callpath/walk` from the module's root to see them.
// In an ordinary build it checks the request only.
func TestCallPath(t *testing.T) {
	prices, err := tokens.LoadPrices("../tokens/builtin_prices.yaml")
	if err != nil {
		t.Fatal(err)
	}
	metrics := tokens.NewMetrics([]string{"acme", "beta", "default"}, prices.Models())
	ledger, err := tokens.OpenLedger(t.Context(), "file:"+filepath.Join(t.TempDir(), "ledger.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close()
	rec := tokens.NewRecorder(prices, metrics, ledger, nil)
	defer rec.Close(t.Context())
	h := newHarness(t, func(c *Config) { c.Recorder, c.Metrics = rec, metrics })
	h.fake.SetResponder(fakeapi.Script(
		fakeapi.Blocks(fakeapi.MemoryView("/memories")),
		fakeapi.Blocks(fakeapi.Text("done")),
	))

	callpath.Start()
	resp := h.post("/v1/messages", keyAcme, withStream(simpleBody))
	got := readAll(t, resp.Body)
	path := callpath.Stop("Server.ServeHTTP")

	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	if n := len(h.fake.Requests()); n != 2 {
		t.Fatalf("upstream calls = %d, want 2 (the memory call's round and the answer)", n)
	}
	if text := gjson.Get(accumulate(t, got), "content.0.text").Str; text != "done" {
		t.Fatalf("client's text = %q, want the last round's", text)
	}
	if !callpath.Instrumented {
		t.Log("calls not recorded: run `go run ./internal/callpath/walk` to see them")
		return
	}
	if len(path.Calls) == 0 {
		t.Fatal("the instrumented build recorded no call of the request")
	}
	t.Logf("the request's path as a reader walks it (each call once, where it is first made):\n%s", path.Reading())
	t.Logf("proxy/ alone: %s", path.Reading().Within("proxy/").Summary())
	t.Logf("every call made, repeats included: %d in %d files", len(path.Calls), path.Files())
}
