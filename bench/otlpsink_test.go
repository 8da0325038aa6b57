package main

import (
	"bytes"
	"net/http"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

func TestOTLPSinkCounts(t *testing.T) {
	s, err := startOTLPSink()
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	req := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{
		{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{Name: "a"}, {Name: "b"}}}, {Spans: []*tracepb.Span{{Name: "c"}}}}},
	}}
	body, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path   string
		body   []byte
		status int
	}{
		{"/row4t-small/v1/traces", body, http.StatusOK},
		{"/row4t-small/v1/traces", body, http.StatusOK},
		{"/row4t-small/v1/traces", []byte{0xff}, http.StatusOK},
		{"/other", body, http.StatusNotFound},
	} {
		resp, err := http.Post("http://"+s.addr+tt.path, "application/x-protobuf", bytes.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("POST %s: %d, want %d", tt.path, resp.StatusCode, tt.status)
		}
	}
	if ex, spans, bad := s.received("row4t-small"); ex != 3 || spans != 6 || bad != 1 {
		t.Errorf("received = %d exports, %d spans, %d bad; want 3, 6, 1", ex, spans, bad)
	}
	if got := s.endpoint("row4t-small"); got != "http://"+s.addr+"/row4t-small/v1/traces" {
		t.Errorf("endpoint = %q", got)
	}
}
