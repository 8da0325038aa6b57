package main

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/stack"
)

// accumulateSSE is the content of a streamed message, as an SDK accumulates it.
func accumulateSSE(t *testing.T, stream string) string {
	t.Helper()
	var blocks []string
	for _, line := range strings.Split(stream, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		ev := gjson.Parse(data)
		i := int(ev.Get("index").Int())
		switch ev.Get("type").Str {
		case "content_block_start":
			blocks = append(blocks, ev.Get("content_block").Raw)
		case "content_block_delta":
			d := ev.Get("delta")
			field, val := "", ""
			switch d.Get("type").Str {
			case "thinking_delta":
				field, val = "thinking", d.Get("thinking").Str
			case "signature_delta":
				field, val = "signature", d.Get("signature").Str
			case "text_delta":
				field, val = "text", d.Get("text").Str
			default:
				continue
			}
			blocks[i], _ = sjson.Set(blocks[i], field, gjson.Get(blocks[i], field).Str+val)
		}
	}
	return "[" + strings.Join(blocks, ",") + "]"
}

// Through the binary against the fake with thinking block binding (always on, refusing a prefix
// mismatch by default): the client's next request, carrying back the merged message of a memory
// loop whose later rounds thought, is accepted with every thinking block kept, plain and
// streamed, because the proxy gives the API the memory turns it hid from the client.
func TestBinaryThinkingSurvivesTheMemorySplice(t *testing.T) {
	fake := fakeapi.New()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	pols, _, err := stack.Layout(t.TempDir(), map[string]string{
		"acme.yaml": stack.TenantPolicy("acme", binKey, "memory:\n  mode: proxy\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, "--upstream", srv.URL, "--policies", pols, "--memory-dir", t.TempDir(),
		"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
	const thinking = `{"type":"enabled","budget_tokens":1024}`
	for _, stream := range []string{"false", "true"} {
		t.Run("stream "+stream, func(t *testing.T) {
			fake.SetResponder(fakeapi.Script(
				fakeapi.Reply{Content: []json.RawMessage{fakeapi.Thinking("Look at my memory first.", "sig_s1_"+stream), fakeapi.MemoryView("/memories")}},
				fakeapi.Reply{Content: []json.RawMessage{fakeapi.Thinking("Nothing there; answer.", "sig_s2_"+stream), fakeapi.Text("Hello.")}},
			))
			ask := `[{"role":"user","content":"hi"}]`
			resp, got := send(t, p.Addr, "/v1/messages", `{"model":"claude-opus-4-8","max_tokens":2000,"stream":`+stream+`,"thinking":`+thinking+`,"messages":`+ask+`}`)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, got)
			}
			content := gjson.Get(got, "content").Raw
			if stream == "true" {
				content = accumulateSSE(t, got)
			}
			if n := gjson.Get(content, "#").Int(); n != 3 || strings.Contains(content, `"tool_use"`) {
				t.Fatalf("merged message %s, want two thinking blocks and the text", content)
			}
			fake.SetResponder(nil)
			next := `[{"role":"user","content":"hi"},{"role":"assistant","content":` + content + `},{"role":"user","content":"thanks"}]`
			resp, got = send(t, p.Addr, "/v1/messages", `{"model":"claude-opus-4-8","max_tokens":2000,"thinking":`+thinking+`,"messages":`+next+`}`)
			if resp.StatusCode != 200 {
				t.Fatalf("sending the merged message back: %d %s", resp.StatusCode, got)
			}
			last, _ := fake.LastRequest("/v1/messages")
			if len(last.InputTransformations) != 0 {
				t.Errorf("thinking blocks dropped: %+v", last.InputTransformations)
			}
			if len(last.Messages) != 5 || !strings.Contains(string(last.Messages[2]), "tool_result") {
				t.Errorf("the API got %d messages, want the hidden memory turns back (5)", len(last.Messages))
			}
		})
	}
}
