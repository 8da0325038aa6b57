// Package keys mints, stores and checks ctxproxy's own API keys (sk-ctx-…):
// keys a platform team hands to people and jobs instead of the tenant's
// Anthropic key, which ctxproxy holds. A key is stored only as its sha256 and
// shown once, when minted. Stores (a file for one process, PostgreSQL for a
// fleet) know no HTTP; the operator API is package admin's.
package keys

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/apikey"
)

// Prefix starts every ctxproxy key, so secret scanners can be told it.
const Prefix = "sk-ctx-"

// secretChars is base62: a key selects whole with a double click.
const secretChars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// secretLen base62 characters carry 44×log2(62) ≈ 262 random bits: more than
// the 32 random bytes a key must have.
const secretLen = 44

// Why a presented key is refused. The messages are what the client reads.
var (
	ErrUnknown = errors.New("unknown ctxproxy key")
	ErrRevoked = errors.New("this ctxproxy key has been revoked")
	ErrExpired = errors.New("this ctxproxy key has expired")
	// ErrNotFound is an operator's id that names no key.
	ErrNotFound = errors.New("no such key")
)

// Key is one ctxproxy key, without its secret.
type Key struct {
	ID         string
	Tenant     string
	Name       string
	User       string // who holds it ("" if not said); reports group by it
	Hash       [32]byte
	CreatedAt  time.Time
	ExpiresAt  time.Time // zero: never
	RevokedAt  time.Time // zero: live
	LastUsedAt time.Time // zero: never used; reaches the store every few seconds, not per request
}

// KeyID is the first 8 hex digits of the key's sha256: the form logs, the
// ledger and spend caps use for any key.
func (k *Key) KeyID() string { return apikey.ID(k.Hash) }

// State says whether k is usable at now: nil, ErrRevoked or ErrExpired.
func (k *Key) State(now time.Time) error {
	switch {
	case !k.RevokedAt.IsZero() && !now.Before(k.RevokedAt):
		return ErrRevoked
	case !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt):
		return ErrExpired
	}
	return nil
}

// IsKey says whether a presented credential is shaped as a ctxproxy key.
func IsKey(s string) bool { return strings.HasPrefix(s, Prefix) }

// newSecret is Prefix and secretLen random base62 characters.
func newSecret() (string, error) {
	b := make([]byte, 0, len(Prefix)+secretLen)
	b = append(b, Prefix...)
	var buf [64]byte
	for len(b) < cap(b) {
		if _, err := rand.Read(buf[:]); err != nil {
			return "", fmt.Errorf("mint key: %w", err)
		}
		for _, c := range buf {
			// 248 = 4×62: rejecting the rest keeps every character equally likely.
			if c < 248 && len(b) < cap(b) {
				b = append(b, secretChars[c%62])
			}
		}
	}
	return string(b), nil
}

// newID is an operator-facing id: key_ and 16 random base62 characters.
func newID() (string, error) {
	s, err := newSecret()
	if err != nil {
		return "", err
	}
	return "key_" + s[len(Prefix):len(Prefix)+16], nil
}

// Store keeps keys. Implementations are safe for concurrent use.
type Store interface {
	// Insert adds k (its ID and Hash are new).
	Insert(ctx context.Context, k Key) error
	// List returns the tenant's keys ("" for all), oldest first.
	List(ctx context.Context, tenant string) ([]Key, error)
	// Get returns the key with id, or ErrNotFound.
	Get(ctx context.Context, id string) (Key, error)
	// ByHash returns the key whose secret hashes to h, or ErrNotFound.
	ByHash(ctx context.Context, h [32]byte) (Key, error)
	// Revoke sets revoked_at to at unless the key is revoked already, and
	// returns the key; ErrNotFound if there is none.
	Revoke(ctx context.Context, id string, at time.Time) (Key, error)
	// Expire moves expires_at to at if the key would otherwise live longer.
	Expire(ctx context.Context, id string, at time.Time) (Key, error)
	// Touch records when keys were last used (id → time).
	Touch(ctx context.Context, used map[string]time.Time) error
	Close() error
}
