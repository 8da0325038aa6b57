package cachetrack

import (
	"fmt"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

func TestAttribute(t *testing.T) {
	prev := &Prev{At: t0, Cached: 10_000, TTL: TTL5m, Model: "m", System: 1, Tools: 2, ClearedToolUses: 2}
	call := func(f func(c *Call)) *Call {
		c := &Call{At: t0.Add(time.Minute), Model: "m", System: 1, Tools: 2, ClearedToolUses: 3, CacheRead: 4_000}
		if f != nil {
			f(c)
		}
		return c
	}
	tests := []struct {
		name string
		prev *Prev
		call *Call
		want Verdict
	}{
		{"a conversation not seen before is unknown", nil, call(nil), Verdict{}},
		{"a new clearing point charges the miss to the edits", prev, call(nil), Verdict{Known: true, Missed: 6_000, Cause: CauseEdits}},
		{"a new thinking clearing point too", prev, call(func(c *Call) { c.ClearedToolUses, c.ClearedThinkingTurns = 2, 1 }), Verdict{true, 6_000, CauseEdits}},
		{"a hit on everything cached is no miss", prev, call(func(c *Call) { c.CacheRead = 12_000 }), Verdict{Known: true}},
		{"without a new clearing point a miss has no known cause", prev, call(func(c *Call) { c.ClearedToolUses = 2 }), Verdict{true, 6_000, ""}},
		{"a pause past the TTL is expiry", prev, call(func(c *Call) { c.At = t0.Add(5*time.Minute + time.Second) }), Verdict{true, 6_000, CauseExpiry}},
		{"a pause of exactly the TTL is not", prev, call(func(c *Call) { c.At = t0.Add(5 * time.Minute) }), Verdict{true, 6_000, CauseEdits}},
		{"a changed model", prev, call(func(c *Call) { c.Model = "n" }), Verdict{true, 6_000, CauseModel}},
		{"changed tools", prev, call(func(c *Call) { c.Tools = 3 }), Verdict{true, 6_000, CauseTools}},
		{"a changed system prompt", prev, call(func(c *Call) { c.System = 3 }), Verdict{true, 6_000, CauseSystem}},
		{"the API saying the client changed its messages", prev, call(func(c *Call) { c.Diagnosis = "messages_changed" }), Verdict{true, 6_000, CauseClient}},
		{"the API saying the system changed", prev, call(func(c *Call) { c.Diagnosis = "system_changed" }), Verdict{true, 6_000, CauseSystem}},
		{"the API unable to tell leaves it to usage", prev, call(func(c *Call) { c.Diagnosis = "unavailable" }), Verdict{true, 6_000, CauseEdits}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Attribute(tt.prev, tt.call); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestNextKeepsTheLongestTTLWritten(t *testing.T) {
	first := Next(nil, &Call{At: t0, CacheCreation: 100, CacheCreation1h: 100})
	if first.TTL != TTL1h || first.Cached != 100 {
		t.Fatalf("first = %+v", first)
	}
	readOnly := Next(&first, &Call{At: t0.Add(time.Minute), CacheRead: 100})
	if readOnly.TTL != TTL1h {
		t.Errorf("a call that only read keeps the TTL it read: %v", readOnly.TTL)
	}
	fiveMin := Next(&readOnly, &Call{At: t0.Add(2 * time.Minute), CacheRead: 100, CacheCreation: 50})
	if fiveMin.TTL != TTL5m || fiveMin.Cached != 150 {
		t.Errorf("a call that wrote 5m only: %+v", fiveMin)
	}
}

func TestTrackerIsBounded(t *testing.T) {
	tr := New(func() time.Time { return t0 }, 100)
	for i := range 1000 {
		tr.Store(Key(i+1), Prev{Cached: int64(i)})
	}
	if n := tr.Len(); n > 100 {
		t.Errorf("remembers %d conversations, capacity 100", n)
	}
	if p, ok := tr.Lookup(1000); !ok || p.Cached != 999 {
		t.Errorf("the latest conversation is forgotten: %+v %v", p, ok)
	}
	if _, ok := tr.Lookup(1); ok {
		t.Error("the oldest conversation is still remembered")
	}
	if _, ok := tr.Lookup(0); ok {
		t.Error("the zero key names a conversation")
	}
}

func TestAResentReplyNamesItsConversation(t *testing.T) {
	reply := `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"let me look"},` +
		`{"type":"tool_use","id":"toolu_01","name":"read","input":{"path":"a"}},{"type":"tool_use","id":"toolu_02","name":"read","input":{}}]}`
	key := TurnKeyOf("acme", gjson.Get(reply, "content"))
	if key == 0 {
		t.Fatal("a reply with tool uses has no key")
	}
	// The SDK resends the turn re-serialised: other key order and spacing, no id of the message.
	req := func(assistant string) string {
		return `{"model":"m","system":"s","tools":[{"name":"read"}],"messages":[{"role":"user","content":"go"},` +
			`{"role":"assistant","content":` + assistant + `},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"x"}]}]}`
	}
	resent := req(`[ {"text":"let me look","type":"text"}, {"input":{"path":"a"},"name":"read","id":"toolu_01","type":"tool_use"},{"type":"tool_use","name":"read","id":"toolu_02","input":{}}]`)
	r := ReadRequest("acme", []byte(resent))
	if r.Turn != key || r.System == 0 || r.Tools == 0 || r.HasDiagnostics {
		t.Errorf("resent request = %+v, reply key %x", r, key)
	}
	if other := ReadRequest("beta", []byte(resent)); other.Turn == key {
		t.Error("another tenant's request names the same conversation")
	}
	if r := ReadRequest("acme", []byte(req(`[{"type":"text","text":"done"}]`))); r.Turn != 0 {
		t.Errorf("a turn without tool use names a conversation: %x", r.Turn)
	}
	var turn Turn
	for _, b := range [][3]string{{"text", "", ""}, {"tool_use", "read", "toolu_01"}, {"tool_use", "memory", "toolu_m"}, {"tool_use", "read", "toolu_02"}} {
		turn.Block("acme", b[0], b[1], b[2])
	}
	if turn.Key() != key || TurnKey("acme", []string{"toolu_01", "toolu_02"}) != key {
		t.Error("a streamed reply's turn (its memory call withheld) has another key than the same reply in one body")
	}
	thread := ReadRequest("acme", []byte(`{"model":"m","thread":{"type":"continue","previous_message_id":"msg_9"},"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"toolu_01"}]}]}`))
	if thread.Turn != MessageKey("acme", "msg_9") || MessageKey("acme", "") != 0 {
		t.Errorf("a thread continue is not named by its previous reply: %x", thread.Turn)
	}
	if r := ReadRequest("acme", []byte(`{"model":"m","diagnostics":{"previous_message_id":null},"messages":[]}`)); !r.HasDiagnostics {
		t.Error("the client's own diagnostics are not seen")
	}
}

func BenchmarkReadRequest(b *testing.B) {
	body := []byte(fmt.Sprintf(`{"model":"m","system":"%s","tools":[{"name":"t"}],"messages":[{"role":"user","content":"go"},`+
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_01","name":"t","input":{}}]},`+
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"%s"}]}]}`,
		make([]byte, 0), string(make([]byte, 0))))
	b.ReportAllocs()
	for b.Loop() {
		ReadRequest("acme", body)
	}
}

func TestNextCarriesTheConversationFromItsFirstCall(t *testing.T) {
	first := Next(nil, &Call{At: t0, MessageID: "msg_a"})
	second := Next(&first, &Call{At: t0.Add(time.Minute), MessageID: "msg_b"})
	third := Next(&second, &Call{At: t0.Add(2 * time.Minute), MessageID: "msg_c"})
	if first.Conversation != "msg_a" || second.Conversation != "msg_a" || third.Conversation != "msg_a" {
		t.Errorf("conversations %q %q %q, want msg_a throughout", first.Conversation, second.Conversation, third.Conversation)
	}
	if other := Next(nil, &Call{At: t0, MessageID: "msg_z"}); other.Conversation != "msg_z" {
		t.Errorf("a new conversation is %q, want its first message id", other.Conversation)
	}
}
