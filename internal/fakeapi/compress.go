package fakeapi

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// pickEncoding returns the content-encoding for a reply: forced (a Reply's
// Encoding) wins; else, with Options.Compress, the best of zstd, br, gzip the
// request accepts; else none.
func (a *API) pickEncoding(req *http.Request, forced string) string {
	switch forced {
	case "identity":
		return ""
	case "":
	default:
		return forced
	}
	a.mu.Lock()
	on := a.opts.Compress
	a.mu.Unlock()
	if !on {
		return ""
	}
	return negotiate(req.Header.Values("Accept-Encoding"))
}

func negotiate(values []string) string {
	var gz, br, zs bool
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(part, ";")
			name = strings.ToLower(strings.TrimSpace(name))
			if q := strings.TrimSpace(params); strings.HasPrefix(q, "q=") && strings.Trim(q[2:], " 0.") == "" {
				continue // q=0: not acceptable
			}
			switch name {
			case "gzip", "x-gzip":
				gz = true
			case "br":
				br = true
			case "zstd":
				zs = true
			}
		}
	}
	switch {
	case zs:
		return "zstd"
	case br:
		return "br"
	case gz:
		return "gzip"
	}
	return ""
}

// flushWriter is a compressing writer that can push out what it holds.
type flushWriter interface {
	io.Writer
	Flush() error
	Close() error
}

var zstdEncoders = sync.Pool{New: func() any {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		panic(err)
	}
	return e
}}

var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return w
}}

// newEncoder returns a compressing writer onto w and a func returning it to its pool.
func newEncoder(enc string, w io.Writer) (flushWriter, func(), error) {
	switch enc {
	case "gzip":
		g := gzipWriters.Get().(*gzip.Writer)
		g.Reset(w)
		return g, func() { gzipWriters.Put(g) }, nil
	case "br":
		return brotli.NewWriterLevel(w, 1), func() {}, nil
	case "zstd":
		z := zstdEncoders.Get().(*zstd.Encoder)
		z.Reset(w)
		return z, func() { zstdEncoders.Put(z) }, nil
	}
	return nil, nil, fmt.Errorf("unsupported encoding %q", enc)
}

func compress(enc string, body []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, done, err := newEncoder(enc, &buf)
	if err != nil {
		return nil, err
	}
	defer done()
	if _, err := zw.Write(body); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
