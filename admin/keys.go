package admin

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/keys"
)

// keyAPI serves /admin/keys.
type keyAPI struct {
	ring   *keys.Keyring
	tenant func(string) (exists, ownKey bool)
	log    *zap.Logger
}

// KeyJSON is a key as the operator API shows it. Key (the secret) is set
// only in the reply that minted it.
type KeyJSON struct {
	ID         string     `json:"id"`
	Key        string     `json:"key,omitempty"`
	KeyID      string     `json:"key_id"`
	Tenant     string     `json:"tenant"`
	Name       string     `json:"name"`
	User       string     `json:"user"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
}

// KeyList is the reply of GET /admin/keys.
type KeyList struct {
	Data []KeyJSON `json:"data"`
}

func keyJSON(k keys.Key, secret string) KeyJSON {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	return KeyJSON{ID: k.ID, Key: secret, KeyID: k.KeyID(), Tenant: k.Tenant, Name: k.Name, User: k.User,
		CreatedAt: k.CreatedAt.UTC(), ExpiresAt: opt(k.ExpiresAt), LastUsedAt: opt(k.LastUsedAt), RevokedAt: opt(k.RevokedAt)}
}

// CreateRequest is the body of POST /admin/keys.
type CreateRequest struct {
	Tenant    string `json:"tenant"`
	Name      string `json:"name"`
	User      string `json:"user,omitempty"`
	ExpiresAt string `json:"expires_at,omitempty"` // RFC 3339
}

// RotateRequest is the body of POST /admin/keys/{id}/rotate (optional).
type RotateRequest struct {
	Grace string `json:"grace,omitempty"` // how long the old key keeps working, e.g. "24h"; default 0
}

const maxLabel = 200 // bytes of a name or user

// decode reads a small JSON body into v, refusing unknown fields.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "request body: "+err.Error())
		return false
	}
	return true
}

func (a *keyAPI) create(w http.ResponseWriter, r *http.Request) {
	var req CreateRequest
	if !decode(w, r, &req) {
		return
	}
	spec, msg := a.spec(r, req)
	if msg == errOtherTenant {
		apierr.Write(w, http.StatusForbidden, "permission_error", msg)
		return
	}
	if msg != "" {
		apierr.Write(w, http.StatusBadRequest, "invalid_request_error", msg)
		return
	}
	k, secret, err := a.ring.Create(r.Context(), spec)
	if err != nil {
		a.storeFailed(w, "create", spec.Tenant, err)
		return
	}
	a.log.Info("key created", zap.String("tenant", k.Tenant), zap.String("key_id", k.KeyID()), zap.String("id", k.ID),
		zap.String("by", principal(r).Name))
	writeJSON(w, http.StatusCreated, keyJSON(k, secret))
}

const errOtherTenant = "this token may only manage its own tenant's keys"

// spec checks a create request; msg says what is wrong.
func (a *keyAPI) spec(r *http.Request, req CreateRequest) (spec keys.Spec, msg string) {
	spec = keys.Spec{Tenant: req.Tenant, Name: strings.TrimSpace(req.Name), User: strings.TrimSpace(req.User)}
	switch {
	case req.Tenant == "":
		return spec, "tenant is required"
	case !principal(r).May(req.Tenant):
		return spec, errOtherTenant
	case spec.Name == "":
		return spec, "name is required"
	case len(spec.Name) > maxLabel || len(spec.User) > maxLabel:
		return spec, "name and user are at most 200 bytes"
	case !utf8.ValidString(spec.Name) || !utf8.ValidString(spec.User):
		return spec, "name and user must be UTF-8"
	}
	exists, own := a.tenant(req.Tenant)
	if !exists {
		return spec, "no tenant " + req.Tenant + " in the policies"
	}
	if !own {
		return spec, "tenant " + req.Tenant + " has no Anthropic key of its own (upstream.api_key_env or upstream.api_key_file): " +
			"ctxproxy keys work only for a tenant whose key ctxproxy holds"
	}
	if req.ExpiresAt != "" {
		t, err := time.Parse(time.RFC3339Nano, req.ExpiresAt)
		if err != nil {
			return spec, "expires_at must be an RFC 3339 time such as 2027-01-31T00:00:00Z"
		}
		if !t.After(time.Now()) {
			return spec, "expires_at is in the past"
		}
		spec.ExpiresAt = t
	}
	return spec, ""
}

func (a *keyAPI) list(w http.ResponseWriter, r *http.Request) {
	tenant := r.URL.Query().Get("tenant")
	p := principal(r)
	if tenant == "" {
		tenant = p.Tenant
	}
	if !p.May(tenant) {
		apierr.Write(w, http.StatusForbidden, "permission_error", errOtherTenant)
		return
	}
	ks, err := a.ring.List(r.Context(), tenant)
	if err != nil {
		a.storeFailed(w, "list", tenant, err)
		return
	}
	out := KeyList{Data: make([]KeyJSON, len(ks))}
	for i, k := range ks {
		out.Data[i] = keyJSON(k, "")
	}
	writeJSON(w, http.StatusOK, out)
}

// target finds the key of a /admin/keys/{id}/… call that the caller may
// manage; ?tenant=T, when given, must be the key's tenant. It answers the
// client itself when it returns false.
func (a *keyAPI) target(w http.ResponseWriter, r *http.Request) (keys.Key, bool) {
	id := r.PathValue("id")
	k, err := a.ring.Get(r.Context(), id)
	want := r.URL.Query().Get("tenant")
	switch {
	case errors.Is(err, keys.ErrNotFound), err == nil && want != "" && k.Tenant != want:
		apierr.Write(w, http.StatusNotFound, "not_found_error", "no key "+id)
		return keys.Key{}, false
	case err != nil:
		a.storeFailed(w, "read", "", err)
		return keys.Key{}, false
	case !principal(r).May(k.Tenant):
		apierr.Write(w, http.StatusNotFound, "not_found_error", "no key "+id)
		return keys.Key{}, false
	}
	return k, true
}

func (a *keyAPI) revoke(w http.ResponseWriter, r *http.Request) {
	k, ok := a.target(w, r)
	if !ok {
		return
	}
	k, err := a.ring.Revoke(r.Context(), k.ID)
	if err != nil {
		a.storeFailed(w, "revoke", k.Tenant, err)
		return
	}
	a.log.Info("key revoked", zap.String("tenant", k.Tenant), zap.String("key_id", k.KeyID()), zap.String("id", k.ID),
		zap.String("by", principal(r).Name))
	writeJSON(w, http.StatusOK, keyJSON(k, ""))
}

func (a *keyAPI) rotate(w http.ResponseWriter, r *http.Request) {
	var req RotateRequest
	if !decode(w, r, &req) {
		return
	}
	var grace time.Duration
	if req.Grace != "" {
		var err error
		if grace, err = time.ParseDuration(req.Grace); err != nil || grace < 0 {
			apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "grace must be a duration such as 0s, 30m or 24h")
			return
		}
	}
	old, ok := a.target(w, r)
	if !ok {
		return
	}
	k, secret, err := a.ring.Rotate(r.Context(), old.ID, grace)
	if errors.Is(err, keys.ErrRevoked) || errors.Is(err, keys.ErrExpired) {
		apierr.Write(w, http.StatusConflict, "invalid_request_error", "key "+old.ID+" cannot be rotated: "+err.Error())
		return
	}
	if err != nil {
		a.storeFailed(w, "rotate", old.Tenant, err)
		return
	}
	a.log.Info("key rotated", zap.String("tenant", k.Tenant), zap.String("old_key_id", old.KeyID()), zap.String("key_id", k.KeyID()),
		zap.String("id", k.ID), zap.Duration("grace", grace), zap.String("by", principal(r).Name))
	writeJSON(w, http.StatusCreated, keyJSON(k, secret))
}

func (a *keyAPI) storeFailed(w http.ResponseWriter, op, tenant string, err error) {
	a.log.Error("key store failed", zap.String("op", op), zap.String("tenant", tenant), zap.Error(err))
	apierr.Write(w, http.StatusServiceUnavailable, "api_error", "the key store is unavailable")
}
