package limits

import (
	"net/http"

	"github.com/ctxproxy/ctxproxy/policy"
)

// maxUserLen bounds an end user id taken from a header or the body, so a client cannot grow the
// counter table's keys without limit.
const maxUserLen = 256

// UserOf is the end user of a request by the tenant's user_from: the 8-hex key id, a header's
// value, or the body's metadata.user_id (as the policy's scan read it). "" means none (the request
// counts against the tenant's caps only).
func UserOf(l *policy.Limits, keyID string, h http.Header, metadataUserID string) string {
	if len(l.PerUserSpend) == 0 {
		return ""
	}
	var u string
	switch l.UserFrom {
	case policy.UserFromHeader:
		u = h.Get(l.UserHeader)
	case policy.UserFromMetadata:
		u = metadataUserID
	default:
		u = keyID
	}
	if len(u) > maxUserLen {
		u = u[:maxUserLen]
	}
	return u
}
