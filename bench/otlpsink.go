package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
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

// countSpans counts the spans of an ExportTraceServiceRequest by walking its
// wire format (resource_spans, their scope_spans, their spans), every level's
// fields checked, without building the messages: a full decode of each batch
// cost the machine the proxy shares as much CPU as the spans cost the proxy.
func countSpans(body []byte) (int, error) {
	n := 0
	err := eachField(body, 1, func(rs []byte) error { // ExportTraceServiceRequest.resource_spans
		return eachField(rs, 2, func(ss []byte) error { // ResourceSpans.scope_spans
			return eachField(ss, 2, func(span []byte) error { // ScopeSpans.spans
				n++
				return eachField(span, 0, nil)
			})
		})
	})
	if err != nil {
		return 0, fmt.Errorf("otlp sink: %w", err)
	}
	return n, nil
}

// eachField checks that b is a well-formed protobuf message and calls fn with
// the contents of each length-delimited field number num (none when num is 0).
func eachField(b []byte, num protowire.Number, fn func([]byte) error) error {
	for len(b) > 0 {
		f, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(f, typ, b[n:])
		if m < 0 {
			return protowire.ParseError(m)
		}
		if f == num && typ == protowire.BytesType && fn != nil {
			v, _ := protowire.ConsumeBytes(b[n:])
			if err := fn(v); err != nil {
				return err
			}
		}
		b = b[n+m:]
	}
	return nil
}

// received is what tag's exports brought: requests, spans, undecodable bodies.
func (s *otlpSink) received(tag string) (exports, spans, bad int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exports[tag], s.spans[tag], s.bad[tag]
}

func (s *otlpSink) close() { s.srv.Close() }
