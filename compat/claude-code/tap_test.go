package claudecode_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// exchange is one request Claude Code made and the reply it got, as bytes
// on the wire.
type exchange struct {
	Method, Path, Query string
	ReqHeader           http.Header
	ReqBody             []byte
	Status              int
	RespHeader          http.Header
	RespBody            []byte // raw, still under RespHeader's Content-Encoding
}

// tap is a recording pass-through between Claude Code and ctxproxy, so the
// test sees exactly what the client sent and received. It forwards headers
// as they are (Accept-Encoding included: Go's transport does not decode a
// reply to a request that set it) and flushes every write.
type tap struct {
	whole bool // read each reply to its end before passing it on
	mu    sync.Mutex
	log   []*exchange
	srv   *http.Server
	URL   string
}

// With whole set it reads each reply to the end before passing it on, so it
// has every byte even when the reader stops early: ctxproxy stops reading
// the upstream at message_stop, before a compressed stream's last bytes.
func startTap(t *testing.T, target string, whole bool) *tap {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	tp := &tap{whole: whole}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(u); r.Out.Host = r.In.Host },
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			ex := resp.Request.Context().Value(exchangeKey{}).(*exchange)
			ex.Status, ex.RespHeader = resp.StatusCode, resp.Header.Clone()
			if !tp.whole {
				resp.Body = &teeBody{ReadCloser: resp.Body, ex: ex, mu: &tp.mu}
				return nil
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			tp.mu.Lock()
			ex.RespBody = b
			tp.mu.Unlock()
			resp.Body = io.NopCloser(bytes.NewReader(b))
			return err
		},
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		ex := &exchange{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, ReqHeader: r.Header.Clone(), ReqBody: body}
		tp.mu.Lock()
		tp.log = append(tp.log, ex)
		tp.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r.WithContext(contextWith(r, ex)))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp.srv = &http.Server{Handler: h}
	go func() { _ = tp.srv.Serve(ln) }()
	t.Cleanup(func() { _ = tp.srv.Close() })
	tp.URL = "http://" + ln.Addr().String()
	return tp
}

// take returns the exchanges so far and forgets them.
func (tp *tap) take() []*exchange {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	out := tp.log
	tp.log = nil
	return out
}

type teeBody struct {
	io.ReadCloser
	ex *exchange
	mu *sync.Mutex
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	b.ex.RespBody = append(b.ex.RespBody, p[:n]...)
	b.mu.Unlock()
	return n, err
}

// decode returns body read under content-encoding enc, failing when the
// bytes are not in that encoding (or when enc is one the client did not
// offer, per accept).
func decode(enc, accept string, body []byte) ([]byte, error) {
	enc = strings.ToLower(strings.TrimSpace(enc))
	if enc != "" && enc != "identity" && !strings.Contains(strings.ToLower(accept), enc) {
		return nil, fmt.Errorf("content-encoding %q was not in the client's Accept-Encoding %q", enc, accept)
	}
	var r io.Reader
	switch enc {
	case "", "identity":
		return body, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		r = zr
	case "deflate":
		r = flate.NewReader(bytes.NewReader(body))
	case "br":
		r = brotli.NewReader(bytes.NewReader(body))
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		defer zr.Close()
		r = zr
	default:
		return nil, fmt.Errorf("unknown content-encoding %q", enc)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("body is not %s: %w", enc, err)
	}
	return out, nil
}

type exchangeKey struct{}

func contextWith(r *http.Request, ex *exchange) context.Context {
	return context.WithValue(r.Context(), exchangeKey{}, ex)
}
