package fakeapi

import (
	"net/http"
	"sort"
	"strings"
)

// credential is the key a request authenticated with, as the API reads it:
// x-api-key, else the Authorization Bearer token.
func credential(h http.Header) string {
	if k := h.Get("X-Api-Key"); k != "" {
		return k
	}
	if a := h.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

// EchoHeaderPrefix starts the reply headers that repeat the request's
// headers under Options.EchoHeaders: X-Fake-Echo-X-Api-Key and so on.
const EchoHeaderPrefix = "X-Fake-Echo-"

// echoHeaders repeats every request header on the reply, as a careless
// upstream or a debugging middlebox might.
func echoHeaders(dst, req http.Header) {
	for k, vv := range req {
		for _, v := range vv {
			dst.Add(EchoHeaderPrefix+k, v)
		}
	}
}

// headerText is the request's headers as one line, "Name: value; ...",
// sorted by name: what an echoing error message quotes.
func headerText(h http.Header) string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, k := range names {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(k + ": " + strings.Join(h[k], ", "))
	}
	return b.String()
}

// withEcho is e with the request's headers quoted in its message.
func withEcho(e *APIError, h http.Header) *APIError {
	c := *e
	c.Message += " (request headers: " + headerText(h) + ")"
	return &c
}
