package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// collector keeps every ExportTraceServiceRequest it is sent, over OTLP/HTTP
// (gzip or not) or gRPC, and the headers of the last HTTP one.
type collector struct {
	mu     sync.Mutex
	reqs   []*coltracepb.ExportTraceServiceRequest
	header http.Header
	coltracepb.UnimplementedTraceServiceServer
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, proto.Clone(req).(*coltracepb.ExportTraceServiceRequest))
	c.mu.Unlock()
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.reqs = append(c.reqs, &req)
	c.header = r.Header.Clone()
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
}

// got is everything received, as one request with its resources in a fixed
// order (otlptrace's exporter emits them in map order).
func (c *collector) got(t *testing.T) *coltracepb.ExportTraceServiceRequest {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	all := &coltracepb.ExportTraceServiceRequest{}
	for _, r := range c.reqs {
		all.ResourceSpans = append(all.ResourceSpans, r.ResourceSpans...)
	}
	key := func(rs *tracepb.ResourceSpans) string { return prototext.Format(rs.GetResource()) }
	sort.SliceStable(all.ResourceSpans, func(i, j int) bool { return key(all.ResourceSpans[i]) < key(all.ResourceSpans[j]) })
	return all
}

func startHTTPCollector(t *testing.T) (*collector, string) {
	c := &collector{}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return c, srv.URL + "/v1/traces"
}

func startGRPCCollector(t *testing.T) (*collector, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return c, ln.Addr().String()
}

// testRecords are spans with every field an export carries: remote and
// local parents, a trace state, each kind of attribute value, a repeated key,
// an error status and dropped counts; then the spans a request makes through
// Tracer, failed ones among them.
func testRecords(t *testing.T) []*record {
	ts, err := trace.ParseTraceState("vendor=abc,other=1")
	if err != nil {
		t.Fatal(err)
	}
	tid := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	sc := func(span byte, remote bool, state trace.TraceState) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{0, 0, 0, 0, 0, 0, 0, span},
			TraceFlags: trace.FlagsSampled, TraceState: state, Remote: remote})
	}
	start := time.Date(2026, 12, 5, 17, 0, 0, 123456789, time.UTC)
	all := []attribute.KeyValue{
		attribute.String("s", "text"), attribute.String("empty", ""), attribute.Bool("t", true), attribute.Bool("f", false),
		attribute.Int64("i", -42), attribute.Int64("zero", 0), attribute.Float64("d", 0.0042), attribute.Float64("dzero", 0),
		attribute.StringSlice("ss", []string{"end_turn", ""}), attribute.StringSlice("ss0", []string{}),
		attribute.BoolSlice("bs", []bool{true, false}), attribute.Int64Slice("is", []int64{1, 0, -1}),
		attribute.Float64Slice("ds", []float64{1.5, 0}), attribute.ByteSlice("b", []byte{0, 1, 2}),
		attribute.Slice("mixed", attribute.StringValue("a"), attribute.Int64Value(2), attribute.Value{}),
		attribute.Map("m", attribute.String("k", "v"), attribute.Map("inner", attribute.Int("n", 1))),
		attribute.String("long", string(bytes.Repeat([]byte("x"), 300))),
	}
	recs := []*record{
		{name: "POST /v1/messages", sc: sc(1, false, ts), parent: sc(9, true, trace.TraceState{}), kind: trace.SpanKindServer,
			start: start, end: start.Add(3 * time.Millisecond), attrs: encodeAttrs(all...), dropped: 2,
			status: sdktrace.Status{Code: codes.Error, Description: "request failed"}},
		{name: "chat claude-sonnet-4-5", sc: sc(2, false, trace.TraceState{}), parent: sc(1, false, ts), kind: trace.SpanKindClient,
			start: start, end: start.Add(time.Millisecond), attrs: encodeAttrs(attribute.String(AttrErrorType, "overloaded_error"),
				attribute.String(AttrOutputMessages, strings.Repeat("y", 20000))), // a span of three length bytes
			status: sdktrace.Status{Code: codes.Error, Description: "upstream answered an error"}},
		{name: "unset", kind: trace.SpanKindInternal, sc: sc(3, false, trace.TraceState{}), start: start, end: start,
			status: sdktrace.Status{Code: codes.Ok}},
		{name: "zero times", kind: trace.SpanKindProducer, sc: sc(4, false, trace.TraceState{})},
		{name: "a", kind: trace.SpanKindConsumer, sc: sc(5, false, trace.TraceState{})},
	}

	// And what Tracer records for a request: its server span, a chat span
	// that failed (with a key set twice: the last value is kept), a memory
	// command.
	got := &keptRecords{}
	tr := newTracer(os.Getenv, got)
	r := httptest.NewRequest("POST", "/v1/messages", nil)
	r.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	ctx, srv := tr.StartServer(r, "/v1/messages")
	cctx, chat := tr.StartChat(ctx, ChatRequest{Model: "claude-sonnet-4-5", MaxTokens: 1024, Stream: true, Tenant: "acme",
		PolicyMode: "enforce", Edits: []string{"clear_thinking_20251015"}, Round: 1})
	chat.SetInput("msg_prev", `[{"role":"user","content":"hi"}]`)
	chat.Set(attribute.String(AttrTenant, "acme-renamed"))
	_, m := tr.StartMemory(cctx, "view")
	m.EndMemory(true, 42)
	chat.EndChat(ChatResponse{Status: 529, ID: "msg_1", Model: "claude-sonnet-4-5-20250929", StopReason: "end_turn",
		InputTokens: 10, OutputTokens: 5, CacheRead: 100, AppliedEdits: []string{"clear_thinking_20251015"},
		InputTransformations: []string{"compact:threshold"}, CostUSD: 0.0123})
	srv.EndServer(502, "acme")
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got.rs) != 3 {
		t.Fatalf("the tracer recorded %d spans, want 3", len(got.rs))
	}
	return append(recs, got.rs...)
}

// encodeAttrs is kv as a span with the default limits keeps them.
func encodeAttrs(kv ...attribute.KeyValue) []byte {
	r := &record{t: &Tracer{limits: spanLimits{count: 128, valueLength: -1}}}
	r.ents = r.arr[:0]
	r.add(kv...)
	return r.attrs
}

// keptRecords is an exporter that keeps a copy of each span it is sent.
type keptRecords struct {
	mu sync.Mutex
	rs []*record
}

type recordBatch []*record

func (b *recordBatch) add(r *record) {
	*b = append(*b, &record{name: r.name, sc: r.sc, parent: r.parent, kind: r.kind, start: r.start, end: r.end,
		status: r.status, attrs: slices.Clone(r.attrs), dropped: r.dropped})
}
func (b *recordBatch) len() int { return len(*b) }
func (b *recordBatch) reset()   { *b = nil }

func (k *keptRecords) newBatch() batch { return &recordBatch{} }

func (k *keptRecords) export(_ context.Context, b batch) error {
	k.mu.Lock()
	k.rs = append(k.rs, *b.(*recordBatch)...)
	k.mu.Unlock()
	return nil
}

func (k *keptRecords) shutdown(context.Context) error { return nil }

// batchOf is rs as exp batches them.
func batchOf(exp exporter, rs []*record) batch {
	b := exp.newBatch()
	for _, r := range rs {
		b.add(r)
	}
	return b
}

// The exporter sends exactly what the SDK's OTLP exporter sends for the same
// spans: both export to a collector, which decodes the requests, and the
// two are compared field by field.
func TestOTLPExporterSendsWhatTheSDKExporterSends(t *testing.T) {
	recs := testRecords(t)
	resA := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
		attribute.String("service.name", "ctxproxy"), attribute.String("service.version", "v1"))
	resB := resource.NewSchemaless(attribute.String("service.name", "other"), attribute.Int("shard", 3))
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) (otlptrace.Client, *collector)
	}{
		{"http/protobuf", func(t *testing.T) (otlptrace.Client, *collector) {
			c, url := startHTTPCollector(t)
			return otlptracehttp.NewClient(otlptracehttp.WithEndpointURL(url)), c
		}},
		{"http/protobuf gzip", func(t *testing.T) (otlptrace.Client, *collector) {
			c, url := startHTTPCollector(t)
			return otlptracehttp.NewClient(otlptracehttp.WithEndpointURL(url), otlptracehttp.WithCompression(otlptracehttp.GzipCompression)), c
		}},
		{"grpc", func(t *testing.T) (otlptrace.Client, *collector) {
			c, addr := startGRPCCollector(t)
			return otlptracegrpc.NewClient(otlptracegrpc.WithEndpoint(addr), otlptracegrpc.WithInsecure()), c
		}},
	} {
		for _, res := range []*resource.Resource{resA, resB} {
			t.Run(tc.name+" "+res.String(), func(t *testing.T) {
				sdkClient, sdkGot := tc.client(t)
				sdkOTLP, err := otlptrace.New(ctx, sdkClient)
				if err != nil {
					t.Fatal(err)
				}
				sdkExp := &sdkExporter{exp: sdkOTLP, res: res}
				ourClient, ourGot := tc.client(t)
				ours, err := newOTLPExporter(ctx, ourClient, res, scope)
				if err != nil {
					t.Fatal(err)
				}
				// Twice: the second batch reuses the first one's buffer.
				for range 2 {
					if err := sdkExp.export(ctx, batchOf(sdkExp, recs)); err != nil {
						t.Fatal(err)
					}
					if err := ours.export(ctx, batchOf(ours, recs)); err != nil {
						t.Fatal(err)
					}
				}
				sdkExp.shutdown(ctx)
				ours.shutdown(ctx)
				want, got := sdkGot.got(t), ourGot.got(t)
				if n := countSpans(got); n != 2*len(recs) {
					t.Errorf("%d spans received, want %d", n, 2*len(recs))
				}
				if !proto.Equal(got, want) {
					t.Errorf("exported\n%s\nwant what the SDK's exporter sent\n%s", prototext.Format(got), prototext.Format(want))
				}
			})
		}
	}
}

func countSpans(req *coltracepb.ExportTraceServiceRequest) int {
	n := 0
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			n += len(ss.Spans)
		}
	}
	return n
}

// FromEnv's exporter is configured by the OTLP variables, as the SDK's:
// here the traces endpoint, headers and gzip. (newExporter is that part of
// FromEnv: the resource FromEnv adds is read from the environment once per
// process, and another test sets the service's name.)
func TestFromEnvExporterHonoursTheOTLPVariables(t *testing.T) {
	c, url := startHTTPCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=agents,authorization=Bearer%20t0k")
	t.Setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
	exp, err := newExporter(context.Background(), os.Getenv, resource.Default())
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracer(os.Getenv, exp)
	_, sp := tr.StartServer(httptest.NewRequest("POST", "/v1/messages", nil), "/v1/messages")
	sp.EndServer(200, "acme")
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := c.got(t)
	if countSpans(got) != 1 {
		t.Fatalf("received %d spans, want 1", countSpans(got))
	}
	if h := c.header; h.Get("X-Team") != "agents" || h.Get("Authorization") != "Bearer t0k" || h.Get("Content-Encoding") != "gzip" {
		t.Errorf("export headers %v: want the OTEL_EXPORTER_OTLP_HEADERS and gzip", h)
	}
	if name := got.ResourceSpans[0].ScopeSpans[0].Spans[0].Name; name != "POST /v1/messages" {
		t.Errorf("span name %q", name)
	}
}

// A string that is not UTF-8 would make a collector refuse the whole batch;
// it goes out with U+FFFD in place of the bad bytes.
func TestOTLPExporterReplacesInvalidUTF8(t *testing.T) {
	c, url := startHTTPCollector(t)
	exp, err := newOTLPExporter(context.Background(), otlptracehttp.NewClient(otlptracehttp.WithEndpointURL(url)), resource.Empty(), scope)
	if err != nil {
		t.Fatal(err)
	}
	defer exp.shutdown(context.Background())
	r := &record{name: "caf\xe9", attrs: encodeAttrs(attribute.String("k", "x\xffy"))}
	if err := exp.export(context.Background(), batchOf(exp, []*record{r})); err != nil {
		t.Fatal(err)
	}
	s := c.got(t).ResourceSpans[0].ScopeSpans[0].Spans[0]
	if s.Name != "caf\uFFFD" || s.Attributes[0].Value.GetStringValue() != "x\uFFFDy" {
		t.Errorf("name %q, attribute %q", s.Name, s.Attributes[0].Value.GetStringValue())
	}
}

// BenchmarkExportBatch exports a batch of 512 spans (the batch processor's
// default) of 256 requests to an OTLP/HTTP collector that drops them: the
// SDK's exporter against otlpExporter.
func BenchmarkExportBatch(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer sink.Close()
	kept := &keptRecords{}
	tr := newTracer(os.Getenv, kept)
	r := httptest.NewRequest("POST", "/v1/messages", nil)
	for range 256 {
		ctx, srv := tr.StartServer(r, "/v1/messages")
		_, chat := tr.StartChat(ctx, ChatRequest{Model: "claude-sonnet-4-5", MaxTokens: 1024, Tenant: "acme",
			PolicyMode: "enforce", Edits: []string{"clear_thinking_20251015"}})
		chat.EndChat(ChatResponse{Status: 200, ID: "msg_01XFDUDYJgAACzvnptvVoYEL", Model: "claude-sonnet-4-5-20250929",
			StopReason: "end_turn", InputTokens: 1200, OutputTokens: 85, CacheRead: 900,
			AppliedEdits: []string{"clear_thinking_20251015"}, ClearedInput: 300, CostUSD: 0.0042})
		srv.EndServer(200, "acme")
	}
	tr.Shutdown(context.Background())
	recs := kept.rs
	ctx := context.Background()
	sdkOTLP, _ := otlptrace.New(ctx, otlptracehttp.NewClient(otlptracehttp.WithEndpointURL(sink.URL+"/v1/traces")))
	ours, _ := newOTLPExporter(ctx, otlptracehttp.NewClient(otlptracehttp.WithEndpointURL(sink.URL+"/v1/traces")), resource.Default(), scope)
	for _, exp := range []struct {
		name string
		exp  exporter
	}{{"sdk", &sdkExporter{exp: sdkOTLP, res: resource.Default()}}, {"otlp", ours}} {
		b.Run(exp.name, func(b *testing.B) {
			b.ReportAllocs()
			batch := exp.exp.newBatch()
			for b.Loop() {
				for _, r := range recs {
					batch.add(r)
				}
				if err := exp.exp.export(ctx, batch); err != nil {
					b.Fatal(err)
				}
				batch.reset()
			}
		})
	}
	b.Run("encode only", func(b *testing.B) {
		b.ReportAllocs()
		var enc encoder
		for b.Loop() {
			enc.b = enc.b[:0]
			for _, r := range recs {
				enc.span(r)
			}
		}
		b.ReportMetric(float64(len(enc.b)), "bytes")
	})
}
