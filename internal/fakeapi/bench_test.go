package fakeapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Flush()                      {}

// benchServe drives the handler in process (no network) so the numbers are
// the fake's own cost per request.
func benchServe(b *testing.B, reqBody string, reply Reply) {
	api := New(WithRecordLimit(100))
	api.SetResponder(func(*Request) Reply { return reply })
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := &discard{h: http.Header{}}
		for pb.Next() {
			req := httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(reqBody))
			req.Header.Set("X-Api-Key", "k")
			req.Header.Set("Anthropic-Version", "2023-06-01")
			req.Header.Set("Anthropic-Beta", BetaContextManagement)
			clear(w.h)
			api.ServeHTTP(w, req)
		}
	})
}

func BenchmarkPlainReply(b *testing.B) {
	benchServe(b, body(""), TextReply("hello there, this is a reply"))
}

func BenchmarkStreamedReply(b *testing.B) {
	benchServe(b, body(`{"stream":true}`), richReply())
}

func BenchmarkStreamedToolLoopWithEdits(b *testing.B) {
	msgs := "[" + strings.Join(toolHistory(), ",") + "]"
	benchServe(b, body(`{"stream":true,"tools":`+tools+`,"messages":`+msgs+
		`,"context_management":{"edits":[{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":2},"exclude_tools":["memory"]}]}}`),
		Blocks(Text("next"), MemoryView("/memories")))
}

// BenchmarkOverHTTP includes the loopback network and net/http.
func BenchmarkOverHTTP(b *testing.B) {
	api := New(WithRecordLimit(100))
	srv := httptest.NewServer(api)
	defer srv.Close()
	reqBody := body(`{"stream":true}`)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(reqBody))
			req.Header.Set("X-Api-Key", "k")
			req.Header.Set("Anthropic-Version", "2023-06-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}
