package proxy

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"testing"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
)

// benchStream is a realistic Messages stream of about events events:
// message_start, ping, optionally a memory tool_use block (withheld in
// memory proxy mode, so the blocks after it are renumbered), one text block
// of small deltas, message_delta and message_stop.
func benchStream(events int, memoryFirst bool) []byte {
	var b []byte
	b = appendSSE(b, "message_start", []byte(`{"type":"message_start","message":{"id":"msg_bench_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":2048,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1},"context_management":null}}`))
	b = appendSSE(b, "ping", []byte(`{"type":"ping"}`))
	fixed := 2 + 3 + 2 // message_start, ping, text start/stop, message_delta/stop
	idx := 0
	if memoryFirst {
		b = appendSSE(b, "content_block_start", []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_bench_mem","name":"memory","input":{}}}`))
		for _, p := range []string{`{"command":`, `"view","path"`, `:"/memories"}`} {
			d := append([]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`), jsonstr.Append(nil, p)...)
			b = appendSSE(b, "content_block_delta", append(d, "}}"...))
		}
		b = appendSSE(b, "content_block_stop", []byte(`{"type":"content_block_stop","index":0}`))
		fixed += 5
		idx = 1
	}
	is := strconv.Itoa(idx)
	b = appendSSE(b, "content_block_start", []byte(`{"type":"content_block_start","index":`+is+`,"content_block":{"type":"text","text":""}}`))
	for i := 0; i < events-fixed; i++ {
		text := fmt.Sprintf("token %d of the answer, with \"quotes\" and\\n ", i)
		d := append([]byte(`{"type":"content_block_delta","index":`+is+`,"delta":{"type":"text_delta","text":`), jsonstr.Append(nil, text)...)
		b = appendSSE(b, "content_block_delta", append(d, "}}"...))
	}
	b = appendSSE(b, "content_block_stop", []byte(`{"type":"content_block_stop","index":`+is+`}`))
	b = appendSSE(b, "message_delta", []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":2048,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1500},"context_management":{"applied_edits":[]}}`))
	b = appendSSE(b, "message_stop", []byte(`{"type":"message_stop"}`))
	return b
}

// BenchmarkSSEReaderNext splits a 200-event stream into events.
func BenchmarkSSEReaderNext(b *testing.B) {
	stream := benchStream(200, false)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	events := 0
	for b.Loop() {
		r := newSSEReader(bytes.NewReader(stream))
		for {
			if _, err := r.Next(); err != nil {
				break
			}
			events++
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}

// BenchmarkSSEReaderNextSmallReads is the same stream arriving in
// network-sized pieces (one event per read, as a flushed relay delivers it).
func BenchmarkSSEReaderNextSmallReads(b *testing.B) {
	stream := benchStream(200, false)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		r := newSSEReader(&eventReader{b: stream})
		for {
			if _, err := r.Next(); err != nil {
				break
			}
		}
	}
}

// eventReader returns at most one event per Read.
type eventReader struct{ b []byte }

func (r *eventReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	end := bytes.Index(r.b, []byte("\n\n"))
	if end < 0 {
		end = len(r.b)
	} else {
		end += 2
	}
	n := copy(p, r.b[:end])
	r.b = r.b[n:]
	return n, nil
}
