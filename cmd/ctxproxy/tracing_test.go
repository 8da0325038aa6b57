package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/otlptest"
	"github.com/ctxproxy/ctxproxy/stack"

	"context"
)

// TestBinaryTraces runs the binary with the standard OTEL_* variables
// pointing at an in-process OTLP receiver, sends a streamed request that
// runs one memory round, stops the binary (which flushes its spans) and
// reads the trace: the agent's trace continued, a `chat {model}` client span
// per upstream call with the GenAI attributes, a span per memory command,
// no content and no host path anywhere.
func TestBinaryTraces(t *testing.T) {
	for _, proto := range []string{"http/protobuf", "grpc"} {
		t.Run("over OTLP "+proto, func(t *testing.T) { testBinaryTraces(t, proto) })
	}
}

func testBinaryTraces(t *testing.T, proto string) {
	var rc *otlptest.Receiver
	var endpoint string
	if proto == "grpc" {
		rc, endpoint = otlptest.StartGRPC(t)
	} else {
		rc, endpoint = otlptest.StartHTTP(t)
	}
	fake, upURL := fakeUpstream(t)
	const secret = "the-memory-content-never-exported"
	fake.SetResponder(fakeapi.Script(
		fakeapi.Reply{Content: []json.RawMessage{fakeapi.MemoryCreate("/memories/notes.md", secret)}, Usage: &fakeapi.Usage{InputTokens: 1000, OutputTokens: 100}},
		fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("done")}, Usage: &fakeapi.Usage{InputTokens: 2000, OutputTokens: 200, CacheReadInputTokens: 300}},
	))
	memDir := filepath.Join(t.TempDir(), "mem")
	cmd := exec.Command(binary(t), "--listen", "127.0.0.1:0", "--upstream", upURL, "--policies", binPolicies(t),
		"--memory-dir", memDir, "--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
	cmd.Env = append(os.Environ(),
		"OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL="+proto,
		"OTEL_EXPORTER_OTLP_INSECURE=true",
		"OTEL_SERVICE_NAME=ctxproxy-under-test")
	p, err := binaries.Start(context.Background(), cmd, "ctxproxy listening", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)

	const agentTrace, agentSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.Addr+"/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":512,"stream":true,"messages":[{"role":"user","content":"remember this"}]}`))
	req.Header.Set("X-Api-Key", binKey)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", "00-"+agentTrace+"-"+agentSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	stream, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(stream), "message_stop") {
		t.Fatalf("status %d, stream %s", resp.StatusCode, stream)
	}
	p.Signal(syscall.SIGTERM)
	<-p.Done()

	var server otlptest.Span
	var chats, memory []otlptest.Span
	for _, s := range rc.Spans() {
		switch {
		case s.Name == "POST /v1/messages":
			server = s
		case strings.HasPrefix(s.Name, "chat "):
			chats = append(chats, s)
		case strings.HasPrefix(s.Name, "memory "):
			memory = append(memory, s)
		}
		for k, v := range s.Attrs {
			if str, _ := v.(string); strings.Contains(str, secret) || strings.Contains(str, memDir) || strings.Contains(str, binKey) {
				t.Errorf("span %q attribute %s carries content, a host path or the key: %q", s.Name, k, str)
			}
		}
	}
	t.Run("the server span continues the agent's trace", func(t *testing.T) {
		if server.TraceID != agentTrace || server.ParentSpanID != agentSpan || server.Kind != tracepb.Span_SPAN_KIND_SERVER {
			t.Fatalf("server span %+v", server)
		}
		if server.Resource["service.name"] != "ctxproxy-under-test" {
			t.Errorf("service.name = %v", server.Resource["service.name"])
		}
	})
	t.Run("each upstream call is a chat client span with the GenAI attributes", func(t *testing.T) {
		if len(chats) != 2 {
			t.Fatalf("%d chat spans, want 2 (one per memory-loop round)", len(chats))
		}
		byRound := map[int64]otlptest.Span{}
		for _, c := range chats {
			byRound[c.Attrs["ctxproxy.memory.round"].(int64)] = c
			if c.Name != "chat claude-sonnet-4-5" || c.Kind != tracepb.Span_SPAN_KIND_CLIENT || c.ParentSpanID != server.SpanID {
				t.Errorf("chat span %q kind %v parent %s (server %s)", c.Name, c.Kind, c.ParentSpanID, server.SpanID)
			}
			for k, want := range map[string]any{"gen_ai.provider.name": "anthropic", "gen_ai.operation.name": "chat",
				"gen_ai.request.model": "claude-sonnet-4-5", "gen_ai.request.max_tokens": int64(512), "ctxproxy.tenant": "acme",
				"ctxproxy.policy.mode": "enforce"} {
				if c.Attrs[k] != want {
					t.Errorf("%s = %#v, want %#v", k, c.Attrs[k], want)
				}
			}
			if c.Attrs["gen_ai.response.id"] == nil || c.Attrs["gen_ai.response.model"] == nil {
				t.Errorf("response id/model missing: %v", c.Attrs)
			}
		}
		first, last := byRound[0], byRound[1]
		if fr := first.Attrs["gen_ai.response.finish_reasons"]; len(fr.([]any)) != 1 || fr.([]any)[0] != "tool_use" {
			t.Errorf("round 0 finish_reasons %v", fr)
		}
		if fr := last.Attrs["gen_ai.response.finish_reasons"]; len(fr.([]any)) != 1 || fr.([]any)[0] != "end_turn" {
			t.Errorf("round 1 finish_reasons %v", fr)
		}
		// input + cache read + cache creation, as the conventions count.
		if in := last.Attrs["gen_ai.usage.input_tokens"]; in != int64(2300) {
			t.Errorf("round 1 gen_ai.usage.input_tokens = %v, want 2300", in)
		}
		if out := first.Attrs["gen_ai.usage.output_tokens"]; out != int64(100) {
			t.Errorf("round 0 output tokens = %v", out)
		}
		if c, ok := last.Attrs["ctxproxy.cost_usd"].(float64); !ok || c <= 0 {
			t.Errorf("ctxproxy.cost_usd = %v", last.Attrs["ctxproxy.cost_usd"])
		}
	})
	t.Run("the upstream sees the chat span as its parent", func(t *testing.T) {
		reqs := proxiedCalls(fake)
		if len(reqs) != 2 {
			t.Fatalf("%d upstream requests", len(reqs))
		}
		for i, r := range reqs {
			tp := r.Header.Get("Traceparent")
			if !strings.HasPrefix(tp, "00-"+agentTrace+"-") {
				t.Errorf("request %d traceparent %q", i, tp)
				continue
			}
			parent := strings.Split(tp, "-")[2]
			found := false
			for _, c := range chats {
				found = found || c.SpanID == parent
			}
			if !found {
				t.Errorf("request %d traceparent parent %s is no chat span", i, parent)
			}
		}
	})
	t.Run("each memory command is a span with its result and no content", func(t *testing.T) {
		if len(memory) != 1 || memory[0].Name != "memory create" {
			t.Fatalf("memory spans %+v", memory)
		}
		m := memory[0]
		if m.Attrs["ctxproxy.memory.result"] != "ok" || m.Attrs["ctxproxy.memory.command"] != "create" || m.ParentSpanID != server.SpanID {
			t.Errorf("memory span %+v", m)
		}
	})
}

// Without an endpoint the binary exports nothing and says nothing of traces.
func TestBinaryTracesOffByDefault(t *testing.T) {
	_, upURL := fakeUpstream(t)
	p := startProxy(t, "--upstream", upURL, "--policies", binPolicies(t), "--memory-dir", t.TempDir(),
		"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
	if strings.Contains(p.Log(), "tracing on") {
		t.Fatal("tracing is on without an OTLP endpoint")
	}
}

// A tenant whose policy says tracing.content: true gets the messages, the
// reply's content and the memory command's input in its spans.
func TestBinaryTracesContentOptIn(t *testing.T) {
	rc, endpoint := otlptest.StartHTTP(t)
	fake, upURL := fakeUpstream(t)
	fake.SetResponder(fakeapi.Script(
		fakeapi.Reply{Content: []json.RawMessage{fakeapi.MemoryCreate("/memories/open.md", "opted-in memory text")}, Usage: &fakeapi.Usage{InputTokens: 10, OutputTokens: 1}},
		fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("opted-in reply text")}, Usage: &fakeapi.Usage{InputTokens: 10, OutputTokens: 1}},
	))
	pols, _, err := stack.Layout(t.TempDir(), map[string]string{
		"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
		"open.yaml":    stack.TenantPolicy("open", binKey, "memory:\n  mode: proxy\ntracing:\n  content: true\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary(t), "--listen", "127.0.0.1:0", "--upstream", upURL, "--policies", pols,
		"--memory-dir", t.TempDir(), "--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
	cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf")
	p, err := binaries.Start(context.Background(), cmd, "ctxproxy listening", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if resp, body := send(t, p.Addr, "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"opted-in user text"}]}`); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	p.Signal(syscall.SIGTERM)
	<-p.Done()
	found := map[string]bool{}
	for _, s := range rc.Spans() {
		for k, v := range s.Attrs {
			str, _ := v.(string)
			switch {
			case k == "gen_ai.input.messages" && strings.Contains(str, "opted-in user text"):
				found["input"] = true
			case k == "gen_ai.output.messages" && strings.Contains(str, "opted-in reply text"):
				found["output"] = true
			case k == "ctxproxy.memory.input" && strings.Contains(str, "opted-in memory text"):
				found["memory"] = true
			}
		}
	}
	for _, want := range []string{"input", "output", "memory"} {
		if !found[want] {
			t.Errorf("no %s content in the opted-in tenant's spans", want)
		}
	}
}
