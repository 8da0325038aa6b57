package proxy

import (
	"bytes"
	"context"
	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/tokens"
	"github.com/prometheus/client_golang/prometheus"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tracing"
)

// discardWriter is a client that reads everything at once: it counts bytes
// and flushes for free, so a benchmark measures only the proxy.
type discardWriter struct {
	h http.Header
	n int64
}

func (d *discardWriter) Header() http.Header {
	if d.h == nil {
		d.h = http.Header{}
	}
	return d.h
}
func (d *discardWriter) Write(p []byte) (int, error) { d.n += int64(len(p)); return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Flush()                      {}

// BenchmarkRelay is the streaming relay of one 200-event upstream stream to
// the client: as is (no memory), and in memory proxy mode where a memory
// block is withheld and every later event is renumbered, in the first round
// and in a later round of the loop.
func BenchmarkRelay(b *testing.B) {
	cases := []struct {
		name   string
		memory bool
		first  bool // stream starts with a memory block
		round  int
		next   int // client block index the round starts at
	}{
		{"no memory", false, false, 0, 0},
		{"memory proxy, withheld block renumbered", true, true, 0, 0},
		{"memory proxy, later round renumbered", true, false, 1, 1},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			stream := benchStream(200, tc.first)
			dw := &discardWriter{}
			sw := newStreamWriter(dw)
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				rd := &round{memory: tc.memory, first: tc.round == 0}
				sw.next = tc.next
				if err := rd.relay(newSSEReader(bytes.NewReader(stream)), sw); err != nil {
					b.Fatal(err)
				}
				if !rd.done {
					b.Fatal("stream not relayed to its end")
				}
			}
		})
	}
}

// Tenants of the Server benchmarks.
const (
	benchKeyOff     = "sk-bench-off"
	benchKeyEnforce = "sk-bench-enforce"
	benchKeyMemory  = "sk-bench-memory"
	benchKeyCapped  = "sk-bench-capped"
)

// benchLimits are the capped tenant's limits: caps (tenant daily and monthly, per user daily)
// and per-minute limits no request reaches, so each one is admitted, held and settled.
const benchLimits = "limits:\n  user_from: key\n" +
	"  spend: [{ period: daily, usd: 1000000000 }, { period: monthly, usd: 1000000000 }]\n" +
	"  per_user_spend: [{ period: daily, usd: 1000000000 }]\n" +
	"  requests_per_minute: 1000000000\n  input_tokens_per_minute: 1000000000\n"

func benchPolicyStore(b *testing.B) *policy.Store {
	b.Helper()
	dir := b.TempDir()
	cm := "context_management:\n  mode: enforce\n  clear_thinking:\n    keep: all\n  clear_tool_uses:\n" +
		"    trigger: { type: input_tokens, value: 100000 }\n    keep: { type: tool_uses, value: 3 }\n"
	files := map[string]string{
		"default.yaml": "tenant: default\ncontext_management:\n  mode: off\nmemory:\n  mode: off\n",
		"off.yaml":     "tenant: off\napi_keys_sha256: [\"" + sha(benchKeyOff) + "\"]\ncontext_management:\n  mode: off\nmemory:\n  mode: off\n",
		"enforce.yaml": "tenant: enforce\napi_keys_sha256: [\"" + sha(benchKeyEnforce) + "\"]\n" + cm + "memory:\n  mode: inject\n",
		"memory.yaml":  "tenant: memory\napi_keys_sha256: [\"" + sha(benchKeyMemory) + "\"]\n" + cm + "memory:\n  mode: proxy\n",
		"capped.yaml":  "tenant: capped\napi_keys_sha256: [\"" + sha(benchKeyCapped) + "\"]\n" + cm + "memory:\n  mode: inject\n" + benchLimits,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	st, err := policy.NewStore(dir, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	return st
}

// memoryUpstream answers in memory: a reply JSON, or a stream; in memory
// proxy mode a request whose last turn is not a tool_result gets a memory
// call first.
type memoryUpstream struct {
	reply, stream, memReply, memStream []byte
	buf                                bytes.Buffer // reused: benchmarks run one request at a time
}

func (u *memoryUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	u.buf.Reset()
	_, err := u.buf.ReadFrom(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	body := u.buf.Bytes()
	streaming := bytes.Contains(body[:min(len(body), 400)], []byte(`"stream":true`))
	memCall := req.Header.Get("X-Api-Key") == benchKeyMemory && !bytes.Contains(body[max(len(body)-400, 0):], []byte(`"tool_result"`))
	out, ct := u.reply, "application/json"
	switch {
	case streaming && memCall:
		out, ct = u.memStream, "text/event-stream; charset=utf-8"
	case streaming:
		out, ct = u.stream, "text/event-stream; charset=utf-8"
	case memCall:
		out = u.memReply
	}
	return &http.Response{
		StatusCode:    http.StatusOK,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {ct}, "Request-Id": {"req_bench"}},
		Body:          io.NopCloser(bytes.NewReader(out)),
		ContentLength: int64(len(out)),
		Request:       req,
	}, nil
}

func newBenchServer(b *testing.B) *Server { return newBenchServerTraced(b, nil) }

func newBenchServerTraced(b *testing.B, tr *tracing.Tracer) *Server {
	b.Helper()
	mem, err := memoryhook.NewFileStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	up := &memoryUpstream{
		reply:     []byte(`{"id":"msg_bench","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Done. The handler tests pass again."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":512,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":12},"context_management":{"applied_edits":[]}}`),
		memReply:  []byte(`{"id":"msg_bench_m","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"toolu_bench_mem","name":"memory","input":{"command":"view","path":"/memories"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":512,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":12},"context_management":{"applied_edits":[]}}`),
		stream:    benchStream(200, false),
		memStream: benchMemoryCallStream(),
	}
	u, _ := url.Parse("http://upstream.invalid")
	s, err := New(withLimits(Config{Upstream: u, Policies: benchPolicyStore(b), Memory: mem, Transport: up, Tracer: tr}))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// benchMemoryCallStream is a round that only calls the memory tool.
func benchMemoryCallStream() []byte {
	s := benchStream(12, true)
	// Keep the memory block, drop the text block: cut before the text block start.
	i := bytes.Index(s, []byte("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1"))
	j := bytes.Index(s, []byte("event: message_delta"))
	out := append(append([]byte(nil), s[:i]...), s[j:]...)
	return bytes.Replace(out, []byte(`"stop_reason":"end_turn"`), []byte(`"stop_reason":"tool_use"`), 1)
}

func benchSmallBody(stream bool) []byte {
	st := ""
	if stream {
		st = `"stream":true,`
	}
	return []byte(`{"model":"claude-sonnet-4-5","max_tokens":1024,` + st + `"system":"You are a careful coding agent.",` +
		`"tools":[{"name":"read_file","description":"Read a file.","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}}],` +
		`"messages":[{"role":"user","content":` + string(jsonstr.Append(nil, strings.Repeat("Fix the failing handler test, please. ", 48))) + `}]}`)
}

// benchLargeBody is a 1 MB, 200-turn tool transcript.
func benchLargeBody() []byte { return benchTranscript(false) }

// benchTranscript is benchLargeBody; with thinking on, every assistant turn thinks first, and
// every tenth is shaped as a memory loop's merged message (a second thinking block after a text
// block): a transcript the hidden rounds' restore looks up (hiddenrounds.go).
func benchTranscript(thinking bool) []byte {
	var sb bytes.Buffer
	sb.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":4096,"system":"You are a careful coding agent.",`)
	if thinking {
		sb.WriteString(`"thinking":{"type":"enabled","budget_tokens":2048},`)
	}
	sb.WriteString(`"tools":[{"name":"read_file","description":"Read a file.","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}}],` +
		`"messages":[{"role":"user","content":"Find why the handler tests fail and fix them."}`)
	result := string(jsonstr.Append(nil, strings.Repeat("\tfunc handler(w http.ResponseWriter, r *http.Request) { log.Printf(\"serving %s\", r.URL.Path) }\n", 105)))
	for i := 0; i < 100; i++ {
		id := "toolu_bench_" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		think := ""
		if thinking {
			think = `{"type":"thinking","thinking":"The handler logs before it checks the path; read it.","signature":"sig_bench_` + id + `"},`
			if i%10 == 9 {
				think += `{"type":"text","text":"Checked my notes."},{"type":"thinking","thinking":"Now the file.","signature":"sig_bench_later_` + id + `"},`
			}
		}
		sb.WriteString(`,{"role":"assistant","content":[` + think + `{"type":"tool_use","id":"` + id + `","name":"read_file","input":{"path":"h.go"}}]}`)
		sb.WriteString(`,{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + id + `","content":` + result + `}]}`)
	}
	sb.WriteString(`]}`)
	return sb.Bytes()
}

// benchLargePlainBody is benchLargeBody with one more short tool round at its end: in memory
// proxy mode memoryUpstream answers it plainly (no memory call), as the bench's row 5p.
func benchLargePlainBody() []byte { return withShortLastRound(benchLargeBody()) }

func withShortLastRound(b []byte) []byte {
	return append(b[:len(b)-2:len(b)-2], `,{"role":"assistant","content":[{"type":"tool_use","id":"toolu_bench_last","name":"read_file","input":{"path":"h.go"}}]}`+
		`,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_bench_last","content":"ok"}]}]}`...)
}

// BenchmarkServe is one request through Server.ServeHTTP with an in-memory
// upstream: the whole per-request cost of the proxy (routing, tenant lookup,
// rewrite, upstream request, reply relay, accounting), without the network.
func BenchmarkServe(b *testing.B) { benchServe(b, newBenchServer(b), nil) }

// BenchmarkServeNoCacheTracking is BenchmarkServe without the conversation lookup
// (Config.NoCacheTracking, the bench's row 4n): BenchmarkServe less this is what cache tracking
// costs a request.
func BenchmarkServeNoCacheTracking(b *testing.B) {
	s := newBenchServer(b)
	s.cfg.CacheTracker = nil
	benchServe(b, s, nil)
}

// BenchmarkServeCapped is BenchmarkServe's small enforce request from a tenant with spend caps
// and per-minute limits in the memory stores (admitted, held, settled): what caps cost a
// request, against BenchmarkServe/small/enforce.
func BenchmarkServeCapped(b *testing.B) {
	s := newBenchServer(b)
	s.cfg.Limits = limits.New(limits.Config{Spend: limits.NewMemoryStore(), Rate: limits.NewMemoryRate(),
		Prices: tokens.BuiltinPrices(), Metrics: limits.NewMetrics(prometheus.NewRegistry())})
	body := benchSmallBody(false)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		w := &discardWriter{}
		s.ServeHTTP(w, benchRequest(body, benchKeyCapped, nil))
		if w.n == 0 || w.Header().Get(limits.HeaderStatus) == "" {
			b.Fatal("no capped reply")
		}
	}
}

// benchRequest is a request as net/http's server hands it over, built directly: what the
// server allocates to parse one is not the proxy's cost.
func benchRequest(body []byte, key string, header func(http.Header)) *http.Request {
	h := http.Header{"Content-Type": {"application/json"}, "Anthropic-Version": {"2023-06-01"}, "X-Api-Key": {key}}
	if header != nil {
		header(h)
	}
	return &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/v1/messages"}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Host: "ctxproxy.test",
		RemoteAddr: "127.0.0.1:1234", RequestURI: "/v1/messages"}
}

// BenchmarkServeTraced is BenchmarkServe with traces on, every span sampled
// and exported over OTLP/HTTP to a collector in this process that reads and
// drops each batch: what tracing costs the proxy itself, its export included
// (compare cpu-ns/op with BenchmarkServe's, which has tracing off).
func BenchmarkServeTraced(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(sink.Close)
	env := map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": sink.URL + "/v1/traces", "OTEL_SERVICE_NAME": "bench"}
	tr, err := tracing.FromEnv(context.Background(), func(k string) string { return env[k] }, "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.Shutdown(context.Background()) })
	benchServe(b, newBenchServerTraced(b, tr), func(h http.Header) {
		h.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	})
}

// BenchmarkServeTracedNotSampled is BenchmarkServe with tracing configured and
// a sampler that samples nothing (OTEL_TRACES_SAMPLER=always_off): what a
// configured tracer costs the requests it leaves out.
func BenchmarkServeTracedNotSampled(b *testing.B) {
	b.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	tr := tracing.WithExporter(discardExporter{})
	b.Cleanup(func() { tr.Shutdown(context.Background()) })
	benchServe(b, newBenchServerTraced(b, tr), nil)
}

type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

func benchServe(b *testing.B, s *Server, header func(http.Header)) {
	small, large, largePlain, stream := benchSmallBody(false), benchLargeBody(), benchLargePlainBody(), benchSmallBody(true)
	largeThinking := withShortLastRound(benchTranscript(true))
	cases := []struct {
		name string
		key  string
		body []byte
	}{
		{"small/policy off", benchKeyOff, small},
		{"small/enforce", benchKeyEnforce, small},
		{"small/memory proxy", benchKeyMemory, small},
		{"1MB/policy off", benchKeyOff, large},
		{"1MB/enforce", benchKeyEnforce, large},
		{"1MB/memory proxy", benchKeyMemory, large},
		{"1MB/memory proxy, plain answer", benchKeyMemory, largePlain},
		{"1MB/memory proxy, plain answer, thinking on", benchKeyMemory, largeThinking},
		{"stream 200 events/policy off", benchKeyOff, stream},
		{"stream 200 events/enforce", benchKeyEnforce, stream},
		{"stream 200 events/memory proxy", benchKeyMemory, stream},
	}
	newReq := func(body []byte, key string) *http.Request { return benchRequest(body, key, header) }
	// The harness alone (request, in-memory upstream, reply writer) for
	// subtracting from the rows below.
	b.Run("harness alone", func(b *testing.B) {
		up := s.cfg.Transport
		b.ReportAllocs()
		for b.Loop() {
			req := newReq(small, benchKeyEnforce)
			resp, err := up.RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			w := &discardWriter{}
			n, _ := io.Copy(w, resp.Body)
			w.Header().Set("Content-Type", "application/json")
			if n == 0 {
				b.Fatal("empty reply")
			}
		}
	})
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				w := &discardWriter{}
				s.ServeHTTP(w, newReq(tc.body, tc.key))
				if w.n == 0 {
					b.Fatal("empty reply")
				}
			}
			if err := s.cfg.Tracer.Flush(context.Background()); err != nil { // its spans exported on the clock
				b.Fatal(err)
			}
			// The process's CPU: the work of other goroutines (a trace export) included.
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the process's user and system time so far, in nanoseconds.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
