package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/stack"
)

// pricedModel is a model only the tests' prices files know.
const pricedModel = "claude-test-priced"

func pricesFor(inputUSD string) string {
	return "models:\n  - model: " + pricedModel + "\n    input: " + inputUSD + "\n    output: 1\n"
}

// lastLedgerCall is the ledger's last line for model, "" if none.
func lastLedgerCall(t *testing.T, path, model string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var last string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if gjson.Get(sc.Text(), "model").Str == model {
			last = sc.Text()
		}
	}
	return last
}

// pricedAs sends a request for pricedModel until its ledger line carries the
// input price want (USD per million tokens; "" for price_unknown).
func pricedAs(t *testing.T, addr, ledger, want string) {
	t.Helper()
	body := `{"model":"` + pricedModel + `","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	eventually(t, "the price "+want+" in force", func() {
		for {
			send(t, addr, "/v1/messages", body)
			time.Sleep(50 * time.Millisecond)
			line := lastLedgerCall(t, ledger, pricedModel)
			if line == "" {
				continue
			}
			in := gjson.Get(line, "usage.input_tokens").Int()
			if want == "" {
				if gjson.Get(line, "price_unknown").Bool() {
					return
				}
				continue
			}
			// cost = input × price + output × $1/M
			wantCost := float64(in)*mustFloat(t, want)/1e6 + float64(gjson.Get(line, "usage.output_tokens").Int())/1e6
			if got := gjson.Get(line, "cost_usd").Float(); !gjson.Get(line, "price_unknown").Bool() && abs(got-wantCost) < 1e-9 {
				return
			}
		}
	})
}

func mustFloat(t *testing.T, s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

func TestBinaryPricesReloadWithThePolicies(t *testing.T) {
	_, upURL := fakeUpstream(t)
	pols := binPolicies(t)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.jsonl")
	p := startProxy(t, "--upstream", upURL, "--policies", pols, "--memory-dir", filepath.Join(dir, "mem"), "--ledger", "file:"+ledger,
		"--metrics-addr", "127.0.0.1:0")
	if !strings.Contains(p.Log(), `"table":"built-in price table (`) {
		t.Fatalf("the start does not say the built-in table is in force:\n%s", p.Log())
	}
	t.Run("without prices.yaml the built-in table is in force", func(t *testing.T) {
		pricedAs(t, p.Addr, ledger, "")
	})
	t.Run("a prices.yaml written into the folder is laid over the built-in table", func(t *testing.T) {
		os.WriteFile(filepath.Join(pols, "prices.yaml"), []byte(pricesFor("3000")), 0o644)
		pricedAs(t, p.Addr, ledger, "3000")
	})
	t.Run("a broken prices.yaml is refused and the last good table stays", func(t *testing.T) {
		os.WriteFile(filepath.Join(pols, "prices.yaml"), []byte("models:\n  - model: x\n    output: 1\n"), 0o644)
		eventually(t, "the refusal in the log", func() {
			for !strings.Contains(p.Log(), "prices reload refused; the last good prices stay in force") {
				time.Sleep(50 * time.Millisecond)
			}
		})
		for _, line := range strings.Split(p.Log(), "\n") {
			if strings.HasPrefix(gjson.Get(line, "msg").Str, "prices") && strings.Contains(line, pols) {
				t.Fatalf("a prices log line carries the host path: %s", line)
			}
		}
		pricedAs(t, p.Addr, ledger, "3000")
	})
	t.Run("a tenant added by a file change is a metrics label at once", func(t *testing.T) {
		const zetaKey = "sk-ant-binary-zeta"
		os.WriteFile(filepath.Join(pols, "zeta.yaml"), []byte(stack.TenantPolicy("zeta", zetaKey, "memory:\n  mode: off\n")), 0o644)
		eventually(t, "tenant zeta in the metrics", func() {
			for {
				req, _ := http.NewRequest(http.MethodPost, "http://"+p.Addr+"/v1/messages",
					strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
				req.Header.Set("X-Api-Key", zetaKey)
				req.Header.Set("Anthropic-Version", "2023-06-01")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if strings.Contains(metricsText(t, p), `ctxproxy_requests_total{model="claude-sonnet-4-5",status="200",tenant="zeta"}`) {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	})
}

// metricsText is /metrics of p, started with --metrics-addr.
func metricsText(t *testing.T, p *binaries.Process) string {
	t.Helper()
	addr := p.Addrs["metrics listening"]
	if addr == "" {
		t.Fatalf("no metrics listener: start the proxy with --metrics-addr; log:\n%s", p.Log())
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestBinaryPricesReloadOnSIGHUP(t *testing.T) {
	_, upURL := fakeUpstream(t)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.jsonl")
	prices := filepath.Join(dir, "my-prices.yaml") // outside the watched folder: only SIGHUP reloads it
	os.WriteFile(prices, []byte(pricesFor("1000")), 0o644)
	p := startProxy(t, "--upstream", upURL, "--policies", binPolicies(t), "--memory-dir", filepath.Join(dir, "mem"),
		"--ledger", "file:"+ledger, "--prices", prices)
	pricedAs(t, p.Addr, ledger, "1000")
	os.WriteFile(prices, []byte(pricesFor("2000")), 0o644)
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	pricedAs(t, p.Addr, ledger, "2000")
}

func TestBinaryValidatePrices(t *testing.T) {
	tenant := "tenant: t\nmemory:\n  mode: off\n"
	tests := []struct {
		name   string
		files  map[string]string
		args   []string
		exit   int
		output []string
	}{
		{"without prices.yaml it says the built-in table is in force",
			map[string]string{"t.yaml": tenant}, nil, 0, []string{"prices: built-in price table ("}},
		{"a prices.yaml in the folder is checked and named",
			map[string]string{"t.yaml": tenant, "prices.yaml": pricesFor("1")}, nil, 0,
			[]string{"prices: built-in price table with ", "prices.yaml over it (0 entries overridden, 1 added)"}},
		{"a broken prices.yaml is a problem with its line",
			map[string]string{"t.yaml": tenant, "prices.yaml": "models:\n  - model: x\n    input: one\n"}, nil, 1,
			[]string{"prices.yaml: line 3: input"}},
		{"--prices names a file that must exist",
			map[string]string{"t.yaml": tenant}, []string{"--prices", "/nonexistent/prices.yaml"}, 1,
			[]string{"no such file"}},
		{"a folder without tenant files says so",
			map[string]string{"prices.yaml": pricesFor("1")}, nil, 1,
			[]string{"no tenant policy files"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range tc.files {
				os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
			}
			out, err := exec.Command(binary(t), append([]string{"validate", "--policies", dir}, tc.args...)...).CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.exit {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.exit, out)
			}
			for _, want := range tc.output {
				if !strings.Contains(string(out), want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}
