package apierr

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

func TestType(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   string
	}{
		{400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
		{404, "not_found_error"}, {413, "request_too_large"}, {429, "rate_limit_error"},
		{504, "timeout_error"}, {529, "overloaded_error"},
		{418, "invalid_request_error"}, // a 4xx the API does not name
		{507, "api_error"},             // a 5xx the API does not name
	} {
		if got := Type(tc.status); got != tc.want {
			t.Errorf("Type(%d) = %q, want %q", tc.status, got, tc.want)
		}
	}
}

func TestBody(t *testing.T) {
	for _, tc := range []struct {
		name   string
		typ    string
		msg    string
		fields []Field
		want   string
	}{
		{"is the API's envelope", "not_found_error", "no such route",
			nil, `{"type":"error","error":{"type":"not_found_error","message":"no such route"}}`},
		{"escapes the message", "invalid_request_error", "bad \"x\"\n",
			nil, `{"type":"error","error":{"type":"invalid_request_error","message":"bad \"x\"\n"}}`},
		{"carries fields after the message", "memory_path_conflict_error", "in the way",
			[]Field{String("conflicting_path", "/a\"b"), {Name: "details", Raw: `{"k":1}`}},
			`{"type":"error","error":{"type":"memory_path_conflict_error","message":"in the way","conflicting_path":"/a\"b","details":{"k":1}}}`},
		{"leaves out an empty field", "api_error", "m",
			[]Field{{Name: "details"}}, `{"type":"error","error":{"type":"api_error","message":"m"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(Body(tc.typ, tc.msg, tc.fields...))
			if got != tc.want {
				t.Errorf("Body = %s\nwant   %s", got, tc.want)
			}
			if !json.Valid([]byte(got)) {
				t.Errorf("Body is not JSON: %s", got)
			}
		})
	}
}

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	n := Write(rec, http.StatusTooManyRequests, "", "slow down")
	want := `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`
	if rec.Code != 429 || rec.Body.String() != want || n != len(want) {
		t.Fatalf("Write: %d %q (n=%d), want 429 %q", rec.Code, rec.Body.String(), n, want)
	}
	h := rec.Header()
	if h.Get("Content-Type") != "application/json" || h.Get("Content-Length") != strconv.Itoa(len(want)) || h.Get("Cache-Control") != "no-store" {
		t.Errorf("headers: %v", h)
	}
}
