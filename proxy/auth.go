package proxy

import (
	"context"
	"net/http"

	"github.com/ctxproxy/ctxproxy/policy"
)

// caller is who sent a request, as its credential says.
type caller struct {
	pol   *policy.Policy // nil: no policy applies
	known bool           // the credential matched a tenant (not the default)
	keyID string         // first 8 hex of the presented key's sha256; "" without a key
	// upstreamKey is the tenant's own Anthropic key, sent upstream in place of
	// the client's credential; "" forwards the client's credential as it came.
	upstreamKey string
}

// authenticate finds the caller of a request with header h.
func (s *Server) authenticate(_ context.Context, h http.Header) caller {
	key := apiKey(h)
	pol, known := s.cfg.Policies.Current().Lookup(key)
	c := caller{pol: pol, known: known, keyID: keyID(key)}
	if known {
		c.upstreamKey, _ = pol.UpstreamKey()
	}
	return c
}

// credentialKey carries the tenant's upstream key from the passthrough's
// authentication to its Rewrite and ModifyResponse.
type credentialKey struct{}

// authPassthrough authenticates a passthrough request like a Messages one
// and hands the tenant's key, if any, to the reverse proxy in next.
func (s *Server) authPassthrough(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := s.authenticate(r.Context(), r.Header)
		if c.upstreamKey != "" {
			r = r.WithContext(context.WithValue(r.Context(), credentialKey{}, c.upstreamKey))
		}
		next.ServeHTTP(w, r)
	})
}

// passthroughKey is the tenant key authPassthrough found for r, or "".
func passthroughKey(r *http.Request) string {
	k, _ := r.Context().Value(credentialKey{}).(string)
	return k
}
