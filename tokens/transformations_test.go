package tokens

import (
	"slices"
	"testing"
)

func TestInputTransformationsAreRead(t *testing.T) {
	entries := `[{"type":"thinking_dropped","path":"messages.1.content.0","reason":"prefix_binding_mismatch"},{"type":"thinking_mismatch_allowed","path":"messages.3.content.1","reason":"prefix_binding_mismatch"},{"path":"x"}]`
	want := []Transformation{{"thinking_dropped", "prefix_binding_mismatch"}, {"thinking_mismatch_allowed", "prefix_binding_mismatch"}}
	t.Run("from a whole reply", func(t *testing.T) {
		r := ParseReply([]byte(`{"id":"msg_1","input_transformations":` + entries + `,"usage":{"input_tokens":1,"output_tokens":1}}`))
		if !slices.Equal(r.Transformations, want) {
			t.Errorf("%v", r.Transformations)
		}
		if r := ParseReply([]byte(`{"id":"msg_1"}`)); r.Transformations != nil {
			t.Errorf("a reply without any: %v", r.Transformations)
		}
		if r := ParseReply([]byte(`{"id":"msg_1","input_transformations":[]}`)); r.Transformations == nil || len(r.Transformations) != 0 {
			t.Errorf("[]: %v", r.Transformations)
		}
	})
	t.Run("from message_start, replaced by a message_delta's after a fallback", func(t *testing.T) {
		var m StreamMeter
		m.Event("message_start", []byte(`{"type":"message_start","message":{"id":"msg_1","input_transformations":`+entries+`,"usage":{"input_tokens":1}}}`))
		if got := m.Reply().Transformations; !slices.Equal(got, want) {
			t.Errorf("message_start: %v", got)
		}
		m.Event("message_delta", []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`))
		if got := m.Reply().Transformations; !slices.Equal(got, want) {
			t.Errorf("a message_delta without any replaced them: %v", got)
		}
		m.Event("message_delta", []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"input_transformations":[{"type":"thinking_dropped","reason":"model_binding_mismatch"}],"usage":{"output_tokens":2}}`))
		if got := m.Reply().Transformations; !slices.Equal(got, []Transformation{{"thinking_dropped", "model_binding_mismatch"}}) {
			t.Errorf("after the fallback: %v", got)
		}
	})
}
