package main

import (
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/stack"
)

// Through the binary against both behaviours of the fake (whether the API takes
// clear_thinking_20251015 with thinking type between_tools is unverified): ctxproxy writes its
// clear_thinking under between_tools where the model's capabilities list it; where the upstream
// refuses it, the client still gets its answer (the request resent once without the edit), the
// refusal is logged once per model with tenant and model, and the next request goes without the edit at
// once, streamed or not.
func TestBinaryTakesBackAClearThinkingTheUpstreamRefusesAndLearnsIt(t *testing.T) {
	for _, refuses := range []bool{false, true} {
		t.Run(fmt.Sprintf("refuses=%v", refuses), func(t *testing.T) {
			fake := fakeapi.New(fakeapi.WithOptions(fakeapi.Options{December: fakeapi.December{BetweenToolsRefusesClearThinking: refuses}}))
			srv := httptest.NewServer(fake)
			defer srv.Close()
			pols, _, err := stack.Layout(t.TempDir(), map[string]string{
				"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
				"vault.yaml": stack.TenantPolicy("vault", binKey, "context_management:\n  mode: enforce\n  clear_thinking: {keep: all}\n"+
					"  clear_tool_uses: {trigger: {type: input_tokens, value: 30000}}\nmemory:\n  mode: off\n"+
					"upstream:\n  api_key_env: CTXPROXY_E2E_VAULT_KEY\n"),
			})
			if err != nil {
				t.Fatal(err)
			}
			p := startVaultProxy(t, "--upstream", srv.URL, "--policies", pols, "--memory-dir", t.TempDir(),
				"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
			// calls sends a between_tools request and returns the upstream's answers to it, each with
			// whether it carried clear_thinking.
			calls := func(t *testing.T, model string, stream bool) (status []int, clear []bool) {
				t.Helper()
				from := int64(len(fake.Requests()))
				body := fmt.Sprintf(`{"model":%q,"max_tokens":100,"stream":%v,"thinking":{"type":"between_tools"},"messages":[{"role":"user","content":"hi"}]}`, model, stream)
				resp, got := sendAs(t, p.Addr, binKey, "/v1/messages", body)
				if resp.StatusCode != 200 || stream != strings.Contains(got, "event: message_stop") {
					t.Fatalf("status %d: %s", resp.StatusCode, got)
				}
				for _, r := range fake.Requests()[from:] {
					if r.Path == "/v1/messages" {
						status = append(status, r.Status)
						clear = append(clear, strings.Contains(gjson.GetBytes(r.Body, "context_management.edits.#.type").Raw, "clear_thinking_20251015"))
					}
				}
				return status, clear
			}
			for i, tt := range []struct {
				name   string
				model  string
				stream bool
				status []int
				clear  []bool
			}{
				{"the first request", "claude-opus-4-8", false, []int{400, 200}, []bool{true, false}},
				{"the next one, plain", "claude-opus-4-8", false, []int{200}, []bool{false}},
				{"the next one, streamed", "claude-opus-4-8", true, []int{200}, []bool{false}},
				{"another model's first request, streamed", "claude-opus-5", true, []int{400, 200}, []bool{true, false}},
				{"its next one", "claude-opus-5", false, []int{200}, []bool{false}},
			} {
				if !refuses {
					tt.status, tt.clear = []int{200}, []bool{true}
				}
				t.Run(tt.name, func(t *testing.T) {
					if status, clear := calls(t, tt.model, tt.stream); !slices.Equal(status, tt.status) || !slices.Equal(clear, tt.clear) {
						t.Errorf("request %d: upstream answered %v, clear_thinking %v; want %v %v", i, status, clear, tt.status, tt.clear)
					}
				})
			}
			p.Stop() // its log is read to the end
			learned := 0
			for _, line := range strings.Split(p.Log(), "\n") {
				if strings.Contains(line, "refused an edit ctxproxy added") {
					learned++
					if !strings.Contains(line, `"tenant":"vault"`) || !strings.Contains(line, `"model":"claude-opus-`) {
						t.Errorf("log line without tenant and model: %s", line)
					}
				}
			}
			if want := map[bool]int{false: 0, true: 2}[refuses]; learned != want {
				t.Errorf("%d log lines of the refusal, want %d", learned, want)
			}
		})
	}
}
