// Package admin is ctxproxy's operator API under /admin: who may call it
// (the admin token for every tenant, a tenant's operator token for its own)
// and the routes (/admin/report, /admin/keys). What the routes act on lives
// in the packages that own it (tokens and limits for the report, keys for
// the keys); this package only speaks HTTP. PolicyAuth reads the operator
// tokens from the tenants' policies (by sha256), so a reload changes them.
// The console and the memory operator API (package memapi) authorise
// through the same Auth.
package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"

	"github.com/ctxproxy/ctxproxy/internal/apikey"
	"github.com/ctxproxy/ctxproxy/policy"
)

// Principal is who an operator request comes from.
type Principal struct {
	Tenant string // "" : every tenant (the admin token)
	Name   string // for audit: "admin", or the operator token's name
}

// May says whether p may act on tenant's resources.
func (p Principal) May(tenant string) bool { return p.Tenant == "" || p.Tenant == tenant }

// Auth authorises operator requests.
type Auth struct {
	// AdminToken may do everything; "" disables it.
	AdminToken string
	// Operator finds a tenant's operator token by its sha256 (as the
	// tenant's policy lists it); nil when there are none.
	Operator func(tokenSHA256 [32]byte) (Principal, bool)
	// HasOperators says whether any operator token exists now (policies
	// reload); nil means Operator alone decides.
	HasOperators func() bool
}

// enabled says whether any token can authorise: without one, /admin answers
// 404, so no endpoint is ever open by omission.
func (a Auth) enabled() bool {
	if a.AdminToken != "" {
		return true
	}
	return a.Operator != nil && (a.HasOperators == nil || a.HasOperators())
}

// Authorize finds the principal of r from its token, read as every
// credential is (apikey.From: x-api-key, so an SDK given the token as its
// API key works, then Authorization: Bearer, then x-admin-token).
func (a Auth) Authorize(r *http.Request) (Principal, bool) {
	return a.Token(apikey.From(r.Header))
}

// Enabled says whether any token can authorise (see enabled).
func (a Auth) Enabled() bool { return a.enabled() }

// Token finds the principal a token stands for (the console's login form
// sends it in a body, not a header).
func (a Auth) Token(tok string) (Principal, bool) {
	if tok == "" {
		return Principal{}, false
	}
	return a.TokenHash(apikey.Hash(tok))
}

// TokenHash finds the principal of the token whose sha256 is h: what a
// console session keeps of the token it was opened with, so each request
// finds its principal again and a token no longer accepted ends it.
func (a Auth) TokenHash(h [32]byte) (Principal, bool) {
	if a.AdminToken != "" {
		want := sha256.Sum256([]byte(a.AdminToken))
		if subtle.ConstantTimeCompare(h[:], want[:]) == 1 {
			return Principal{Name: "admin"}, true
		}
	}
	if a.Operator != nil {
		return a.Operator(h)
	}
	return Principal{}, false
}

// PolicyAuth is the authorisation of every operator surface (/admin, the
// console, /v1/memory_stores): adminToken for every tenant ("" for none),
// or a token listed by its sha256 in a tenant's operator_tokens_sha256 for
// that tenant only, as the policies in force say.
func PolicyAuth(adminToken string, pols *policy.Store) Auth {
	return Auth{AdminToken: adminToken, Operator: func(h [32]byte) (Principal, bool) {
		p, name, ok := pols.Current().OperatorTokenHash(h)
		if !ok {
			return Principal{}, false
		}
		return Principal{Tenant: p.Tenant, Name: name}, true
	}, HasOperators: func() bool {
		for _, p := range pols.Current().Tenants() {
			if len(p.OperatorTokens) > 0 {
				return true
			}
		}
		return false
	}}
}
