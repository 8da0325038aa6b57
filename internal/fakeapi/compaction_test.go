package fakeapi

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

const compactEdit = `{"type":"compact_20260112","trigger":{"type":"input_tokens","value":50000}}`

// longConversation is a conversation past a 50,000-token trigger: a long
// first user turn, an assistant answer and a short last turn.
func longConversation() string {
	long, _ := json.Marshal(strings.Repeat("x", 220000))
	return `[{"role":"user","content":` + string(long) + `},{"role":"assistant","content":"noted"},{"role":"user","content":"go on"}]`
}

func compactBody(edit string, stream bool) string {
	b := body(`{"messages":` + longConversation() + `,"context_management":{"edits":[` + edit + `]}}`)
	if stream {
		b = b[:len(b)-1] + `,"stream":true}`
	}
	return b
}

// accumulateSSE builds the message a streaming client holds, assigning (not
// appending) compaction_delta as the SDKs do.
func accumulateSSE(t *testing.T, raw []byte) gjson.Result {
	t.Helper()
	evs, err := parseSSE(t, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var msg map[string]any
	var blocks []map[string]any
	var usage any
	stop := ""
	for _, e := range evs {
		d := gjson.Parse(e.data)
		switch e.name {
		case "message_start":
			_ = json.Unmarshal([]byte(d.Get("message").Raw), &msg)
		case "content_block_start":
			var b map[string]any
			_ = json.Unmarshal([]byte(d.Get("content_block").Raw), &b)
			blocks = append(blocks, b)
		case "content_block_delta":
			b := blocks[d.Get("index").Int()]
			switch d.Get("delta.type").Str {
			case "text_delta":
				b["text"] = b["text"].(string) + d.Get("delta.text").Str
			case "compaction_delta":
				b["content"] = d.Get("delta.content").Value()
				b["encrypted_content"] = d.Get("delta.encrypted_content").Value()
			}
		case "message_delta":
			stop = d.Get("delta.stop_reason").Str
			_ = json.Unmarshal([]byte(d.Get("usage").Raw), &usage)
		}
	}
	msg["content"], msg["stop_reason"], msg["usage"] = blocks, stop, usage
	out, _ := json.Marshal(msg)
	return gjson.ParseBytes(out)
}

func TestTheFakeCompactsPastTheTrigger(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "stream"}[stream], func(t *testing.T) {
			api, base := newServer(t)
			api.Enqueue(TextReply("continuing"))
			resp, b := do(t, base, call{body: compactBody(compactEdit, stream)})
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			m := gjson.ParseBytes(b)
			if stream {
				evs, _ := parseSSE(t, bytes.NewReader(b))
				deltas := 0
				for _, e := range evs {
					if gjson.Get(e.data, "delta.type").Str == "compaction_delta" {
						deltas++
					}
				}
				if deltas != 1 {
					t.Errorf("%d compaction_delta events, want exactly 1", deltas)
				}
				m = accumulateSSE(t, b)
			}
			c := m.Get("content")
			if c.Get("0.type").Str != "compaction" || !strings.Contains(c.Get("0.content").Str, "<summary>Summary of 3 earlier messages") ||
				c.Get("0.encrypted_content").Str == "" || c.Get("1.text").Str != "continuing" || m.Get("stop_reason").Str != "end_turn" {
				t.Fatalf("reply %s", m.Raw)
			}
			it := m.Get("usage.iterations")
			if it.Get("#").Int() != 2 || it.Get("0.type").Str != "compaction" || it.Get("1.type").Str != "message" ||
				it.Get("1.model").Str != "claude-sonnet-4-5" {
				t.Fatalf("iterations %s", it.Raw)
			}
			// The top-level usage is the message iteration's; the compaction read the whole context.
			if m.Get("usage.input_tokens").Int() != it.Get("1.input_tokens").Int() || it.Get("0.input_tokens").Int() < 55000 ||
				it.Get("1.input_tokens").Int() > 1000 {
				t.Errorf("usage %s", m.Get("usage").Raw)
			}
		})
	}
}

func TestTheFakeTakesItsCompactionBlockBackAndIgnoresWhatCameBefore(t *testing.T) {
	api, base := newServer(t)
	api.Enqueue(TextReply("continuing"))
	_, b := do(t, base, call{body: compactBody(compactEdit, false)})
	block := gjson.GetBytes(b, "content.0").Raw
	// The client appends the whole assistant content and goes on.
	msgs := strings.TrimSuffix(longConversation(), "]") + `,{"role":"assistant","content":[` + block + `,{"type":"text","text":"continuing"}]},{"role":"user","content":"and now?"}]`
	resp, out := do(t, base, call{path: "/v1/messages/count_tokens", body: body(`{"messages":` + msgs + `,"context_management":{"edits":[` + compactEdit + `]}}`)})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	if n := gjson.GetBytes(out, "input_tokens").Int(); n > 1000 {
		t.Errorf("count_tokens after a compaction = %d, want only the summary and what follows it", n)
	}
	resp, out = do(t, base, call{body: body(`{"messages":` + msgs + `,"context_management":{"edits":[` + compactEdit + `]}}`)})
	if resp.StatusCode != 200 || gjson.GetBytes(out, "content.0.type").Str == "compaction" ||
		gjson.GetBytes(out, "usage.iterations.#").Int() != 1 {
		t.Fatalf("second call compacted again or failed: %d %s", resp.StatusCode, out)
	}
}

func TestTheFakePausesAfterCompactionOnlyWhenAsked(t *testing.T) {
	_, base := newServer(t)
	resp, b := do(t, base, call{body: compactBody(`{"type":"compact_20260112","trigger":{"type":"input_tokens","value":50000},"pause_after_compaction":true}`, false)})
	m := gjson.ParseBytes(b)
	if resp.StatusCode != 200 || m.Get("stop_reason").Str != "compaction" || m.Get("content.#").Int() != 1 ||
		m.Get("usage.output_tokens").Int() != 0 || m.Get("usage.iterations.0.type").Str != "compaction" {
		t.Fatalf("paused reply %s", b)
	}
}

func TestTheFakeServesOnDemandCompaction(t *testing.T) {
	_, base := newServer(t)
	req := body(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"bye"}],"compaction":{"type":"summarize","instructions":"short"}}`)
	resp, b := do(t, base, call{body: req})
	m := gjson.ParseBytes(b)
	block := m.Get("content.0")
	if resp.StatusCode != 200 || m.Get("stop_reason").Str != "compaction" || m.Get("content.#").Int() != 1 ||
		block.Get("type").Str != "compaction" || block.Get("signature").Str == "" || m.Get("usage.input_tokens").Int() != 0 ||
		m.Get("usage.iterations.0.type").Str != "compaction" || m.Get("usage.iterations.0.input_tokens").Int() == 0 {
		t.Fatalf("on-demand reply %s", b)
	}
	tampered := strings.Replace(block.Raw, "Summary", "Summery", 1)
	cases := []struct {
		name, messages, cm string
		status             int
		code               string
	}{
		{"the signed block sent back first is accepted", `[{"role":"user","content":[` + block.Raw + `,{"type":"text","text":"go on"}]}]`, "", 200, ""},
		{"a changed summary is refused", `[{"role":"user","content":[` + tampered + `,{"type":"text","text":"go on"}]}]`, "", 400, "compaction_signature_invalid"},
		{"a signed block not first is refused", `[{"role":"user","content":"hi"},{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"text","text":"x"},` + block.Raw + `]}]`, "", 400, "compaction_block_misplaced"},
		{"a signed block with a compact edit is refused", `[{"role":"user","content":[` + block.Raw + `,{"type":"text","text":"go on"}]}]`, `,"context_management":{"edits":[` + compactEdit + `]}`, 400, ""},
		{"an empty summary is refused", `[{"role":"user","content":[{"type":"compaction","content":""},{"type":"text","text":"go on"}]}]`, "", 400, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := do(t, base, call{body: body(`{"messages":` + tc.messages + tc.cm + `}`)})
			if resp.StatusCode != tc.status || gjson.GetBytes(b, "error.details.error_code").Str != tc.code {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
		})
	}
}

func TestTheFakeRefusesBadCompactionRequests(t *testing.T) {
	cases := []struct {
		name, body, message string
		noBetas             bool // only the context-management beta
	}{
		{"a compact trigger under 50,000", body(`{"context_management":{"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens","value":49999}}]}}`), "greater than or equal to 50000", false},
		{"a compact edit without its beta", body(`{"context_management":{"edits":[` + compactEdit + `]}}`), `requires the anthropic-beta header \"compact-2026-01-12\"`, true},
		{"on-demand compaction with context_management", body(`{"compaction":{"type":"summarize"},"context_management":{"edits":[]}}`), "cannot be combined with context_management", false},
		{"on-demand compaction of another type", body(`{"compaction":{"type":"drop"}}`), "compaction.type", false},
	}
	_, base := newServer(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := call{body: tc.body}
			if tc.noBetas { // only the context-management beta
				c.header = map[string]string{"Anthropic-Beta": BetaContextManagement}
			}
			resp, b := do(t, base, c)
			if resp.StatusCode != 400 || !strings.Contains(string(b), tc.message) {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
		})
	}
}

func TestCountTokensNeverCompacts(t *testing.T) {
	_, base := newServer(t)
	req := compactBody(compactEdit, false)
	resp, b := do(t, base, call{path: "/v1/messages/count_tokens", body: req})
	if resp.StatusCode != 200 || gjson.GetBytes(b, "input_tokens").Int() < 55000 {
		t.Fatalf("count_tokens %d: %s", resp.StatusCode, b)
	}
}

func TestTheStrictThreadsModeRefusesFieldsInThreads(t *testing.T) {
	thinking := `"thinking":{"type":"adaptive"}`
	cm := `"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]}`
	cases := []struct {
		name        string
		refuse      []string
		fields      string
		unsupported string // "" when accepted
	}{
		{"lenient: edits in a thread are taken", nil, cm, ""},
		{"strict on context_management refuses edits", []string{"context_management"}, cm, `["context_management"]`},
		{"strict on context_management takes thinking", []string{"context_management"}, thinking, ""},
		{"strict on thinking refuses thinking", []string{"thinking"}, thinking, `["thinking"]`},
		{"strict on both lists both", []string{"context_management", "thinking"}, cm + "," + thinking, `["context_management","thinking"]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			api, base := newServer(t, WithThreadsRefuse(tc.refuse...))
			resp, b := do(t, base, call{body: body(`{"thread":{"type":"create"},` + tc.fields + `}`)})
			if tc.unsupported == "" {
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, b)
				}
				return
			}
			e := gjson.GetBytes(b, "error")
			if resp.StatusCode != 400 || e.Get("type").Str != "invalid_request_error" ||
				e.Get("details.error_code").Str != "thread_unsupported_request" || e.Get("details.unsupported").Raw != tc.unsupported {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			// The same request unthreaded is served.
			resp, b = do(t, base, call{body: body(`{` + tc.fields + `}`)})
			if resp.StatusCode != 200 {
				t.Fatalf("unthreaded: status %d: %s", resp.StatusCode, b)
			}
			_ = api
		})
	}
}

func TestTheFakeCanRefuseAReplayedBlockWithoutTheCompactEdit(t *testing.T) {
	msgs := `[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"compaction","content":"<summary>s</summary>"},{"type":"text","text":"ok"}]},{"role":"user","content":"go on"}]`
	for _, needsEdit := range []bool{false, true} {
		api, base := newServer(t)
		o := api.CurrentOptions()
		o.CompactionBlockNeedsEdit = needsEdit
		api.SetOptions(o)
		resp, b := do(t, base, call{body: body(`{"messages":` + msgs + `}`)})
		if want := map[bool]int{false: 200, true: 400}[needsEdit]; resp.StatusCode != want {
			t.Errorf("needs edit %v: status %d, want %d: %s", needsEdit, resp.StatusCode, want, b)
		}
		resp, b = do(t, base, call{body: body(`{"messages":` + msgs + `,"context_management":{"edits":[` + compactEdit + `]}}`)})
		if resp.StatusCode != 200 {
			t.Errorf("needs edit %v, with the edit: status %d: %s", needsEdit, resp.StatusCode, b)
		}
	}
}

func TestRawUsageIsServedAsScripted(t *testing.T) {
	raw := `{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":7,"cache_read_input_tokens":3,"cache_creation":{"ephemeral_5m_input_tokens":4,"ephemeral_1h_input_tokens":3},"service_tier":"batch","iterations":[{"type":"fallback_message","model":"claude-opus-4-8","input_tokens":1,"output_tokens":2}]}`
	for _, stream := range []bool{false, true} {
		api, base := newServer(t)
		api.Enqueue(Reply{RawUsage: json.RawMessage(raw)})
		b := body("")
		if stream {
			b = b[:len(b)-1] + `,"stream":true}`
		}
		_, out := do(t, base, call{body: b})
		u := gjson.GetBytes(out, "usage").Raw
		if stream {
			evs, _ := parseSSE(t, bytes.NewReader(out))
			for _, e := range evs {
				if e.name == "message_delta" {
					u = gjson.Get(e.data, "usage").Raw
				}
			}
		}
		if u != raw {
			t.Errorf("stream %v: usage %s", stream, u)
		}
	}
}
