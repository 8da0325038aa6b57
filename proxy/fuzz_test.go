package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
)

// The fuzz targets feed arbitrary bytes to the proxy as the upstream's
// stream, through the whole request path (policy, loop, relay, splice), as
// is (memory off) and in memory proxy mode, where every round of the loop
// gets the same bytes. Whatever the bytes, the handler must not panic and
// the client must get a complete SSE stream that ends in message_stop or
// error. The seed corpus is testdata/fuzz/<target>/ plus the streams of
// hostile_test.go.

// rawStream is an upstream that answers every request with the same bytes
// as a 200 event stream, in process.
type rawStream struct{ body []byte }

func (u *rawStream) RoundTrip(req *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, req.Body)
	req.Body.Close()
	return &http.Response{
		StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"text/event-stream"}},
		Body:          io.NopCloser(bytes.NewReader(u.body)),
		ContentLength: -1, Request: req,
	}, nil
}

func fuzzServer(f *testing.F, up http.RoundTripper) *Server {
	dir := f.TempDir()
	for name, body := range testPolicies() {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	pols, err := policy.NewStore(dir, zap.NewNop())
	if err != nil {
		f.Fatal(err)
	}
	mem, err := memoryhook.NewFileStore(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { mem.Close() })
	u, _ := url.Parse("http://upstream.invalid")
	srv, err := New(withLimits(Config{Upstream: u, Policies: pols, Memory: mem, Transport: up}))
	if err != nil {
		f.Fatal(err)
	}
	return srv
}

func fuzzSeeds(f *testing.F) {
	for _, tc := range hostileStreams {
		f.Add([]byte(tc.stream))
	}
	f.Add([]byte(memoryCreateStream()))
	f.Add([]byte(evMessageStart("msg_ok", 10) + evTextStart("0") + evTextDelta("0", "hi") + evBlockStop("0") + evMessageDelta("end_turn") + evMessageStop))
}

func fuzzRelay(f *testing.F, key string, memory bool) {
	fuzzSeeds(f)
	up := &rawStream{}
	srv := fuzzServer(f, up)
	f.Fuzz(func(t *testing.T, stream []byte) {
		up.body = stream
		req := httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(withStream(simpleBody)))
		req.Header.Set("X-Api-Key", key)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("status %d %s", rec.Code, rec.Body)
		}
		checkClientStream(t, rec.Body.String(), memory)
	})
}

// checkClientStream fails unless body is a complete SSE stream that ends in
// message_stop or error. In memory proxy mode, which splices and renumbers,
// every event it knows carries JSON data and content blocks start at
// 0, 1, 2 … with their deltas and stops after their start.
func checkClientStream(t *testing.T, body string, memory bool) {
	t.Helper()
	evs := clientEvents(t, body)
	if len(evs) == 0 {
		t.Fatalf("no event reached the client")
	}
	if last := evs[len(evs)-1][0]; last != "message_stop" && last != "error" {
		t.Fatalf("the stream ends in %q: %q", last, body)
	}
	if !memory {
		return
	}
	started := 0
	for i, e := range evs {
		name, data := e[0], e[1]
		switch name {
		case "message_start", "message_delta", "message_stop", "error",
			"content_block_start", "content_block_delta", "content_block_stop":
			if !gjson.Valid(data) {
				t.Fatalf("event %d %s: invalid JSON %q", i, name, data)
			}
		}
		idx := gjson.Get(data, "index")
		switch name {
		case "content_block_start":
			if idx.Raw != strconv.Itoa(started) {
				t.Fatalf("event %d: block %s started where %d was next", i, idx.Raw, started)
			}
			started++
		case "content_block_delta", "content_block_stop":
			if n, ok := blockIndex(idx); !ok || n >= started {
				t.Fatalf("event %d: %s for block %s of %d", i, name, idx.Raw, started)
			}
		}
	}
}

// clientEvents parses body the way an EventSource does (lines end in \n,
// \r\n or \r; a blank line dispatches), failing when it stops inside an
// event. Events are (name, data).
func clientEvents(t *testing.T, body string) [][2]string {
	t.Helper()
	var out [][2]string
	var name string
	var data []string
	pending := false
	lines := strings.Split(strings.ReplaceAll(strings.ReplaceAll(body, "\r\n", "\n"), "\r", "\n"), "\n")
	if lines[len(lines)-1] != "" {
		t.Fatalf("the stream stops inside a line: %q", body)
	}
	for _, l := range lines[:len(lines)-1] {
		if l == "" {
			if pending {
				out = append(out, [2]string{name, strings.Join(data, "\n")})
			}
			name, data, pending = "", nil, false
			continue
		}
		pending = true
		field, value, _ := strings.Cut(l, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "data":
			data = append(data, value)
		}
	}
	if pending {
		t.Fatalf("the stream stops inside an event: %q", body)
	}
	return out
}

func FuzzRelayAsItIs(f *testing.F) { fuzzRelay(f, keyOther, false) }

func FuzzRelayMemorySpliced(f *testing.F) { fuzzRelay(f, keyAcme, true) }
