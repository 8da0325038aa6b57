package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net/http"

	"github.com/ctxproxy/ctxproxy/admin"
)

// Sign-in: the operator types the token /admin takes; the console keeps it
// in an HttpOnly, SameSite=Strict cookie scoped to the console's path and
// checks it on every request like /admin does, so a revoked operator token
// (a policy reload) locks its holder out at once and any replica can serve
// the next page. Forms carry a CSRF token derived from the session token
// (an HMAC, so it reveals nothing of it).

const cookieName = "ctxproxy_console"

type sessionKey struct{}

type sess struct {
	who  admin.Principal
	csrf string
}

func session(r *http.Request) (sess, bool) {
	s, ok := r.Context().Value(sessionKey{}).(sess)
	return s, ok
}

func csrfFor(token string) string {
	k := sha256.Sum256([]byte(token))
	m := hmac.New(sha256.New, k[:])
	m.Write([]byte("ctxproxy console csrf"))
	return hex.EncodeToString(m.Sum(nil))
}

// authed lets a signed-in operator through; a POST must also carry the
// session's CSRF token.
func (c *Console) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok := ""
		if ck, err := r.Cookie(cookieName); err == nil {
			if b, err := base64.RawURLEncoding.DecodeString(ck.Value); err == nil {
				tok = string(b)
			}
		}
		who, ok := c.cfg.Auth.Token(tok)
		if !ok {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
				return
			}
			c.fail(w, r, http.StatusUnauthorized, "Sign in first.")
			return
		}
		s := sess{who: who, csrf: csrfFor(tok)}
		if r.Method == http.MethodPost {
			got := r.PostFormValue("csrf_token")
			if subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) != 1 {
				c.fail(w, r, http.StatusForbidden, "The form's CSRF token is missing or wrong: reload the page and try again.")
				return
			}
		}
		h(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, s)))
	}
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

func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "login", http.StatusOK, page{Title: "Sign in"})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	tok := r.PostFormValue("token")
	if _, ok := c.cfg.Auth.Token(tok); !ok {
		c.render(w, r, "login", http.StatusUnauthorized, page{Title: "Sign in", Data: "That token is not an admin or operator token."})
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: base64.RawURLEncoding.EncodeToString([]byte(tok)),
		Path: Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
		MaxAge: 12 * 3600,
	})
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}
