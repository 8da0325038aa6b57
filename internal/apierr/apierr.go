// Package apierr names the Anthropic API's error types: the error.type
// ctxproxy answers for an HTTP status (spec §7), in one place for the
// proxy's error bodies, the trace spans' error.type and the console.
package apierr

import "net/http"

// types maps an HTTP status to the API's error.type.
var types = map[int]string{
	http.StatusBadRequest:            "invalid_request_error",
	http.StatusUnauthorized:          "authentication_error",
	http.StatusPaymentRequired:       "billing_error",
	http.StatusForbidden:             "permission_error",
	http.StatusNotFound:              "not_found_error",
	http.StatusConflict:              "conflict_error",
	http.StatusRequestEntityTooLarge: "request_too_large",
	http.StatusTooManyRequests:       "rate_limit_error",
	http.StatusInternalServerError:   "api_error",
	http.StatusBadGateway:            "api_error",
	http.StatusServiceUnavailable:    "api_error",
	http.StatusGatewayTimeout:        "timeout_error",
	529:                              "overloaded_error",
}

// Type is the API's error.type for status: a 5xx it does not name is an
// api_error, a 4xx an invalid_request_error.
func Type(status int) string {
	if t, ok := types[status]; ok {
		return t
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}
