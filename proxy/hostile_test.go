package proxy

import (
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"testing"

	"github.com/tidwall/gjson"
)

// Upstream streams are input like any other: whatever bytes the upstream
// sends, the client gets a well-formed stream, ended by an error event when
// the upstream's was not.

// ev is one SSE event in the API's framing.
func ev(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }

func evMessageStart(id string, inputTokens int) string {
	return ev("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":%q,"type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":1}}}`, id, inputTokens))
}

func evTextStart(index string) string {
	return ev("content_block_start", `{"type":"content_block_start","index":`+index+`,"content_block":{"type":"text","text":""}}`)
}

func evTextDelta(index, text string) string {
	return ev("content_block_delta", `{"type":"content_block_delta","index":`+index+`,"delta":{"type":"text_delta","text":"`+text+`"}}`)
}

func evBlockStop(index string) string {
	return ev("content_block_stop", `{"type":"content_block_stop","index":`+index+`}`)
}

func evMessageDelta(stop string) string {
	return ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"`+stop+`","stop_sequence":null},"usage":{"output_tokens":7}}`)
}

var evMessageStop = ev("message_stop", `{"type":"message_stop"}`)

// memoryCreateStream is a well-formed round whose one block is a memory
// create of /memories/kept.md.
func memoryCreateStream() string {
	start := `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_mem1","name":"memory","input":{}}}`
	input := `{"command":"create","path":"/memories/kept.md","file_text":"kept"}`
	delta := `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":` + fmt.Sprintf("%q", input) + `}}`
	return evMessageStart("msg_round1", 100) + ev("content_block_start", start) + ev("content_block_delta", delta) +
		evBlockStop("0") + evMessageDelta("tool_use") + evMessageStop
}

// scriptedStreams is an upstream answering its nth request with the nth
// stream, as raw bytes.
type scriptedStreams struct {
	mu      sync.Mutex
	streams []string
	n       int
}

func (u *scriptedStreams) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	i := u.n
	u.n++
	u.mu.Unlock()
	if i >= len(u.streams) {
		http.Error(w, `{"type":"error","error":{"type":"api_error","message":"no more streams"}}`, 500)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	w.Write([]byte(u.streams[i]))
}

// hostileStreams are upstream streams that break the Messages API's event
// grammar, each with what it breaks.
var hostileStreams = []struct {
	name   string
	stream string
	plain  bool // also malformed for a relay that passes blocks as they are
	// noUsage: it breaks before a sound message_start, so none of its usage
	// was seen.
	noUsage bool
}{
	{"a content_block_start with a negative index",
		evMessageStart("msg_h", 10) + evTextStart("-1") + evTextDelta("-1", "x") + evBlockStop("-1") + evMessageDelta("end_turn") + evMessageStop, false, false},
	{"a content_block_start with a huge index",
		evMessageStart("msg_h", 10) + evTextStart("99999999999999999999") + evBlockStop("0") + evMessageDelta("end_turn") + evMessageStop, false, false},
	{"a content_block_start with a fractional index",
		evMessageStart("msg_h", 10) + evTextStart("0.5") + evBlockStop("0") + evMessageDelta("end_turn") + evMessageStop, false, false},
	{"a content_block_start that skips an index",
		evMessageStart("msg_h", 10) + evTextStart("1") + evBlockStop("1") + evMessageDelta("end_turn") + evMessageStop, false, false},
	{"a repeated content_block_start index",
		evMessageStart("msg_h", 10) + evTextStart("0") + evTextStart("0") + evBlockStop("0") + evMessageDelta("end_turn") + evMessageStop, false, false},
	{"a delta for a block that never started",
		evMessageStart("msg_h", 10) + evTextDelta("3", "x") + evMessageDelta("end_turn") + evMessageStop, false, false},
	{"a delta for a block after its stop",
		evMessageStart("msg_h", 10) + evTextStart("0") + evBlockStop("0") + evTextDelta("0", "x") + evMessageDelta("end_turn") + evMessageStop, false, false},
	{"a content_block_stop for a block that never started",
		evMessageStart("msg_h", 10) + evBlockStop("0") + evMessageDelta("end_turn") + evMessageStop, false, false},
	{"a message_stop with a block still open",
		evMessageStart("msg_h", 10) + evTextStart("0") + evMessageDelta("end_turn") + evMessageStop, false, false},
	{"invalid JSON in a content block event",
		evMessageStart("msg_h", 10) + evTextStart("0") + ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{`) + evBlockStop("0") + evMessageDelta("end_turn") + evMessageStop, false, false},
	{"a content block event carrying another event's data",
		evMessageStart("msg_h", 10) + evTextStart("0") + ev("content_block_delta", `{"type":"message_stop"}`) + evBlockStop("0") + evMessageDelta("end_turn") + evMessageStop, false, false},
	{"events after message_stop",
		evMessageStart("msg_h", 10) + evTextStart("0") + evBlockStop("0") + evMessageDelta("end_turn") + evMessageStop + evTextStart("1") + evMessageStop, true, false},
	{"a message_delta before message_start",
		evMessageDelta("end_turn") + evMessageStart("msg_h", 10) + evMessageDelta("end_turn") + evMessageStop, true, true},
	{"a content block before message_start",
		evTextStart("0") + evMessageStart("msg_h", 10) + evMessageDelta("end_turn") + evMessageStop, true, true},
	{"a second message_start",
		evMessageStart("msg_h", 10) + evMessageStart("msg_h2", 10) + evMessageDelta("end_turn") + evMessageStop, true, false},
	{"a message_stop without message_delta",
		evMessageStart("msg_h", 10) + evTextStart("0") + evBlockStop("0") + evMessageStop, true, false},
	{"invalid JSON in message_start",
		ev("message_start", `{"type":"message_start","message":{"id":"msg_h","usage":{"input_tokens":10`) + evMessageDelta("end_turn") + evMessageStop, true, true},
	{"invalid JSON in message_delta",
		evMessageStart("msg_h", 10) + ev("message_delta", `{"type":"message_delta","delta":`) + evMessageStop, true, false},
}

func TestAHostileUpstreamStreamEndsInAnErrorEvent(t *testing.T) {
	for _, tc := range hostileStreams {
		for _, pos := range []struct {
			name      string
			before    []string // well-formed rounds first
			key       string
			wantInput int64 // input tokens recorded: every message_start seen
		}{
			{"in memory proxy mode, first round", nil, keyAcme, 10},
			{"in memory proxy mode, after a memory write", []string{memoryCreateStream()}, keyAcme, 110},
			{"relayed as it is (memory off)", nil, keyOther, 10},
		} {
			if pos.key == keyOther && !tc.plain {
				continue // a plain relay passes content blocks as they come
			}
			t.Run(tc.name+", "+pos.name, func(t *testing.T) {
				up := &scriptedStreams{streams: append(append([]string(nil), pos.before...), tc.stream)}
				h := newHarnessWith(t, up, testPolicies())
				http.DefaultClient.CloseIdleConnections()
				base := runtime.NumGoroutine()
				resp := h.post("/v1/messages", pos.key, withStream(simpleBody))
				body := readAll(t, resp.Body)
				if resp.StatusCode != 200 {
					t.Fatalf("status %d %s", resp.StatusCode, body)
				}
				evs := clientEvents(t, body)
				for i, e := range evs {
					if e[0] == "" || !gjson.Valid(e[1]) {
						t.Fatalf("event %d (%q %q) is not the API's: %s", i, e[0], e[1], body)
					}
				}
				last := evs[len(evs)-1]
				if last[0] != "error" || gjson.Get(last[1], "type").Str != "error" || gjson.Get(last[1], "error.type").Str != "api_error" {
					t.Fatalf("the stream ends in %s %s, want an api_error event: %s", last[0], last[1], body)
				}
				for _, e := range evs[:len(evs)-1] {
					if e[0] == "message_stop" || e[0] == "error" {
						t.Fatalf("the client got %s before the final error: %s", e[0], body)
					}
				}
				// Usage seen so far is accounted.
				want := pos.wantInput
				if tc.noUsage {
					want -= 10
				}
				logged := h.logs.FilterMessage("request").All()
				if len(logged) != 1 || logged[0].ContextMap()["input_tokens"] != want {
					t.Fatalf("request log lines %v, want one with input_tokens %d", logged, want)
				}
				if pos.before != nil {
					if f, ok := h.memFile("acme", "kept.md"); !ok || f != "kept" {
						t.Fatalf("the memory write of the first round is gone: %q %v", f, ok)
					}
				}
				http.DefaultClient.CloseIdleConnections()
				h.srv.up.client.CloseIdleConnections()
				settleGoroutines(t, base)
			})
		}
	}
}

// The well-formed streams the hostile ones are built from pass as they are,
// so the cases above fail for what they break and nothing else.
func TestTheHostileCasesBaseStreamIsServed(t *testing.T) {
	good := evMessageStart("msg_ok", 10) + ": a comment\n\n" + evTextStart("0") + evTextDelta("0", "hi") + evBlockStop("0") +
		evMessageDelta("end_turn") + evMessageStop + ": trailing comment\n\n" + ev("ping", `{"type": "ping"}`)
	for _, key := range []string{keyAcme, keyOther} {
		up := &scriptedStreams{streams: []string{memoryCreateStream(), good}}
		if key == keyOther {
			up.streams = up.streams[1:]
		}
		h := newHarnessWith(t, up, testPolicies())
		resp := h.post("/v1/messages", key, withStream(simpleBody))
		body := readAll(t, resp.Body)
		msg := accumulate(t, body)
		if gjson.Get(msg, "content.0.text").Str != "hi" || gjson.Get(msg, "stop_reason").Str != "end_turn" {
			t.Fatalf("key %s: message %s from %s", key, msg, body)
		}
	}
}
