package tokens

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseMessage(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		usage Usage
		edits []AppliedEdit
	}{
		{
			name:  "usage with all four fields and null context_management",
			body:  `{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi \"usage\": {}"}],"model":"claude-sonnet-4-5","usage":{"input_tokens":12,"output_tokens":34,"cache_creation_input_tokens":56,"cache_read_input_tokens":78},"context_management":null}`,
			usage: Usage{InputTokens: 12, OutputTokens: 34, CacheCreationInputTokens: 56, CacheReadInputTokens: 78},
		},
		{
			name:  "absent context_management and null cache fields",
			body:  `{"usage":{"input_tokens":5,"output_tokens":6,"cache_creation_input_tokens":null,"cache_read_input_tokens":null}}`,
			usage: Usage{InputTokens: 5, OutputTokens: 6},
		},
		{
			name: "both documented edits are read per type",
			body: `{"usage":{"input_tokens":1,"output_tokens":2},"context_management":{"applied_edits":[
				{"type":"clear_thinking_20251015","cleared_thinking_turns":2,"cleared_input_tokens":1800},
				{"type":"clear_tool_uses_20250919","cleared_tool_uses":8,"cleared_input_tokens":50000}]}}`,
			usage: Usage{InputTokens: 1, OutputTokens: 2},
			edits: []AppliedEdit{
				{Type: EditClearThinking, ClearedThinkingTurns: 2, ClearedInputTokens: 1800},
				{Type: EditClearToolUses, ClearedToolUses: 8, ClearedInputTokens: 50000},
			},
		},
		{
			name:  "an edit listed with zeros is kept with zeros",
			body:  `{"context_management":{"applied_edits":[{"type":"clear_tool_uses_20250919","cleared_tool_uses":0,"cleared_input_tokens":0}]},"usage":{"input_tokens":9,"output_tokens":1}}`,
			usage: Usage{InputTokens: 9, OutputTokens: 1},
			edits: []AppliedEdit{{Type: EditClearToolUses}},
		},
		{
			name:  "empty applied_edits gives no edits",
			body:  `{"context_management":{"applied_edits":[]},"usage":{"input_tokens":9,"output_tokens":1}}`,
			usage: Usage{InputTokens: 9, OutputTokens: 1},
		},
		{
			name:  "unknown edit type kept as raw JSON with its cleared tokens",
			body:  `{"context_management":{"applied_edits":[{"type":"compact_20260112","cleared_input_tokens":700,"summary_tokens":40}]},"usage":{"input_tokens":3,"output_tokens":4}}`,
			usage: Usage{InputTokens: 3, OutputTokens: 4},
			edits: []AppliedEdit{{Type: "compact_20260112", ClearedInputTokens: 700, Raw: `{"type":"compact_20260112","cleared_input_tokens":700,"summary_tokens":40}`}},
		},
		{
			name:  "1h cache writes are split out of cache_creation",
			body:  `{"usage":{"input_tokens":1,"output_tokens":1,"cache_creation_input_tokens":300,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":200}}}`,
			usage: Usage{InputTokens: 1, OutputTokens: 1, CacheCreationInputTokens: 300, CacheCreation1hInputTokens: 200},
		},
		{
			name:  "non-object entries and context_management of the wrong type are ignored",
			body:  `{"context_management":{"applied_edits":[1,null,{"type":"clear_tool_uses_20250919","cleared_tool_uses":1,"cleared_input_tokens":2}]},"usage":"x"}`,
			edits: []AppliedEdit{{Type: EditClearToolUses, ClearedToolUses: 1, ClearedInputTokens: 2}},
		},
		{name: "empty body", body: ``},
		{name: "not JSON", body: `<html>bad gateway</html>`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, e := ParseMessage([]byte(tt.body))
			if u != tt.usage {
				t.Errorf("usage = %+v, want %+v", u, tt.usage)
			}
			if !reflect.DeepEqual(e, tt.edits) {
				t.Errorf("edits = %+v, want %+v", e, tt.edits)
			}
		})
	}
}

func TestParseReplyKeepsNothingOfTheBody(t *testing.T) {
	body := []byte(`{"id":"msg_abc","model":"claude-opus-4-8","stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":2},"context_management":{"applied_edits":[{"type":"x_1","cleared_input_tokens":5}]}}`)
	r := ParseReply(body)
	for i := range body {
		body[i] = 'Z'
	}
	if r.ID != "msg_abc" || r.Model != "claude-opus-4-8" || r.StopReason != "tool_use" {
		t.Fatalf("reply fields changed with the body: %+v", r)
	}
	if r.Edits[0].Type != "x_1" || !strings.Contains(r.Edits[0].Raw, `"x_1"`) {
		t.Fatalf("edit aliases the body: %+v", r.Edits[0])
	}
}

type sse struct{ name, data string }

func TestStreamMeter(t *testing.T) {
	start := `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1,"cache_creation_input_tokens":10,"cache_read_input_tokens":20}}}`
	body := []sse{
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
		{"ping", `{"type":"ping"}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"{\"usage\":{\"output_tokens\":999}}"}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":0}`},
	}
	tests := []struct {
		name   string
		events []sse
		want   Reply
	}{
		{
			name: "input side from message_start, cumulative output from message_delta, null context_management",
			events: append(append([]sse{{"message_start", start}}, body...),
				sse{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15},"context_management":null}`},
				sse{"message_stop", `{"type":"message_stop"}`}),
			want: Reply{ID: "msg_1", Model: "claude-sonnet-4-5", StopReason: "end_turn",
				Usage: Usage{InputTokens: 25, OutputTokens: 15, CacheCreationInputTokens: 10, CacheReadInputTokens: 20}},
		},
		{
			name: "zeros in message_start are replaced by message_delta values",
			events: []sse{
				{"message_start", `{"type":"message_start","message":{"id":"msg_2","model":"claude-opus-4-8","usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}`},
				{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"input_tokens":4000,"output_tokens":87,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000},"context_management":{"applied_edits":[{"type":"clear_tool_uses_20250919","cleared_tool_uses":2,"cleared_input_tokens":12000}]}}`},
			},
			want: Reply{ID: "msg_2", Model: "claude-opus-4-8", StopReason: "tool_use",
				Usage: Usage{InputTokens: 4000, OutputTokens: 87, CacheCreationInputTokens: 100, CacheReadInputTokens: 2000},
				Edits: []AppliedEdit{{Type: EditClearToolUses, ClearedToolUses: 2, ClearedInputTokens: 12000}}},
		},
		{
			name: "zeros repeated in message_delta do not erase message_start values",
			events: []sse{
				{"message_start", start},
				{"message_delta", `{"type":"message_delta","delta":{},"usage":{"input_tokens":0,"output_tokens":7,"cache_read_input_tokens":0}}`},
			},
			want: Reply{ID: "msg_1", Model: "claude-sonnet-4-5",
				Usage: Usage{InputTokens: 25, OutputTokens: 7, CacheCreationInputTokens: 10, CacheReadInputTokens: 20}},
		},
		{
			name: "several message_delta events: the last cumulative count wins, a later null keeps the edits",
			events: []sse{
				{"message_start", start},
				{"message_delta", `{"type":"message_delta","delta":{},"usage":{"output_tokens":5},"context_management":{"applied_edits":[{"type":"clear_thinking_20251015","cleared_thinking_turns":3,"cleared_input_tokens":15000},{"type":"compact_20260112","cleared_input_tokens":1}]}}`},
				{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":9},"context_management":null}`},
			},
			want: Reply{ID: "msg_1", Model: "claude-sonnet-4-5", StopReason: "max_tokens",
				Usage: Usage{InputTokens: 25, OutputTokens: 9, CacheCreationInputTokens: 10, CacheReadInputTokens: 20},
				Edits: []AppliedEdit{
					{Type: EditClearThinking, ClearedThinkingTurns: 3, ClearedInputTokens: 15000},
					{Type: "compact_20260112", ClearedInputTokens: 1, Raw: `{"type":"compact_20260112","cleared_input_tokens":1}`},
				}},
		},
		{
			name: "event names may be empty: the data's type is used",
			events: []sse{
				{"", `{"type":"message_start","message":{"id":"m","model":"x","usage":{"input_tokens":3,"output_tokens":1}}}`},
				{"", `{"type":"message_delta","usage":{"output_tokens":4}}`},
			},
			want: Reply{ID: "m", Model: "x", Usage: Usage{InputTokens: 3, OutputTokens: 4}},
		},
		{
			name: "a mid-stream error is noted, usage so far kept",
			events: []sse{
				{"message_start", start},
				{"error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`},
			},
			want: Reply{ID: "msg_1", Model: "claude-sonnet-4-5", ErrorType: "overloaded_error",
				Usage: Usage{InputTokens: 25, OutputTokens: 1, CacheCreationInputTokens: 10, CacheReadInputTokens: 20}},
		},
		{
			name:   "unknown events and garbage are ignored",
			events: []sse{{"future_event", `{"usage":{"input_tokens":5}}`}, {"message_delta", `not json`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m StreamMeter
			for _, e := range tt.events {
				m.Event(e.name, []byte(e.data))
			}
			got := m.Reply()
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("reply =\n %+v\nwant\n %+v", got, tt.want)
			}
			u, e := m.Result()
			if u != tt.want.Usage || !reflect.DeepEqual(e, tt.want.Edits) {
				t.Errorf("Result() = %+v %+v", u, e)
			}
		})
	}
}

func TestParseCountTokens(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    CountTokens
		cleared int64
	}{
		{"with original_input_tokens", `{"input_tokens":25000,"context_management":{"original_input_tokens":70000}}`,
			CountTokens{InputTokens: 25000, OriginalInputTokens: 70000, HasOriginal: true}, 45000},
		{"null context_management", `{"input_tokens":10,"context_management":null}`, CountTokens{InputTokens: 10}, 0},
		{"absent context_management", `{"input_tokens":10}`, CountTokens{InputTokens: 10}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParseCountTokens([]byte(tt.body))
			if got != tt.want || got.Cleared() != tt.cleared {
				t.Errorf("got %+v cleared %d, want %+v cleared %d", got, got.Cleared(), tt.want, tt.cleared)
			}
		})
	}
}

func TestUsageAdd(t *testing.T) {
	u := Usage{1, 2, 3, 4, 1, 5}
	u.Add(Usage{10, 20, 30, 40, 2, 6})
	if u != (Usage{11, 22, 33, 44, 3, 11}) || u.TotalInput() != 11+33+44 {
		t.Fatalf("Add: %+v", u)
	}
}

var benchBody = []byte(`{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"` +
	strings.Repeat("lorem ipsum dolor sit amet ", 400) +
	`"},{"type":"tool_use","id":"toolu_1","name":"memory","input":{"command":"view","path":"/memories"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":4200,"output_tokens":350,"cache_creation_input_tokens":0,"cache_read_input_tokens":12000},"context_management":{"applied_edits":[{"type":"clear_thinking_20251015","cleared_thinking_turns":2,"cleared_input_tokens":1800},{"type":"clear_tool_uses_20250919","cleared_tool_uses":8,"cleared_input_tokens":50000}]}}`)

func BenchmarkParseMessage(b *testing.B) {
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	for b.Loop() {
		u, e := ParseMessage(benchBody)
		if u.InputTokens != 4200 || len(e) != 2 {
			b.Fatal("bad parse")
		}
	}
}

func BenchmarkStreamMeterEvent(b *testing.B) {
	events := []sse{
		{"message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello there, this is a delta"}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello there, this is a delta"}}`},
		{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15},"context_management":{"applied_edits":[{"type":"clear_tool_uses_20250919","cleared_tool_uses":2,"cleared_input_tokens":12000}]}}`},
	}
	data := make([][]byte, len(events))
	for i, e := range events {
		data[i] = []byte(e.data)
	}
	b.ReportAllocs()
	var m StreamMeter
	i := 0
	for b.Loop() {
		m.Event(events[i].name, data[i])
		i = (i + 1) % len(events)
	}
}

// A stream cut before its message_delta is charged what it is known to have produced: the
// output of its relayed deltas at four bytes a token, or the floor it held, whichever is more.
func TestStreamMeterCutReply(t *testing.T) {
	var m StreamMeter
	m.Event("message_start", []byte(`{"type":"message_start","message":{"id":"msg_1","model":"m","usage":{"input_tokens":25,"output_tokens":1,"iterations":[{"type":"message","input_tokens":25,"output_tokens":1}]}}}`))
	for _, d := range []string{
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"0123456789"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"abc\"d"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"signature_delta","signature":"not output the model wrote"}}`,
		`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`,
	} {
		m.Delta([]byte(d))
	}
	if got := m.OutputEstimate(); got != 6 { // 10 + 6 + 7 bytes = 23 bytes: 6 tokens rounded up
		t.Errorf("OutputEstimate = %d, want 6", got)
	}
	r := m.CutReply(0)
	if !r.Cut || r.Usage.OutputTokens != 6 || r.Usage.InputTokens != 25 || r.Iterations != nil || r.ID != "msg_1" {
		t.Errorf("CutReply(0) = %+v", r)
	}
	if r := m.CutReply(4096); r.Usage.OutputTokens != 4096 {
		t.Errorf("CutReply(4096) output = %d, want the held 4096", r.Usage.OutputTokens)
	}
	if r := m.Reply(); r.Cut || r.Usage.OutputTokens != 1 {
		t.Errorf("Reply after CutReply = %+v", r)
	}
}
