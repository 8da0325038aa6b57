package proxy

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// A tenant with its own Anthropic key (upstream.api_key_env or api_key_file)
// never has its clients' credentials sent upstream: the proxy sends the
// tenant's key instead, on every route, and scrubs that key from everything
// the upstream answers, so no reply, header or error can carry it back to a
// client, whatever the upstream echoes.

// redactedKey replaces the tenant's key wherever an upstream reply holds it.
const redactedKey = "[redacted]"

// scrubReply makes resp safe to relay when the request carried key: header
// values are scrubbed and the body is read through a redactor. The body's
// length may change, so it is no longer declared.
func scrubReply(resp *http.Response, key string) {
	if key == "" {
		return
	}
	scrubHeader(resp.Header, key)
	resp.Body = &redactReader{r: resp.Body, secret: []byte(key)}
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
}

// scrubHeader replaces key in every value of h and drops a header whose
// name holds it (an echo may use the key as a name, too).
func scrubHeader(h http.Header, key string) {
	for name, vv := range h {
		for i, v := range vv {
			if strings.Contains(v, key) {
				vv[i] = strings.ReplaceAll(v, key, redactedKey)
			}
		}
		if strings.Contains(name, key) {
			delete(h, name)
		}
	}
}

// scrubWriter is the client's side of a pass-through reply to a request that
// carried the tenant's key. The reverse proxy writes two things
// ModifyResponse (scrubReply) never sees: interim 1xx responses (103 Early
// Hints), whose headers it copies to the client as they arrive, and the
// trailers, which it puts in the header map after the body. So every header
// block is scrubbed as it goes out, and the trailers once the reverse proxy
// is done (done), before the server sends them.
type scrubWriter struct {
	http.ResponseWriter
	key string
}

func (w *scrubWriter) WriteHeader(code int) {
	scrubHeader(w.Header(), w.key)
	w.ResponseWriter.WriteHeader(code)
}

// done scrubs the trailers: call it when the reverse proxy has returned.
func (w *scrubWriter) done() { scrubHeader(w.Header(), w.key) }

func (w *scrubWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// redactReader replaces every occurrence of secret in what r yields. It holds
// back only a tail of the input that may be the start of the secret, so a
// stream that ends each event with a newline is relayed without delay.
type redactReader struct {
	r      io.ReadCloser
	secret []byte
	out    []byte // ready to return
	held   []byte // a tail that may be the start of the secret
	chunk  []byte
	err    error
}

func (rr *redactReader) Read(p []byte) (int, error) {
	for len(rr.out) == 0 {
		if rr.err != nil {
			if len(rr.held) > 0 { // the input ended inside no secret
				rr.out, rr.held = rr.held, nil
				break
			}
			return 0, rr.err
		}
		rr.fill()
	}
	n := copy(p, rr.out)
	rr.out = rr.out[n:]
	return n, nil
}

// fill reads once and moves what is known to hold no secret to out.
func (rr *redactReader) fill() {
	if rr.chunk == nil {
		rr.chunk = make([]byte, 4096)
	}
	n, err := rr.r.Read(rr.chunk)
	rr.err = err
	data := append(rr.held, rr.chunk[:n]...)
	if bytes.Contains(data, rr.secret) {
		data = bytes.ReplaceAll(data, rr.secret, []byte(redactedKey))
	}
	keep := 0
	if err == nil {
		keep = secretPrefixAtEnd(data, rr.secret)
	}
	rr.out = data[:len(data)-keep]
	rr.held = append([]byte(nil), data[len(data)-keep:]...)
}

// secretPrefixAtEnd is the length of the longest tail of data that is a
// proper prefix of secret.
func secretPrefixAtEnd(data, secret []byte) int {
	for k := min(len(secret)-1, len(data)); k > 0; k-- {
		if bytes.Equal(data[len(data)-k:], secret[:k]) {
			return k
		}
	}
	return 0
}

func (rr *redactReader) Close() error { return rr.r.Close() }
