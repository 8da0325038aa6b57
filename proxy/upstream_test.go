package proxy

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"github.com/ctxproxy/ctxproxy/internal/upstreamreq"
)

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
	got := string(apierr.Body("invalid_request_error", "bad \"x\"\n\x01"))
	want := `{"type":"error","error":{"type":"invalid_request_error","message":"bad \"x\"\n\u0001"}}`
	if got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// countingConn counts the writes made on a connection, and the bytes written
// straight from watch's memory (not from a copy of it).
type countingConn struct {
	net.Conn
	writes  *atomic.Int32
	aliased *atomic.Int64
	watch   *[]byte
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	if w := *c.watch; len(p) > 0 && len(w) > 0 {
		start, end := uintptr(unsafe.Pointer(&w[0])), uintptr(unsafe.Pointer(&w[0]))+uintptr(len(w))
		if at := uintptr(unsafe.Pointer(&p[0])); at >= start && at < end {
			c.aliased.Add(int64(len(p)))
		}
	}
	return c.Conn.Write(p)
}

func TestUpstreamRequestWrites(t *testing.T) {
	var got []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
	}))
	defer srv.Close()
	var writes atomic.Int32
	var aliased atomic.Int64
	var watch []byte
	// As NewTransport dials: an upstreamConn over the connection.
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		return upstreamConn{countingConn{c, &writes, &aliased, &watch}}, err
	}}
	defer tr.CloseIdleConnections()
	base, _ := url.Parse(srv.URL)
	u := &upstream{base: base, client: &http.Client{Transport: tr}}
	in := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)

	send := func(t *testing.T, parts [][]byte, lease *bodyLease) *http.Request {
		t.Helper()
		writes.Store(0)
		req := u.newRequest(context.Background(), in, http.Header{}, parts, lease)
		resp, err := u.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if want := bytes.Join(parts, nil); !bytes.Equal(got, want) {
			t.Fatalf("upstream got %d bytes, want the %d sent", len(got), len(want))
		}
		rb, err := req.GetBody()
		if err != nil {
			t.Fatal(err)
		}
		again, _ := io.ReadAll(rb)
		if !bytes.Equal(again, got) {
			t.Fatal("GetBody does not give the body again")
		}
		return req
	}

	t.Run("a small body in pieces goes out with its headers in one write", func(t *testing.T) {
		send(t, [][]byte{[]byte(`{"model":"m",`), []byte(`"max_tokens":1,`), []byte(`"messages":[]}`)}, nil)
		if n := writes.Load(); n != 1 {
			t.Fatalf("request written in %d writes, want 1", n)
		}
	})
	t.Run("a pooled body is read through its lease, which sees EOF", func(t *testing.T) {
		buf, lease := newBodyBuf(100 << 10)
		for i := range buf {
			buf[i] = 'a' + byte(i%26)
		}
		watch, aliased = buf, atomic.Int64{}
		defer func() { watch = nil }()
		send(t, [][]byte{buf[:10], buf[10:]}, lease)
		if n := lease.open.Load(); n != 0 {
			t.Fatalf("%d readers of the pooled buffer not at EOF", n)
		}
		// net/http fills what its 4 KiB header buffer has left; the rest goes
		// out from the pooled buffer itself, not through a 32 KiB copy.
		if n := aliased.Load(); n < int64(len(buf))-4096 {
			t.Fatalf("%d of %d bytes written straight from the body buffer", n, len(buf))
		}
	})
}

// Every content coding the proxy asks the upstream for (upstreamreq.Forwarded narrows the
// client's Accept-Encoding to them) is one decodeBody reads back to identity bytes.
func TestEveryCodingAskedForIsDecoded(t *testing.T) {
	const reply = `{"type":"message","usage":{"input_tokens":12,"output_tokens":3}}`
	encoders := map[string]func(io.Writer) io.WriteCloser{
		"gzip": func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) },
		"deflate": func(w io.Writer) io.WriteCloser {
			fw, _ := flate.NewWriter(w, flate.DefaultCompression)
			return fw
		},
		"br": func(w io.Writer) io.WriteCloser { return brotli.NewWriter(w) },
		"zstd": func(w io.Writer) io.WriteCloser {
			zw, _ := zstd.NewWriter(w)
			return zw
		},
	}
	h := upstreamreq.Forwarded(http.Header{"Accept-Encoding": {"gzip, deflate, br, zstd, compress, snappy, lz4, xz, bzip2, dcz, aes128gcm"}})
	asked := strings.Split(h.Get("Accept-Encoding"), ", ")
	if len(asked) == 0 || asked[0] == "" {
		t.Fatal("no coding asked for")
	}
	for _, enc := range asked {
		t.Run(enc+" is decoded", func(t *testing.T) {
			newEncoder, ok := encoders[enc]
			if !ok {
				t.Fatalf("the proxy asks for %s: add its encoder here and its decoder to decodeBody", enc)
			}
			var b bytes.Buffer
			w := newEncoder(&b)
			if _, err := io.WriteString(w, reply); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			resp := &http.Response{Header: http.Header{"Content-Encoding": {enc}}, Body: io.NopCloser(&b)}
			if err := decodeBody(resp); err != nil {
				t.Fatalf("decodeBody: %v", err)
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil || string(got) != reply || resp.Header.Get("Content-Encoding") != "" {
				t.Fatalf("decoded %q, %v; Content-Encoding %q", got, err, resp.Header.Get("Content-Encoding"))
			}
		})
	}
}
