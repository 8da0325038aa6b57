// Package apierr writes the Anthropic API's error envelope, and names the
// error.type for an HTTP status (the API reference's errors section): the
// one writer of {"type":"error","error":{…}} for the proxy, the policy's
// refusals, the admin, report and memory operator APIs, the trace spans'
// error.type and the console.
package apierr

import (
	"net/http"
	"strconv"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
)

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

// Field is a member of the error object after type and message: Raw is
// its value, already JSON (an object, or a string made with String).
type Field struct {
	Name string
	Raw  string
}

// String is a field whose value is the JSON string s.
func String(name, s string) Field { return Field{Name: name, Raw: string(jsonstr.Append(nil, s))} }

// Body is the API's error envelope:
// {"type":"error","error":{"type":typ,"message":msg,…fields}}.
// A field with an empty Raw is left out.
func Body(typ, msg string, fields ...Field) []byte {
	n := 64 + len(msg)
	for _, f := range fields {
		n += len(f.Name) + len(f.Raw) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, `{"type":"error","error":{"type":`...)
	b = jsonstr.Append(b, typ)
	b = append(b, `,"message":`...)
	b = jsonstr.Append(b, msg)
	for _, f := range fields {
		if f.Raw == "" {
			continue
		}
		b = append(b, ',')
		b = jsonstr.Append(b, f.Name)
		b = append(b, ':')
		b = append(b, f.Raw...)
	}
	return append(b, `}}`...)
}

// Write answers with status and the error envelope (typ "" is Type(status)),
// never cached; it returns the bytes of the body written.
func Write(w http.ResponseWriter, status int, typ, msg string, fields ...Field) int {
	if typ == "" {
		typ = Type(status)
	}
	body := Body(typ, msg, fields...)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	n, _ := w.Write(body) // a client gone is the caller's to notice
	return n
}
