package upstreamreq

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	tests := []struct{ name, base, path, want string }{
		{"joins a bare host", "https://api.anthropic.com", "/v1/models", "https://api.anthropic.com/v1/models"},
		{"keeps a base path", "http://gw.example/anthropic", "/v1/messages", "http://gw.example/anthropic/v1/messages"},
		{"writes one slash where both have one", "http://gw.example/anthropic/", "/v1/messages", "http://gw.example/anthropic/v1/messages"},
		{"adds the slash where neither has one", "http://gw.example/anthropic", "v1/messages", "http://gw.example/anthropic/v1/messages"},
		{"drops the base's query", "http://gw.example/a?x=1", "/v1/models", "http://gw.example/a/v1/models"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, err := url.Parse(tt.base)
			if err != nil {
				t.Fatal(err)
			}
			before := base.String()
			if got := URL(base, tt.path).String(); got != tt.want {
				t.Errorf("URL(%s, %s) = %s, want %s", tt.base, tt.path, got, tt.want)
			}
			if base.String() != before {
				t.Errorf("the base changed to %s", base)
			}
		})
	}
}

func TestForwarded(t *testing.T) {
	in := http.Header{
		"Connection":          {"keep-alive, X-Private"},
		"X-Private":           {"hop"},
		"Keep-Alive":          {"timeout=5"},
		"Proxy-Authorization": {"Basic cHJveHk="},
		"Te":                  {"trailers"},
		"Transfer-Encoding":   {"chunked"},
		"Upgrade":             {"websocket"},
		"Content-Length":      {"12"},
		"Content-Encoding":    {"gzip"},
		"Accept-Encoding":     {"gzip, snappy"},
		"X-Api-Key":           {"sk-ant-client"},
		"Authorization":       {"Bearer tok"},
		"Anthropic-Beta":      {"a,b"},
		"Anthropic-Version":   {"2023-06-01"},
		"User-Agent":          {"Anthropic/Python 1.0"},
	}
	h := Forwarded(in)
	for _, k := range []string{"Connection", "X-Private", "Keep-Alive", "Proxy-Authorization", "Te", "Transfer-Encoding", "Upgrade", "Content-Length", "Content-Encoding"} {
		t.Run("drops "+k, func(t *testing.T) {
			if _, ok := h[k]; ok {
				t.Errorf("%s went upstream: %q", k, h[k])
			}
		})
	}
	for _, k := range []string{"X-Api-Key", "Authorization", "Anthropic-Beta", "Anthropic-Version", "User-Agent"} {
		t.Run("forwards "+k, func(t *testing.T) {
			if got, want := h.Get(k), in.Get(k); got != want {
				t.Errorf("%s = %q, want %q", k, got, want)
			}
		})
	}
	t.Run("asks only for codings the proxy decodes", func(t *testing.T) {
		if got := h.Get("Accept-Encoding"); got != "gzip" {
			t.Errorf("Accept-Encoding = %q", got)
		}
	})
	t.Run("leaves the client's header alone", func(t *testing.T) {
		if in.Get("Connection") == "" || in.Get("Content-Length") != "12" {
			t.Errorf("the client's header changed: %v", in)
		}
	})
	t.Run("without a user agent sends an empty one, not Go's", func(t *testing.T) {
		h := Forwarded(http.Header{})
		if v, ok := h["User-Agent"]; !ok || len(v) != 1 || v[0] != "" {
			t.Errorf("User-Agent = %q, %v", v, ok)
		}
		if got := h.Get("Accept-Encoding"); got != "identity" {
			t.Errorf("Accept-Encoding without the client's = %q, want identity", got)
		}
	})
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

func TestSetCredential(t *testing.T) {
	tests := []struct {
		name     string
		h        http.Header
		c        Credential
		key, aut string
	}{
		{"a tenant's key replaces a client's bearer token", http.Header{"Authorization": {"Bearer client"}}, Key("sk-ant-tenant"), "sk-ant-tenant", ""},
		{"a tenant's key replaces a client's key", http.Header{"X-Api-Key": {"sk-ctx-client"}}, Key("sk-ant-tenant"), "sk-ant-tenant", ""},
		{"a credential read from a header is written as it was", http.Header{"X-Api-Key": {"old"}},
			CredentialOf(http.Header{"X-Api-Key": {"k"}, "Authorization": {"Bearer t"}}), "k", "Bearer t"},
		{"a bearer token alone leaves no key", http.Header{"X-Api-Key": {"old"}}, Credential{Authorization: "Bearer t"}, "", "Bearer t"},
		{"a client's key sent as x-admin-token does not go with the tenant's", http.Header{"X-Admin-Token": {"sk-ctx-client"}}, Key("sk-ant-tenant"), "sk-ant-tenant", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			SetCredential(tt.h, tt.c)
			if got := tt.h.Values("X-Api-Key"); len(got) > 1 || tt.h.Get("X-Api-Key") != tt.key {
				t.Errorf("X-Api-Key = %q, want %q", got, tt.key)
			}
			if got := tt.h.Values("Authorization"); len(got) > 1 || tt.h.Get("Authorization") != tt.aut {
				t.Errorf("Authorization = %q, want %q", got, tt.aut)
			}
			if got := tt.h.Get("X-Admin-Token"); got != "" {
				t.Errorf("X-Admin-Token %q went with the credential", got)
			}
		})
	}
}

func TestOwn(t *testing.T) {
	h := Own(Key("sk-ant-k"))
	if h.Get("X-Api-Key") != "sk-ant-k" || h.Get("Authorization") != "" {
		t.Errorf("credential: %v", h)
	}
	if v, ok := h["User-Agent"]; !ok || len(v) != 1 || v[0] != "" {
		t.Errorf("User-Agent = %q, %v: want an empty one, so net/http adds none", v, ok)
	}
	if len(h) != 2 {
		t.Errorf("header %v: want the credential and the user agent only", h)
	}
}

func TestNew(t *testing.T) {
	target := URL(&url.URL{Scheme: "http", Host: "127.0.0.1:1"}, "/v1/messages/count_tokens")
	h := http.Header{"X-Api-Key": {"k"}}
	t.Run("a body is sent with its length and can be sent again", func(t *testing.T) {
		body := func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("{}")), nil }
		req := New(context.Background(), http.MethodPost, target, h, 2, body)
		if req.ContentLength != 2 || req.Host != "127.0.0.1:1" || req.URL != target || req.Header.Get("X-Api-Key") != "k" {
			t.Fatalf("request %+v", req)
		}
		b, _ := io.ReadAll(req.Body)
		again, err := req.GetBody()
		if err != nil {
			t.Fatal(err)
		}
		b2, _ := io.ReadAll(again)
		if string(b) != "{}" || string(b2) != "{}" {
			t.Errorf("body %q, again %q", b, b2)
		}
	})
	t.Run("no body is none", func(t *testing.T) {
		req := New(context.Background(), http.MethodGet, target, h, 0, nil)
		if req.Body != http.NoBody || req.GetBody != nil || req.ContentLength != 0 {
			t.Errorf("body %v, GetBody %v, length %d", req.Body, req.GetBody != nil, req.ContentLength)
		}
	})
}
