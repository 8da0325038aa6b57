// Package upstreamreq builds the requests ctxproxy sends to the Anthropic API, for every part
// that sends one: the proxy's calls, the models read (capabilities) and the policy lab's
// count_tokens calls (shadow). It holds what must be the same for all of them: the URL under
// the configured base, which of a client's headers go upstream, the one function that writes
// the credential, and the user agent. What a caller adds (retries, spans, accounting, its own
// API headers) stays with the caller.
package upstreamreq

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// URL is the API's URL for path under base: base's path and path joined with one slash
// between them (as httputil joins them), no query.
func URL(base *url.URL, path string) *url.URL {
	u := *base
	u.Path = singleJoiningSlash(base.Path, path)
	u.RawPath = ""
	u.RawQuery = ""
	return &u
}

// singleJoiningSlash is httputil's path join.
func singleJoiningSlash(a, b string) string {
	aslash := strings.HasSuffix(a, "/")
	bslash := strings.HasPrefix(b, "/")
	switch {
	case aslash && bslash:
		return a + b[1:]
	case !aslash && !bslash:
		return a + "/" + b
	}
	return a + b
}

// New is the request for method and target with header h and a body of n bytes, which body
// opens (again for each send: the transport resends a request on a keep-alive connection that
// turned out dead). It is built as http.NewRequestWithContext would build it, without printing
// the URL for it to parse back; n == 0 (body nil) sends none.
func New(ctx context.Context, method string, target *url.URL, h http.Header, n int64, body func() (io.ReadCloser, error)) *http.Request {
	req := &http.Request{
		Method:        method,
		URL:           target,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          http.NoBody,
		ContentLength: n,
		Host:          target.Host,
	}
	if n != 0 {
		// The openers callers pass do not fail: their bodies are in memory.
		req.Body, _ = body()
		req.GetBody = body
	}
	return req.WithContext(ctx)
}

// Credential is how a call authenticates upstream: an API key (x-api-key), an Authorization
// value (a bearer token), or both, each exactly as sent.
type Credential struct {
	APIKey        string
	Authorization string
}

// Key is the credential of an Anthropic API key.
func Key(key string) Credential { return Credential{APIKey: key} }

// CredentialOf is the credential h carries, verbatim.
func CredentialOf(h http.Header) Credential {
	return Credential{APIKey: h.Get("X-Api-Key"), Authorization: h.Get("Authorization")}
}

// Empty reports whether c authenticates nothing.
func (c Credential) Empty() bool { return c.APIKey == "" && c.Authorization == "" }

// SetCredential makes c the only credential h carries: every credential header h had goes
// (X-Admin-Token too: apikey.From takes a client's key from it, and a key ctxproxy swapped out
// must not reach the upstream under another name), and c's are written. It is the one writer
// of an upstream call's credential.
func SetCredential(h http.Header, c Credential) {
	h.Del("X-Api-Key")
	h.Del("Authorization")
	h.Del("X-Admin-Token")
	if c.APIKey != "" {
		h.Set("X-Api-Key", c.APIKey)
	}
	if c.Authorization != "" {
		h.Set("Authorization", c.Authorization)
	}
}

// Header values shared between requests rather than allocated for each: header values are
// only ever read or replaced, never written in place.
var (
	identityEncoding = []string{"identity"}
	noUserAgent      = []string{""}
)

// Own is the header of a call ctxproxy makes on its own behalf (no client's request goes
// with it): credential c and, as on a forwarded request without one, no user agent (net/http
// would otherwise add Go's).
func Own(c Credential) http.Header {
	h := http.Header{"User-Agent": noUserAgent}
	SetCredential(h, c)
	return h
}

// Forwarded is the header set a client's request takes upstream: the client's end-to-end
// headers (its credential among them; a caller that sends another one replaces it with
// SetCredential), an Accept-Encoding the proxy can decode, no body framing (the proxy sets its
// own), and the client's user agent or none (as httputil: never Go's default).
func Forwarded(in http.Header) http.Header {
	h := in.Clone()
	RemoveHop(h)
	h.Del("Content-Length")
	h.Del("Content-Encoding") // the body was read (and decoded) by the proxy
	if ae := readableAcceptEncoding(in); ae != "" {
		h.Set("Accept-Encoding", ae)
	} else {
		h["Accept-Encoding"] = identityEncoding
	}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = noUserAgent
	}
	return h
}

// hopHeaders are the hop-by-hop headers of RFC 9110 §7.6.1, as httputil
// lists them.
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// RemoveHop deletes hop-by-hop headers, including those the Connection header names: they
// never cross the proxy, in either direction.
func RemoveHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, sf := range strings.Split(f, ",") {
			if sf = strings.TrimSpace(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// decodableEncodings are the content codings the proxy can read (proxy's decodeBody; a proxy
// test holds the two together). It asks the upstream only for these on routes whose replies it
// reads (usage, applied_edits, memory calls), then hands the client identity bytes.
var decodableEncodings = map[string]bool{"gzip": true, "deflate": true, "br": true, "zstd": true}

// readableAcceptEncoding narrows the client's Accept-Encoding to codings the proxy can decode.
func readableAcceptEncoding(h http.Header) string {
	var out []string
	for _, v := range h.Values("Accept-Encoding") {
		for _, part := range strings.Split(v, ",") {
			name := strings.TrimSpace(part)
			if i := strings.IndexByte(name, ';'); i >= 0 {
				name = strings.TrimSpace(name[:i])
			}
			if decodableEncodings[strings.ToLower(name)] {
				out = append(out, strings.TrimSpace(part))
			}
		}
	}
	return strings.Join(out, ", ")
}
