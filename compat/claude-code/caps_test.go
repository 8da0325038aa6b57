package claudecode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/stack"
)

const keyCapped = "sk-ant-compat-claude-code-capped"

// Claude Code against a tenant with a $1 daily cap: each session is one reply that
// costs $0.81 (270,000 input tokens of claude-sonnet-4-5 at $3 per million). The first is served
// with the cap's headers at 0%, the second at 81% (past the 0.75 threshold), and the third,
// with $1.62 spent, is refused with 429 billing_error: Claude Code stops at once and says so.
// The upstream's organisation-wide ratelimit headers never reach it.
func TestClaudeCodeAtItsSpendCap(t *testing.T) {
	npm := need(t, "npm")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	claude := installClaudeCode(ctx, t, npm)
	ctxproxyBin, fakeBin := buildBinaries(ctx, t)
	root := t.TempDir()
	// The built-in price table: claude-sonnet-4-5 at $3 per million input tokens.
	polDir, memDir, err := stack.Layout(root, map[string]string{
		"cc-capped.yaml": stack.TenantPolicy("cc-capped", keyCapped, "limits:\n  spend: [{period: daily, usd: 1}]\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	fakeAddr := startLogged(ctx, t, "fakeapi listening", fakeBin, "--listen", "127.0.0.1:0", "--log-level", "info")
	proxyAddr := startLogged(ctx, t, "ctxproxy listening", ctxproxyBin, "serve", "--listen", "127.0.0.1:0",
		"--upstream", "http://"+fakeAddr, "--policies", polDir, "--memory-dir", memDir,
		"--ledger", "file:"+filepath.Join(root, "ledger.jsonl"), "--log-level", "info", "--admin-token", "adm")
	client := startTap(t, "http://"+proxyAddr, false)
	fake := fakeControl{base: "http://" + fakeAddr}

	// settledSessions waits until the proxy has charged n sessions: it settles a request after
	// its reply reached Claude Code.
	settledSessions := func(t *testing.T, n int) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			var rep struct {
				Caps []struct {
					Spent float64 `json:"spent_usd"`
				} `json:"caps"`
			}
			req, _ := newRequest(ctx, http.MethodGet, "http://"+proxyAddr+"/admin/report", nil)
			req.Header.Set("Authorization", "Bearer adm")
			if resp, err := httpClient.Do(req); err == nil {
				_ = json.NewDecoder(resp.Body).Decode(&rep)
				resp.Body.Close()
			}
			if len(rep.Caps) == 1 && rep.Caps[0].Spent >= 0.81*float64(n) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the proxy has not charged %d session(s): %+v", n, rep)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	session := func(t *testing.T, n int) (ccResult, []*exchange, error) {
		settledSessions(t, n-1)
		answer := fmt.Sprintf("ANSWER %d", n)
		reply := fakeapi.TextReply(answer)
		reply.StopReason = "end_turn"
		reply.Usage = &fakeapi.Usage{InputTokens: 270000, OutputTokens: 1}
		reply.Header = map[string][]string{"Anthropic-Ratelimit-Requests-Remaining": {"3999"}, "Anthropic-Ratelimit-Tokens-Limit": {"8000000"}}
		if err := fake.post(ctx, "/_fake/script", map[string]any{"reset": true, "replies": []fakeapi.Reply{reply}}, nil); err != nil {
			t.Fatal(err)
		}
		client.take()
		res, stderr, err := runClaudeExit(ctx, t, claude, client.URL, []string{"ANTHROPIC_API_KEY=" + keyCapped})
		exs := client.take()
		t.Logf("session %d: result %+v, exit %v, %d exchange(s); stderr:\n%s", n, res, err, len(exs), stderr)
		return res, exs, err
	}
	header := func(exs []*exchange, k string) string {
		if len(exs) == 0 {
			return ""
		}
		return exs[len(exs)-1].RespHeader.Get("Anthropic-Ratelimit-Unified-" + k)
	}
	orgHeaders := func(t *testing.T, exs []*exchange) {
		for _, ex := range exs {
			for k := range ex.RespHeader {
				if strings.HasPrefix(k, "Anthropic-Ratelimit-") && !strings.HasPrefix(k, "Anthropic-Ratelimit-Unified-") {
					t.Errorf("the upstream's %s reached Claude Code", k)
				}
			}
		}
	}

	t.Run("under the cap: the session runs and Claude Code is told where it stands", func(t *testing.T) {
		res, exs, err := session(t, 1)
		if err != nil || res.IsError || res.Result != "ANSWER 1" {
			t.Fatalf("session 1: %+v %v", res, err)
		}
		if header(exs, "Status") != "allowed" || header(exs, "Overage-Utilization") != "0" || header(exs, "Representative-Claim") != "overage" {
			t.Errorf("unified headers: %v", exs[len(exs)-1].RespHeader)
		}
		orgHeaders(t, exs)
	})
	t.Run("past 75%: allowed_warning with the 0.75 threshold", func(t *testing.T) {
		res, exs, err := session(t, 2)
		if err != nil || res.IsError || res.Result != "ANSWER 2" {
			t.Fatalf("session 2: %+v %v", res, err)
		}
		if header(exs, "Status") != "allowed_warning" || header(exs, "Overage-Surpassed-Threshold") != "0.75" || header(exs, "Overage-Utilization") != "0.81" {
			t.Errorf("unified headers: %v", exs[len(exs)-1].RespHeader)
		}
		orgHeaders(t, exs)
	})
	t.Run("at the cap: Claude Code gets 429 billing_error, does not retry, and stops", func(t *testing.T) {
		res, exs, _ := session(t, 3)
		// Claude Code shows the gateway's message: the limit, and when it resets.
		if !res.IsError || !strings.Contains(res.Result, "429") || !strings.Contains(res.Result, "daily spend limit of $1 is reached") ||
			!strings.Contains(res.Result, "resets at") {
			t.Errorf("session 3 = %+v, want an error showing the daily cap and its reset", res)
		}
		if len(exs) != 1 || exs[0].Status != 429 {
			t.Fatalf("Claude Code sent %d request(s) (want 1, no retry of a billing_error)", len(exs))
		}
		if header(exs, "Status") != "rejected" || header(exs, "Overage-Disabled-Reason") != "org_spend_cap_reached" || header(exs, "Overage-Period") != "daily" ||
			exs[0].RespHeader.Get("X-Should-Retry") != "false" {
			t.Errorf("refusal headers: %v", exs[0].RespHeader)
		}
	})
}
