package limits

import (
	"net/http"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/policy"
)

// maxUserLen bounds an end user id taken from a header or the body, so a client cannot grow the
// counter table's keys without limit.
const maxUserLen = 256

// UserOf is the end user of a request by the tenant's user_from: the 8-hex key id, a header's
// value, or metadata.user_id of the body. "" means none (the request counts against the tenant's
// caps only). The body is read only for metadata.user_id and only when per-user caps exist.
func UserOf(l *policy.Limits, keyID string, h http.Header, body []byte) string {
	if len(l.PerUserSpend) == 0 {
		return ""
	}
	var u string
	switch l.UserFrom {
	case policy.UserFromHeader:
		u = h.Get(l.UserHeader)
	case policy.UserFromMetadata:
		u = gjson.GetBytes(body, "metadata.user_id").Str
	default:
		u = keyID
	}
	if len(u) > maxUserLen {
		u = u[:maxUserLen]
	}
	return u
}
