package proxy

import (
	"net/http"
	"strconv"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
)

// errorTypes maps an HTTP status to the API's error.type (spec §7).
var errorTypes = map[int]string{
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

// ErrorType is the API's error.type for status.
func ErrorType(status int) string {
	if t, ok := errorTypes[status]; ok {
		return t
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// errorBody is the API's error envelope.
func errorBody(typ, msg string) []byte {
	b := make([]byte, 0, 64+len(msg))
	b = append(b, `{"type":"error","error":{"type":`...)
	b = jsonstr.Append(b, typ)
	b = append(b, `,"message":`...)
	b = jsonstr.Append(b, msg)
	return append(b, `}}`...)
}

// writeError answers with the API's error shape; it returns the bytes written.
func writeError(w http.ResponseWriter, status int, typ, msg string) int {
	if typ == "" {
		typ = ErrorType(status)
	}
	body := errorBody(typ, msg)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	n, _ := w.Write(body)
	return n
}

// sseErrorEvent is the mid-stream failure event (spec §5).
func sseErrorEvent(typ, msg string) []byte {
	b := make([]byte, 0, 96+len(msg))
	b = append(b, "event: error\ndata: "...)
	b = append(b, errorBody(typ, msg)...)
	return append(b, "\n\n"...)
}
