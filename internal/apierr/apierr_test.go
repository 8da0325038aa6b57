package apierr

import "testing"

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
