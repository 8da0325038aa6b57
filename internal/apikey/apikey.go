// Package apikey reads a request's credential and names a key without
// showing it: the one place for the headers a key may come in, its sha256
// (the form policies and the key store keep) and its key id (the most of a
// key that may be logged, shown or put in a memory store's name).
package apikey

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// From is the request's credential, as the SDKs and operators send it:
// x-api-key (an SDK's apiKey), else an "Authorization: Bearer" token (an
// SDK's authToken, an operator's CLI), else x-admin-token; "" for none.
func From(h http.Header) string {
	if k := h.Get("X-Api-Key"); k != "" {
		return k
	}
	if a := h.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return h.Get("X-Admin-Token")
}

// Hash is the sha256 of a key or token.
func Hash(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

// ID is the key id of the key whose sha256 is h: its first 8 hex digits.
func ID(h [32]byte) string { return hex.EncodeToString(h[:4]) }

// IDOf is the key id of secret; "" for no key.
func IDOf(secret string) string {
	if secret == "" {
		return ""
	}
	return ID(Hash(secret))
}

// IsID says whether s has a key id's shape: 8 lowercase hex digits.
func IsID(s string) bool {
	if len(s) != 8 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
