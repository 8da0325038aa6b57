package proxy

import (
	"testing"

	"github.com/ctxproxy/ctxproxy/capabilities"
)

// A tenant's use of a retiring model is what its reports count, as the ledger seeds it at a
// restart: a count_tokens call naming the model is none, a Messages call is.
func TestOnlyACallAReportCountsUsesARetiringModel(t *testing.T) {
	const model = "claude-opus-4-5-20251101" // deprecated in the fake's models
	body := `{"model":"` + model + `","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	var models *capabilities.Cache
	h := newHarness(t, withModels(&models))
	if err := models.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	used := func() bool {
		for _, r := range models.Retiring("acme") {
			if r.Model == model && !r.LastUsed.IsZero() {
				return true
			}
		}
		return false
	}
	for _, step := range []struct {
		path string
		want bool
	}{
		{"/v1/messages/count_tokens", false},
		{"/v1/messages", true},
	} {
		resp := h.post(step.path, keyAcme, body)
		if got := readAll(t, resp.Body); resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", step.path, resp.StatusCode, got)
		}
		if got := used(); got != step.want {
			t.Fatalf("after %s: used %v, want %v", step.path, got, step.want)
		}
	}
}
