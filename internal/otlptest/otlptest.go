// Package otlptest is an in-process OTLP trace receiver for tests: OTLP/HTTP
// protobuf on /v1/traces and OTLP/gRPC, both on 127.0.0.1:0. It keeps every
// span it was sent, flattened for assertions.
package otlptest

import (
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"context"
)

// Span is one received span, flattened.
type Span struct {
	Name         string
	Kind         tracepb.Span_SpanKind
	TraceID      string
	SpanID       string
	ParentSpanID string
	Attrs        map[string]any // string, int64, float64, bool or []any
	StatusError  bool
	Resource     map[string]any
}

// Receiver collects spans.
type Receiver struct {
	mu    sync.Mutex
	spans []Span
}

func (rc *Receiver) add(req *collectorpb.ExportTraceServiceRequest) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				rc.spans = append(rc.spans, Span{
					Name:         s.GetName(),
					Kind:         s.GetKind(),
					TraceID:      hex.EncodeToString(s.GetTraceId()),
					SpanID:       hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()),
					Attrs:        attrMap(s.GetAttributes()),
					StatusError:  s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
					Resource:     res,
				})
			}
		}
	}
}

// Spans returns what was received so far, ordered by name for stable output.
func (rc *Receiver) Spans() []Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := append([]Span(nil), rc.spans...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// StartHTTP serves OTLP/HTTP protobuf; the endpoint to give an exporter is
// the returned base URL. Stopped at the end of the test.
func StartHTTP(t testing.TB) (*Receiver, string) {
	rc := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req collectorpb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.add(&req)
		out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return rc, srv.URL
}

type grpcService struct {
	collectorpb.UnimplementedTraceServiceServer
	rc *Receiver
}

func (g grpcService) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	g.rc.add(req)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// StartGRPC serves OTLP/gRPC (plaintext); the endpoint is http://host:port.
func StartGRPC(t testing.TB) (*Receiver, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &Receiver{}
	srv := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(srv, grpcService{rc: rc})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return rc, "http://" + ln.Addr().String()
}

func attrMap(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_ArrayValue:
		var out []any
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, value(e))
		}
		return out
	}
	return nil
}
