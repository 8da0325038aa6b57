package fakeapi

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tidwall/gjson"
)

// claudeCodeBetas is the anthropic-beta header Claude Code 2.1.332 sends with
// its default model (captured, with the bodies in testdata/claude-code).
const claudeCodeBetas = "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,per-turn-control-2026-07-01,mid-conversation-tool-changes-2026-07-01,thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,effort-2025-11-24"

// The fake must take what the real API takes from Claude Code: a 400 sends
// the CLI into a fallback dance of retries without betas and fields.
func TestClaudeCodeRequestsAreAccepted(t *testing.T) {
	cases := []struct {
		name, file string
	}{
		{"a tool-loop turn with a system-role message, adaptive thinking and keep \"all\"", "opus55-tool-turn2-request.json"},
		{"a first turn with enabled thinking, display omitted and 12 tools", "sonnet45-request.json"},
	}
	api, base := newServer(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "claude-code", c.file))
			if err != nil {
				t.Fatal(err)
			}
			resp, out := do(t, base, call{path: "/v1/messages?beta=true", body: string(b),
				header: map[string]string{"Anthropic-Beta": claudeCodeBetas, "Accept-Encoding": "gzip, deflate, br, zstd"}})
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			reqs := api.Requests()
			last := reqs[len(reqs)-1]
			if want := len(gjson.GetBytes(b, "messages").Array()); len(last.Messages) != want {
				t.Errorf("recorded %d messages, want %d", len(last.Messages), want)
			}
		})
	}
}
