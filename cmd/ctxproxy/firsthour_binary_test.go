package main

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

func TestBinaryHelp(t *testing.T) {
	out, _ := exec.Command(binary(t), "--help").CombinedOutput()
	help := string(out)
	t.Run("lists the subcommands", func(t *testing.T) {
		for _, cmd := range []string{"serve", "validate", "report", "demo", "migrate", "keys", "version"} {
			if !regexp.MustCompile(`(?m)^  ` + cmd + ` +\S`).MatchString(help) {
				t.Errorf("--help does not list %s:\n%s", cmd, help)
			}
		}
	})
	t.Run("shows boolean flags as booleans", func(t *testing.T) {
		if !strings.Contains(help, "\n  -require-known-tenant\n") || strings.Contains(help, "-require-known-tenant string") {
			t.Errorf("--require-known-tenant is not shown as a boolean:\n%s", help)
		}
	})
}

// requestLogLines are the "request" log lines the proxy wrote so far.
func requestLogLines(log string) []gjson.Result {
	var out []gjson.Result
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		if l := gjson.Parse(sc.Text()); l.Get("msg").Str == "request" {
			out = append(out, l)
		}
	}
	return out
}

func TestBinaryFirstHour(t *testing.T) {
	_, upURL := fakeUpstream(t)
	p := startProxy(t, "--upstream", upURL, "--policies", binPolicies(t), "--memory-dir", t.TempDir(),
		"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"), "--max-body", "1KiB")
	big := `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"` + strings.Repeat("x", 2048) + `"}]}`
	t.Run("a 413 names the tenant when the key is known", func(t *testing.T) {
		status, body := rawSend(t, p.Addr, "POST", "/v1/messages", binKey, big)
		msg := gjson.Get(body, "error.message").Str
		if status != 413 || gjson.Get(body, "error.type").Str != "request_too_large" || !strings.Contains(msg, "tenant acme") {
			t.Fatalf("%d %s", status, body)
		}
		status, body = rawSend(t, p.Addr, "POST", "/v1/messages", "sk-ant-nobody", big)
		if status != 413 || strings.Contains(gjson.Get(body, "error.message").Str, "tenant") {
			t.Fatalf("unknown key: %d %s", status, body)
		}
	})
	t.Run("durations in the log carry their unit", func(t *testing.T) {
		rawSend(t, p.Addr, "POST", "/v1/messages", binKey, `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
		unit := regexp.MustCompile(`^[0-9.]+(ns|µs|ms|s|m|h)`)
		var lines []gjson.Result
		eventually(t, "the request log line", func() {
			for {
				for _, l := range requestLogLines(p.Log()) {
					if l.Get("status").Int() == 200 && l.Get("tenant").Str == "acme" {
						lines = append(lines, l)
					}
				}
				if len(lines) > 0 {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
		for _, field := range []string{"duration", "upstream_duration"} {
			if v := lines[0].Get(field); v.Type != gjson.String || !unit.MatchString(v.Str) {
				t.Errorf("%s = %s, want a number with its unit: %s", field, v.Raw, lines[0].Raw)
			}
		}
	})
}
