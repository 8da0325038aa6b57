package proxy

import (
	"net/http"
	"testing"
	"time"
)

func TestRemoveHopHeaders(t *testing.T) {
	h := http.Header{}
	h.Set("Connection", "keep-alive, X-Private")
	h.Set("X-Private", "secret")
	h.Set("Keep-Alive", "timeout=5")
	h.Set("Transfer-Encoding", "chunked")
	h.Set("Upgrade", "websocket")
	h.Set("X-Api-Key", "k")
	h.Set("Anthropic-Beta", "a,b")
	removeHopHeaders(h)
	for _, k := range []string{"Connection", "X-Private", "Keep-Alive", "Transfer-Encoding", "Upgrade"} {
		if h.Get(k) != "" {
			t.Errorf("%s survived", k)
		}
	}
	for _, k := range []string{"X-Api-Key", "Anthropic-Beta"} {
		if h.Get(k) == "" {
			t.Errorf("end-to-end header %s was dropped", k)
		}
	}
}

func TestReadableAcceptEncoding(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want string
	}{
		{"keeps every coding the proxy decodes", []string{"gzip, deflate, br, zstd"}, "gzip, deflate, br, zstd"},
		{"drops codings it cannot decode", []string{"gzip, compress, snappy"}, "gzip"},
		{"keeps quality values", []string{"br;q=1.0, gzip;q=0.5"}, "br;q=1.0, gzip;q=0.5"},
		{"folds repeated header lines", []string{"gzip", "br"}, "gzip, br"},
		{"is empty when the client sent none", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"Accept-Encoding": tt.in}
			if got := readableAcceptEncoding(h); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	p := retryPolicy{retries: 3, base: 100 * time.Millisecond, max: time.Second}
	tests := []struct {
		name     string
		attempt  int
		header   http.Header
		min, max time.Duration
	}{
		{"honours retry-after seconds", 0, http.Header{"Retry-After": {"2"}}, 2 * time.Second, 2 * time.Second},
		{"prefers retry-after-ms", 0, http.Header{"Retry-After-Ms": {"150"}, "Retry-After": {"9"}}, 150 * time.Millisecond, 150 * time.Millisecond},
		{"caps a huge retry-after", 0, http.Header{"Retry-After": {"86400"}}, 60 * time.Second, 60 * time.Second},
		{"backs off with jitter below the doubled base", 2, nil, 200 * time.Millisecond, 400 * time.Millisecond},
		{"never exceeds the max delay", 10, nil, 500 * time.Millisecond, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 50 {
				d := p.delay(tt.attempt, tt.header)
				if d < tt.min || d > tt.max {
					t.Fatalf("delay = %v, want within [%v, %v]", d, tt.min, tt.max)
				}
			}
		})
	}
}

func TestErrorBodyEscapes(t *testing.T) {
	got := string(errorBody("invalid_request_error", "bad \"x\"\n\x01"))
	want := `{"type":"error","error":{"type":"invalid_request_error","message":"bad \"x\"\n\u0001"}}`
	if got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}
