package proxy

import (
	"github.com/ctxproxy/ctxproxy/internal/apierr"
)

// sseErrorEvent is the mid-stream failure event (the API reference's
// streaming errors): the error envelope (package apierr) as an SSE event.
func sseErrorEvent(typ, msg string) []byte {
	body := apierr.Body(typ, msg)
	b := make([]byte, 0, len(body)+24)
	b = append(b, "event: error\ndata: "...)
	b = append(b, body...)
	return append(b, "\n\n"...)
}
