package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"net/netip"
	"strings"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/admin"
)

// Sign-in: the operator types the token /admin takes; the console checks
// it and opens a session of its own (Sessions): a random id in an HttpOnly,
// SameSite=Strict cookie scoped to the console's path, Secure whenever the
// browser's connection is TLS. The token itself never leaves the sign-in
// form. Every request finds the session's principal again from the token's
// sha256, so a token removed from the policies (or an admin token changed)
// locks its holder out at once; sign-out deletes the session; a session
// ends SessionTTL after sign-in. Every POST, the sign-in's too, carries a
// CSRF token (the session's, or the sign-in form's, bound to a cookie of
// its own) and is refused when the browser says it came from another
// origin.

const (
	sessionCookie = "ctxproxy_session"
	loginCookie   = "ctxproxy_login"
	// legacyCookie held the token itself (base64) before sessions: expired
	// at sign-in and sign-out so it does not linger in a browser.
	legacyCookie = "ctxproxy_console"
)

type sessionKey struct{}

type sess struct {
	who  admin.Principal
	csrf string
}

func session(r *http.Request) (sess, bool) {
	s, ok := r.Context().Value(sessionKey{}).(sess)
	return s, ok
}

// authed lets a signed-in operator through; a POST must also carry the
// session's CSRF token.
func (c *Console) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := c.signedIn(r)
		if errors.Is(err, ErrNoSession) {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
				return
			}
			c.fail(w, r, http.StatusUnauthorized, "Sign in first.")
			return
		}
		if err != nil {
			c.cfg.Log.Error("console session store unavailable", zap.Error(err))
			c.fail(w, r, http.StatusServiceUnavailable, "The console's session store could not be read; try again shortly.")
			return
		}
		if r.Method == http.MethodPost && !sameToken(r.PostFormValue("csrf_token"), s.csrf) {
			c.fail(w, r, http.StatusForbidden, "The form's CSRF token is missing or wrong: reload the page and try again.")
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, s)))
	}
}

// signedIn is the request's session and its principal; ErrNoSession when it
// has none, or one whose token is no longer accepted (the session is then
// deleted).
func (c *Console) signedIn(r *http.Request) (sess, error) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return sess{}, ErrNoSession
	}
	id, ok := sessionID(ck.Value)
	if !ok {
		return sess{}, ErrNoSession
	}
	s, err := c.cfg.Sessions.Get(r.Context(), id, c.cfg.Now())
	if err != nil {
		return sess{}, err
	}
	who, ok := c.cfg.Auth.TokenHash(s.TokenSHA256)
	if !ok {
		if err := c.cfg.Sessions.Delete(r.Context(), id); err != nil {
			c.cfg.Log.Error("console session of a revoked token not deleted", zap.Error(err))
		}
		return sess{}, ErrNoSession
	}
	return sess{who: who, csrf: s.CSRF}, nil
}

// tenant is authed, for a page about the {tenant} in the path: the tenant
// must exist, and a tenant operator sees only its own.
func (c *Console) tenant(h http.HandlerFunc) http.HandlerFunc {
	return c.authed(func(w http.ResponseWriter, r *http.Request) {
		s, _ := session(r)
		t := r.PathValue("tenant")
		if !s.who.May(t) {
			c.fail(w, r, http.StatusForbidden, "This token may only see its own tenant.")
			return
		}
		if c.cfg.Policies.Current().Tenant(t) == nil {
			c.fail(w, r, http.StatusNotFound, "No tenant "+t+".")
			return
		}
		h(w, r)
	})
}

// loginForm shows the sign-in form with its CSRF token, which a cookie of
// the form's own must match when it is posted: a page on another site can
// neither read the token nor send the cookie (SameSite=Strict).
func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "login", http.StatusOK, page{Title: "Sign in", CSRF: c.loginToken(w, r)})
}

// loginToken is the sign-in form's CSRF token: the browser's, or a new one
// set in its cookie.
func (c *Console) loginToken(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(loginCookie); err == nil && len(ck.Value) == 64 {
		return ck.Value
	}
	tok := randomToken()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: tok, Path: Prefix + "login", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: c.overTLS(r), MaxAge: int(SessionTTL.Seconds())})
	return tok
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	ck, err := r.Cookie(loginCookie)
	if err != nil || !sameToken(r.PostFormValue("csrf_token"), ck.Value) {
		c.render(w, r, "login", http.StatusForbidden, page{Title: "Sign in", CSRF: c.loginToken(w, r),
			Data: "This sign-in did not come from this console's own form (or the form expired): sign in here."})
		return
	}
	tok := r.PostFormValue("token")
	if _, ok := c.cfg.Auth.Token(tok); !ok {
		c.render(w, r, "login", http.StatusUnauthorized, page{Title: "Sign in", CSRF: ck.Value,
			Data: "That token is not an admin or operator token."})
		return
	}
	value, id := newSessionID()
	s := Session{TokenSHA256: sha256.Sum256([]byte(tok)), CSRF: randomToken(), Expires: c.cfg.Now().Add(SessionTTL)}
	if err := c.cfg.Sessions.Create(r.Context(), id, s); err != nil {
		c.cfg.Log.Error("console session not created", zap.Error(err))
		c.render(w, r, "login", http.StatusServiceUnavailable, page{Title: "Sign in", CSRF: ck.Value,
			Data: "The console's session store could not be written; try again shortly."})
		return
	}
	secure := c.overTLS(r)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: value, Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure, MaxAge: int(SessionTTL.Seconds())})
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Path: Prefix + "login", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure})
	http.SetCookie(w, &http.Cookie{Name: legacyCookie, Path: Prefix, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure})
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// logout ends the session on the server, not only in the browser.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		if id, ok := sessionID(ck.Value); ok {
			if err := c.cfg.Sessions.Delete(r.Context(), id); err != nil {
				c.cfg.Log.Error("console session not deleted at sign-out", zap.Error(err))
				c.fail(w, r, http.StatusServiceUnavailable, "The session could not be ended; try again shortly.")
				return
			}
		}
	}
	secure := c.overTLS(r)
	for _, name := range []string{sessionCookie, legacyCookie} {
		http.SetCookie(w, &http.Cookie{Name: name, Path: Prefix, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure})
	}
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

// overTLS says whether the browser's connection is TLS: to this process, or
// to a front proxy the operator trusts (Config.TrustedProxies), which says
// so in X-Forwarded-Proto. From any other peer the header is ignored: a
// client could send it.
func (c *Console) overTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if len(c.cfg.TrustedProxies) == 0 {
		return false
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !trusted(c.cfg.TrustedProxies, peer.Addr().Unmap()) {
		return false
	}
	// The first value is the one the proxy nearest the browser set.
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(proto), "https")
}

func trusted(nets []netip.Prefix, ip netip.Addr) bool {
	for _, n := range nets {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

func sameToken(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
