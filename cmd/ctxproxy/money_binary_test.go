package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/stack"
)

// Money that must not escape the caps or the ledger, through the built binary: holds that
// cannot overflow, settlement at the ledger's own cost, cut streams, batches.

// A reserve_output_tokens past what any model answers is a load error naming its file and line;
// and no price makes a hold wrap around int64 to an amount that fits under a cap.
func TestHoldsAreBoundedAndCannotOverflow(t *testing.T) {
	t.Run("reserve_output_tokens past any model's output is refused with its file and line", func(t *testing.T) {
		dir, _, err := stack.Layout(t.TempDir(), map[string]string{
			"capped.yaml": stack.TenantPolicy("capped", capKey,
				"limits:\n  spend: [{period: daily, usd: 1}]\n  reserve_output_tokens: 9223372036854775807\n"),
		})
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(binary(t), "validate", "--policies", dir).CombinedOutput()
		if err == nil {
			t.Fatalf("validate accepted reserve_output_tokens 9223372036854775807:\n%s", out)
		}
		if want := "capped.yaml:5: limits.reserve_output_tokens must be at most 1000000"; !strings.Contains(string(out), want) {
			t.Errorf("validate said:\n%s\nwant %q", out, want)
		}
		p := exec.Command(binary(t), "--listen", "127.0.0.1:0", "--policies", dir, "--memory-dir", t.TempDir(),
			"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
		if out, err := p.CombinedOutput(); err == nil || !strings.Contains(string(out), "reserve_output_tokens must be at most") {
			t.Errorf("the proxy started on that policy: %v\n%s", err, out)
		}
	})

	t.Run("a hold past int64 is refused, not wrapped to a negative amount under the cap", func(t *testing.T) {
		// $9,000,000,000,000 per million output tokens: 4096 held output tokens cost more than
		// int64 nano-dollars hold, which once wrapped to about -$29,000,000 and fit any cap.
		dir, _, err := stack.Layout(t.TempDir(), map[string]string{
			"capped.yaml": stack.TenantPolicy("capped", capKey, "limits:\n  spend: [{period: daily, usd: 1}]\n"),
			"prices.yaml": "models:\n  - model: m\n    input: 1\n    output: 9000000000000\n",
		})
		if err != nil {
			t.Fatal(err)
		}
		fake, upURL := fakeUpstream(t)
		fake.SetResponder(func(*fakeapi.Request) fakeapi.Reply { return fakeapi.TextReply("ok") })
		p := startProxy(t, "--upstream", upURL, "--policies", dir, "--memory-dir", t.TempDir(),
			"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
		body := `{"model":"m","max_tokens":4096,"messages":[{"role":"user","content":"hi"}]}`
		resp, got := post(t, p.Addr, capKey, body)
		if resp.StatusCode != 429 || gjson.Get(got, "error.type").Str != "billing_error" {
			t.Fatalf("a request holding more than int64 nano-dollars: %d %s, want 429 billing_error", resp.StatusCode, got)
		}
		if n := len(fake.Requests()); n != 0 {
			t.Errorf("%d requests reached the upstream", n)
		}
	})
}
