package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpSink is the trace collector of the tracing rows: an OTLP/HTTP
// endpoint in the bench process that accepts every export, counts its
// spans by the path it came to (one path per row and load, so the report
// can say what each exported) and discards them. Decoding a batch costs
// the load generator a little CPU, not the proxy under test.
type otlpSink struct {
	srv  *http.Server
	addr string

	mu      sync.Mutex
	exports map[string]int // per path prefix: export requests
	spans   map[string]int // per path prefix: spans in them
	bad     map[string]int // per path prefix: bodies that did not decode
}

func startOTLPSink() (*otlpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("otlp sink: %w", err)
	}
	s := &otlpSink{addr: ln.Addr().String(), exports: map[string]int{}, spans: map[string]int{}, bad: map[string]int{}}
	s.srv = &http.Server{Handler: s}
	go s.srv.Serve(ln)
	return s, nil
}

// endpoint is the OTEL_EXPORTER_OTLP_TRACES_ENDPOINT for tag (used as is by
// the exporter: the signal's own variable is the full URL).
func (s *otlpSink) endpoint(tag string) string {
	return "http://" + s.addr + "/" + tag + "/v1/traces"
}

func (s *otlpSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tag, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/"), "/v1/traces")
	body, err := io.ReadAll(r.Body)
	if !ok || r.Method != http.MethodPost || err != nil {
		http.Error(w, "not an OTLP/HTTP trace export", http.StatusNotFound)
		return
	}
	n, err := countSpans(body)
	s.mu.Lock()
	s.exports[tag]++
	s.spans[tag] += n
	if err != nil {
		s.bad[tag]++
	}
	s.mu.Unlock()
	// An empty 200 is a full success to the exporter.
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// countSpans counts the spans of an ExportTraceServiceRequest.
func countSpans(body []byte) (int, error) {
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		return 0, fmt.Errorf("otlp sink: %w", err)
	}
	n := 0
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			n += len(ss.Spans)
		}
	}
	return n, nil
}

// received is what tag's exports brought: requests, spans, undecodable bodies.
func (s *otlpSink) received(tag string) (exports, spans, bad int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exports[tag], s.spans[tag], s.bad[tag]
}

func (s *otlpSink) close() { s.srv.Close() }
