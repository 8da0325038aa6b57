package fakeapi

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestTheCredentialIsRecorded(t *testing.T) {
	api, base := newServer(t)
	const body = `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   string
	}{
		{"from x-api-key", map[string]string{"X-Api-Key": "key-a"}, "key-a"},
		{"from a Bearer token when there is no x-api-key", map[string]string{"X-Api-Key": "", "Authorization": "Bearer key-b"}, "key-b"},
		{"x-api-key first when both come", map[string]string{"X-Api-Key": "key-c", "Authorization": "Bearer key-d"}, "key-c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			do(t, base, call{body: body, header: tc.header})
			r, ok := api.LastRequest("/v1/messages")
			if !ok || r.Credential != tc.want {
				t.Fatalf("Credential = %q, want %q", r.Credential, tc.want)
			}
			if got := r.toJSON().Credential; got != tc.want {
				t.Fatalf("RequestJSON credential = %q", got)
			}
		})
	}
}

func TestEchoHeaders(t *testing.T) {
	api, base := newServer(t, WithOptions(Options{EchoHeaders: true}))
	hdr := map[string]string{"X-Api-Key": "echo-me-key"}
	t.Run("a scripted error quotes the request headers in its message and its reply headers", func(t *testing.T) {
		api.Enqueue(Reply{Status: 400, Error: &APIError{Type: "invalid_request_error", Message: "bad"}})
		resp, b := do(t, base, call{body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, header: hdr})
		if msg := gjson.GetBytes(b, "error.message").Str; resp.StatusCode != 400 || !strings.Contains(msg, "X-Api-Key: echo-me-key") {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		if got := resp.Header.Get(EchoHeaderPrefix + "X-Api-Key"); got != "echo-me-key" {
			t.Fatalf("echo header = %q", got)
		}
	})
	t.Run("a validation error quotes them too", func(t *testing.T) {
		resp, b := do(t, base, call{body: `{"model":"m"}`, header: hdr})
		if resp.StatusCode != 400 || !strings.Contains(string(b), "echo-me-key") {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	})
	t.Run("another /v1/ route has them in its body", func(t *testing.T) {
		resp, b := do(t, base, call{path: "/v1/files", body: `{}`, header: hdr})
		if resp.StatusCode != 200 || !strings.Contains(gjson.GetBytes(b, "headers").Str, "echo-me-key") {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	})
	t.Run("off by default", func(t *testing.T) {
		_, base := newServer(t)
		resp, b := do(t, base, call{body: `{"model":"m"}`, header: hdr})
		if strings.Contains(string(b), "echo-me-key") || resp.Header.Get(EchoHeaderPrefix+"X-Api-Key") != "" {
			t.Fatalf("echoed without the option: %v %s", resp.Header, b)
		}
	})
}
