package proxy

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// eventNames lists the event names of an SSE body in order.
func eventNames(body string) []string {
	var names []string
	for _, line := range strings.Split(body, "\n") {
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, n)
		}
	}
	return names
}

// events splits an SSE body into (name, data) pairs.
func events(body string) [][2]string {
	var out [][2]string
	for _, chunk := range strings.Split(body, "\n\n") {
		var name, data string
		for _, line := range strings.Split(chunk, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			} else if v, ok := strings.CutPrefix(line, "data: "); ok {
				data = v
			}
		}
		if name != "" {
			out = append(out, [2]string{name, data})
		}
	}
	return out
}

// accumulate folds an SSE body into the final message the way the official
// SDKs do, and checks the stream is well formed on the way: one
// message_start first, blocks started in index order without gaps, one
// message_delta and one message_stop at the end.
func accumulate(t *testing.T, body string) string {
	t.Helper()
	var msg string
	var blocks []string
	var texts, thinks, sigs, inputs []string
	starts, deltas, stops := 0, 0, 0
	for i, ev := range events(body) {
		name, data := ev[0], ev[1]
		if gjson.Get(data, "type").Str != name {
			t.Fatalf("event %d: name %s but data type %s", i, name, gjson.Get(data, "type").Str)
		}
		switch name {
		case "message_start":
			starts++
			if i != 0 {
				t.Fatalf("message_start at position %d", i)
			}
			msg = gjson.Get(data, "message").Raw
		case "content_block_start":
			idx := int(gjson.Get(data, "index").Int())
			if idx != len(blocks) {
				t.Fatalf("content_block_start index %d, want %d (no gaps)", idx, len(blocks))
			}
			blocks = append(blocks, gjson.Get(data, "content_block").Raw)
			texts, thinks, sigs, inputs = append(texts, ""), append(thinks, ""), append(sigs, ""), append(inputs, "")
		case "content_block_delta":
			idx := int(gjson.Get(data, "index").Int())
			if idx >= len(blocks) {
				t.Fatalf("delta for unknown block %d", idx)
			}
			d := gjson.Get(data, "delta")
			switch d.Get("type").Str {
			case "text_delta":
				texts[idx] += d.Get("text").Str
			case "thinking_delta":
				thinks[idx] += d.Get("thinking").Str
			case "signature_delta":
				sigs[idx] += d.Get("signature").Str
			case "input_json_delta":
				inputs[idx] += d.Get("partial_json").Str
			case "compaction_delta": // assigned, not appended; null stays null
				blocks[idx], _ = sjson.SetRaw(blocks[idx], "content", d.Get("content").Raw)
				blocks[idx], _ = sjson.SetRaw(blocks[idx], "encrypted_content", d.Get("encrypted_content").Raw)
			}
		case "content_block_stop":
			if int(gjson.Get(data, "index").Int()) >= len(blocks) {
				t.Fatalf("stop for unknown block")
			}
		case "message_delta":
			deltas++
			msg, _ = sjson.Set(msg, "stop_reason", gjson.Get(data, "delta.stop_reason").Value())
			gjson.Get(data, "usage").ForEach(func(k, v gjson.Result) bool {
				msg, _ = sjson.SetRaw(msg, "usage."+k.Str, v.Raw)
				return true
			})
			if cm := gjson.Get(data, "context_management"); cm.Exists() {
				msg, _ = sjson.SetRaw(msg, "context_management", cm.Raw)
			}
		case "message_stop":
			stops++
		}
	}
	if starts != 1 || deltas != 1 || stops != 1 {
		t.Fatalf("stream has %d message_start, %d message_delta, %d message_stop; want one each", starts, deltas, stops)
	}
	arr := "["
	for i, b := range blocks {
		if texts[i] != "" {
			b, _ = sjson.Set(b, "text", texts[i])
		}
		if thinks[i] != "" {
			b, _ = sjson.Set(b, "thinking", thinks[i])
		}
		if sigs[i] != "" {
			b, _ = sjson.Set(b, "signature", sigs[i])
		}
		if inputs[i] != "" {
			b, _ = sjson.SetRaw(b, "input", inputs[i])
		}
		if i > 0 {
			arr += ","
		}
		arr += b
	}
	msg, _ = sjson.SetRaw(msg, "content", arr+"]")
	return msg
}
