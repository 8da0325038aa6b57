package apikey

import (
	"net/http"
	"testing"
)

func TestFrom(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    map[string]string
		want string
	}{
		{"x-api-key, as the SDKs send an apiKey", map[string]string{"X-Api-Key": "k1"}, "k1"},
		{"a bearer token, as the SDKs send an authToken", map[string]string{"Authorization": "Bearer  t1 "}, "t1"},
		{"the bearer scheme in any case", map[string]string{"Authorization": "bEARER t1"}, "t1"},
		{"x-admin-token, as operators send it", map[string]string{"X-Admin-Token": "a1"}, "a1"},
		{"x-api-key before a bearer token", map[string]string{"X-Api-Key": "k1", "Authorization": "Bearer t1"}, "k1"},
		{"a bearer token before x-admin-token", map[string]string{"Authorization": "Bearer t1", "X-Admin-Token": "a1"}, "t1"},
		{"not another scheme", map[string]string{"Authorization": "Basic t1"}, ""},
		{"not an empty bearer", map[string]string{"Authorization": "Bearer"}, ""},
		{"none", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.h {
				h.Set(k, v)
			}
			if got := From(h); got != tc.want {
				t.Errorf("From = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestID(t *testing.T) {
	// a key id is the first 8 hex digits of the key's sha256 (echo -n sk-test | sha256sum)
	if id := IDOf("sk-test"); id != "f3abf2a6" || id != ID(Hash("sk-test")) || !IsID(id) {
		t.Fatalf("IDOf = %q, want f3abf2a6", id)
	}
	if IDOf("") != "" {
		t.Error("no key has no key id")
	}
	if IDOf("sk-test") == IDOf("sk-test2") {
		t.Error("two keys share a key id")
	}
	for _, s := range []string{"", "1234567", "123456789", "ABCDEF12", "ghijklmn"} {
		if IsID(s) {
			t.Errorf("IsID(%q)", s)
		}
	}
}
