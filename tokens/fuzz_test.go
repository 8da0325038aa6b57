package tokens

import (
	"testing"
)

// FuzzParse feeds arbitrary bytes to every parser: none may panic, and what comes out must
// survive a ledger round trip.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"usage":{"input_tokens":1,"output_tokens":2},"context_management":{"applied_edits":[{"type":"clear_tool_uses_20250919","cleared_tool_uses":1,"cleared_input_tokens":5},{"type":"x","a":[1,{"b":null}]}]}}`))
	f.Add([]byte(`{"type":"message_delta","usage":{"output_tokens":-5},"context_management":{"applied_edits":"nope"}}`))
	f.Add([]byte(`{"input_tokens":1e400,"context_management":{"original_input_tokens":"x"}}`))
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := ParseReply(b)
		var m StreamMeter
		m.Event("", b)
		m.Event("message_start", b)
		m.Event("message_delta", b)
		m.Event("error", b)
		_ = m.Reply()
		_ = ParseCountTokens(b)
		c := Call{Time: t0, Model: r.Model, Usage: r.Usage, Edits: r.Edits}
		line, err := MarshalCall(&c)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back, err := UnmarshalCall(line)
		if err != nil {
			t.Fatalf("round trip of %s: %v", line, err)
		}
		if len(back.Edits) != len(c.Edits) || back.Usage != c.Usage {
			t.Fatalf("round trip changed the call: %+v vs %+v", back, c)
		}
	})
}
