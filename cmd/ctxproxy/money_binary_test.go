package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/stack"
	"github.com/ctxproxy/ctxproxy/tokens"
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

// moneyStack is a proxy in front of an in-process fake whose tenant "capped" (capKey) has a $1
// daily cap, prices from capPrices (model m: $1 and $10 per million tokens) plus extra, and a
// file ledger.
type moneyStack struct {
	fake   *fakeapi.API
	proc   *binaries.Process
	ledger string
}

func startMoneyStack(t *testing.T, limitsYAML, extraPrices string) *moneyStack {
	t.Helper()
	dir, _, err := stack.Layout(t.TempDir(), map[string]string{
		"capped.yaml": stack.TenantPolicy("capped", capKey, limitsYAML),
		"prices.yaml": capPrices + extraPrices,
	})
	if err != nil {
		t.Fatal(err)
	}
	fake, upURL := fakeUpstream(t)
	ledger := filepath.Join(t.TempDir(), "ledger.jsonl")
	p := startProxy(t, "--upstream", upURL, "--policies", dir, "--memory-dir", t.TempDir(),
		"--ledger", "file:"+ledger, "--admin-token", "adm")
	return &moneyStack{fake: fake, proc: p, ledger: ledger}
}

// ledgerLines waits until the ledger holds n lines and returns them.
func (m *moneyStack) ledgerLines(t *testing.T, n int) []gjson.Result {
	t.Helper()
	var lines []gjson.Result
	eventually(t, fmt.Sprintf("%d ledger lines", n), func() {
		for {
			b, _ := os.ReadFile(m.ledger)
			lines = lines[:0]
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if l != "" {
					lines = append(lines, gjson.Parse(l))
				}
			}
			if len(lines) >= n {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	return lines
}

// spent is the tenant's settled spend against its daily cap, as /admin/report shows it.
func (m *moneyStack) spent(t *testing.T) tokens.Money {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+m.proc.Addr+"/admin/report?tenant=capped", nil)
	req.Header.Set("Authorization", "Bearer adm")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, c := range gjson.GetBytes(b, "caps").Array() {
		if c.Get("period").Str == "daily" && c.Get("user").Str == "" {
			v, err := tokens.ParseMoney(c.Get("spent_usd").String())
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no daily cap in /admin/report: %s", b)
	return 0
}

// settled waits until the daily spend is no longer before: a request settles just after its
// client has the reply.
func (m *moneyStack) settled(t *testing.T, before tokens.Money) {
	t.Helper()
	eventually(t, "the request settled", func() {
		for m.spent(t) == before {
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// sumCost is the sum of the lines' cost_usd.
func sumCost(t *testing.T, lines []gjson.Result) tokens.Money {
	t.Helper()
	var sum tokens.Money
	for _, l := range lines {
		v, err := tokens.ParseMoney(l.Get("cost_usd").String())
		if err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	return sum
}

// A capped tenant is charged exactly what its ledger lines cost, usage.iterations included:
// a compaction step and a fallback to another model, which the top-level usage leaves out.
func TestCapsSettleTheLedgersCost(t *testing.T) {
	m := startMoneyStack(t, "limits:\n  spend: [{period: daily, usd: 1}]\n",
		"  - model: m-fallback\n    input: 3\n    output: 15\n")
	// compaction (m): 180,000 in, 3,000 out = $0.18 + $0.03
	// fallback_message (m-fallback): 2,000 in, 500 out = $0.006 + $0.0075
	// message (m): 1,500 in, 800 out = $0.0015 + $0.008; the top-level usage is this step alone.
	usage := `{"input_tokens":1500,"output_tokens":800,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"iterations":[` +
		`{"type":"compaction","input_tokens":180000,"output_tokens":3000,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},` +
		`{"type":"fallback_message","model":"m-fallback","input_tokens":2000,"output_tokens":500,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},` +
		`{"type":"message","input_tokens":1500,"output_tokens":800,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}]}`
	m.fake.SetResponder(func(*fakeapi.Request) fakeapi.Reply {
		r := fakeapi.TextReply("ok")
		r.RawUsage = []byte(usage)
		return r
	})
	const perCall = tokens.Money(180_000_000 + 30_000_000 + 6_000_000 + 7_500_000 + 1_500_000 + 8_000_000) // $0.233
	for i, stream := range []bool{false, true} {
		body := capBody
		if stream {
			body = strings.Replace(body, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
		}
		before := m.spent(t)
		resp, got := post(t, m.proc.Addr, capKey, body)
		if resp.StatusCode != 200 {
			t.Fatalf("stream %v: %d %s", stream, resp.StatusCode, got)
		}
		lines := m.ledgerLines(t, i+1)
		if c := lines[i].Get("cost_usd").String(); c != perCall.String() {
			t.Fatalf("stream %v: ledger cost_usd %s, want %s: %s", stream, c, perCall, lines[i].Raw)
		}
		want := sumCost(t, lines)
		m.settled(t, before)
		if got := m.spent(t); got != want {
			t.Errorf("stream %v: the daily cap was charged %s; the ledger says %s", stream, got, want)
		}
	}
}
