package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/tidwall/gjson"
)

func sse(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }

func sseMessageStart(id string, input int) string {
	return sse("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":%q,"type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":1}}}`, id, input))
}

// An upstream whose second stream of a memory loop carries a block index of
// -1, through the built binary: the client's stream ends in an api_error
// event, both calls are in the ledger, the memory write of the first round
// stays, and the binary goes on serving.
func TestBinaryEndsAHostileUpstreamStreamInAnErrorEvent(t *testing.T) {
	input := `{"command":"create","path":"/memories/kept.md","file_text":"kept"}`
	streams := []string{
		sseMessageStart("msg_1", 100) +
			sse("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"memory","input":{}}}`) +
			sse("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`+fmt.Sprintf("%q", input)+`}}`) +
			sse("content_block_stop", `{"type":"content_block_stop","index":0}`) +
			sse("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":5}}`) +
			sse("message_stop", `{"type":"message_stop"}`),
		sseMessageStart("msg_2", 10) +
			sse("content_block_start", `{"type":"content_block_start","index":-1,"content_block":{"type":"text","text":""}}`) +
			sse("content_block_delta", `{"type":"content_block_delta","index":-1,"delta":{"type":"text_delta","text":"x"}}`),
	}
	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/messages" { // the models list ctxproxy reads on its own
			http.NotFound(w, r)
			return
		}
		i := int(n.Add(1)) - 1
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.Write([]byte(streams[i%len(streams)]))
	}))
	t.Cleanup(up.Close)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.jsonl")
	p := startProxy(t, "--upstream", up.URL, "--policies", binPolicies(t), "--memory-dir", filepath.Join(dir, "mem"),
		"--ledger", "file:"+ledger)
	const body = `{"model":"claude-sonnet-4-5","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for i := range 2 { // the binary serves the next request as well
		resp, got := send(t, p.Addr, "/v1/messages", body)
		if resp.StatusCode != 200 || !strings.HasSuffix(got, "\n\n") {
			t.Fatalf("request %d: status %d body %q", i, resp.StatusCode, got)
		}
		tail := got[strings.LastIndex(strings.TrimSuffix(got, "\n\n"), "\n\n")+2:]
		data := strings.TrimPrefix(tail[strings.Index(tail, "data: "):], "data: ")
		if !strings.HasPrefix(tail, "event: error\n") || gjson.Get(data, "error.type").Str != "api_error" {
			t.Fatalf("request %d: the stream ends in %q, want an api_error event", i, tail)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "mem", "acme", "kept.md")); err != nil || string(b) != "kept" {
		t.Fatalf("the first round's memory write: %q %v", b, err)
	}
	p.Signal(syscall.SIGTERM)
	<-p.Done() // logs and ledger are flushed at the stop
	if !strings.Contains(p.Log(), `"msg":"upstream stream malformed","tenant":"acme"`) {
		t.Fatalf("no log line names the malformed stream and its tenant:\n%s", p.Log())
	}
	out, err := exec.Command(binary(t), "report", "--ledger", "file:"+ledger, "--json").CombinedOutput()
	if err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if calls, in := gjson.GetBytes(out, "total.calls").Int(), gjson.GetBytes(out, "total.input_tokens").Int(); calls != 4 || in != 220 {
		t.Fatalf("ledger: %d calls, %d input tokens; want 4 and 220 (both rounds of both requests): %s", calls, in, out)
	}
}
