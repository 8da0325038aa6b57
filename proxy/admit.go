package proxy

import (
	"context"
	"errors"
	"net/http"

	"github.com/ctxproxy/ctxproxy/internal/apikey"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/policy"
)

// KeyVerifier checks ctxproxy's own keys (a *keys.Keyring).
type KeyVerifier interface {
	Verify(ctx context.Context, secret string) (keys.Key, error)
}

// caller is who sent a request, as its credential says.
type caller struct {
	pol   *policy.Policy // nil: no policy applies
	known bool           // the credential matched a tenant (not the default)
	keyID string         // first 8 hex of the presented key's sha256; "" without a key
	user  string         // the user a ctxproxy key was minted for
	// upstreamKey is the tenant's own Anthropic key, sent upstream in place of
	// the client's credential; "" forwards the client's credential as it came.
	upstreamKey string
}

// authFailure is a refused credential: the status and message the client
// gets. Nothing of the request reaches the upstream.
type authFailure struct {
	status int
	typ    string
	msg    string
}

// authenticate finds the caller of a request with header h. A ctxproxy key
// (sk-ctx-…) must be live and its tenant must hold its own Anthropic key;
// it never falls through to the default tenant. Any other key is looked up
// in the policies' api_keys_sha256, as before ctxproxy keys existed.
func (s *Server) authenticate(ctx context.Context, h http.Header) (caller, *authFailure) {
	key := apikey.From(h)
	c := caller{keyID: apikey.IDOf(key)}
	if keys.IsKey(key) {
		return s.authenticateKey(ctx, key, c)
	}
	c.pol, c.known = s.cfg.Policies.Current().Lookup(key)
	if c.known {
		c.upstreamKey, _ = c.pol.UpstreamKey()
	}
	return c, nil
}

func (s *Server) authenticateKey(ctx context.Context, key string, c caller) (caller, *authFailure) {
	if s.cfg.Keys == nil {
		return c, &authFailure{http.StatusUnauthorized, "authentication_error", keys.ErrUnknown.Error()}
	}
	k, err := s.cfg.Keys.Verify(ctx, key)
	switch {
	case errors.Is(err, keys.ErrUnknown), errors.Is(err, keys.ErrRevoked), errors.Is(err, keys.ErrExpired):
		return c, &authFailure{http.StatusUnauthorized, "authentication_error", err.Error()}
	case err != nil:
		s.log.Error("ctxproxy key check failed", zap.String("key", c.keyID), zap.Error(err))
		return c, &authFailure{http.StatusServiceUnavailable, "api_error", "the key store is unavailable; try again"}
	}
	pol := s.cfg.Policies.Current().Tenant(k.Tenant)
	upKey, ok := pol.UpstreamKey()
	if !ok {
		// The tenant was removed, or lost its key, after the key was minted.
		s.log.Warn("ctxproxy key of a tenant without an upstream key", zap.String("tenant", k.Tenant), zap.String("key", c.keyID))
		return c, &authFailure{http.StatusUnauthorized, "authentication_error", "this ctxproxy key cannot be used: its tenant holds no Anthropic key"}
	}
	c.pol, c.known, c.user, c.upstreamKey = pol, true, k.User, upKey
	return c, nil
}

// passCallerKey carries servePassthrough's caller to the reverse proxy's
// Rewrite and ModifyResponse.
type passCallerKey struct{}

// passthroughCaller is the caller servePassthrough found for r (zero when
// none was put there).
func passthroughCaller(r *http.Request) caller {
	c, _ := r.Context().Value(passCallerKey{}).(caller)
	return c
}

// admission is who asks, as the admit phase found them: the caller, and
// what its tenant's policy makes of the request.
type admission struct {
	caller
	tenant string      // "" when no policy applies
	label  string      // the tenant's name in logs and metrics: tenant, or "none"
	memory bool        // the proxy runs the model's memory calls: memory.mode proxy, on Messages
	retry  retryPolicy // the tenant's retries of an upstream call
}

// admit finds the caller and its tenant's policy, before the body is read:
// a refused caller costs no read, and a 413 can name the tenant. The
// admission is returned refused too: its key id is the refusal's log line's.
func (x *exchange) admit() (admission, bool) {
	s, r := x.s, x.r
	c, refused := s.authenticate(r.Context(), r.Header)
	a := admission{caller: c, label: "none"}
	if pol := c.pol; pol != nil {
		a.tenant = pol.Tenant
		if pol.Tenant != "" {
			a.label = pol.Tenant
		}
		a.memory = pol.Memory.Mode == policy.MemoryProxy && x.ep == epMessages
		a.retry = retryPolicy{retries: pol.Upstream.Retries, base: pol.Upstream.RetryBaseDelay, max: pol.Upstream.RetryMaxDelay}
	}
	if refused != nil {
		x.fail(refused.status, refused.typ, refused.msg)
		return a, false
	}
	if !c.known && s.cfg.RequireKnownTenant {
		x.fail(http.StatusUnauthorized, "authentication_error", "the API key matches no ctxproxy tenant")
		return a, false
	}
	return a, true
}
