package proxy

import (
	"net/http"
	"strconv"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
)

// ErrorType is the API's error.type for status (package apierr).
func ErrorType(status int) string { return apierr.Type(status) }

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
