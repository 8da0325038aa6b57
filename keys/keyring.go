package keys

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/apikey"
)

// CacheTTL is how long a replica trusts what it read about a key. A
// revocation made on another replica takes effect here within this time
// (the README promises 5 seconds); one made here takes effect at once.
const CacheTTL = 2 * time.Second

// cacheMax bounds the cache: a flood of made-up keys cannot grow it.
const cacheMax = 10000

// touchEvery is how often last_used_at reaches the store.
const touchEvery = 5 * time.Second

// Keyring is the keys of a store, as the proxy and the operator API use them.
type Keyring struct {
	store Store
	now   func() time.Time

	mu      sync.Mutex
	cache   map[[32]byte]cached
	touched map[string]time.Time // id → last use not yet in the store
}

type cached struct {
	key     Key
	found   bool
	fetched time.Time
}

// NewKeyring serves the keys of store.
func NewKeyring(store Store) *Keyring {
	return &Keyring{store: store, now: time.Now, cache: map[[32]byte]cached{}, touched: map[string]time.Time{}}
}

// Verify checks a presented ctxproxy key: the key, or ErrUnknown,
// ErrRevoked, ErrExpired, or a store error (wrapped) when the store cannot
// say. Expiry is checked against the clock on every call.
func (kr *Keyring) Verify(ctx context.Context, secret string) (Key, error) {
	h := apikey.Hash(secret)
	now := kr.now()
	kr.mu.Lock()
	c, ok := kr.cache[h]
	kr.mu.Unlock()
	if !ok || now.Sub(c.fetched) >= CacheTTL || now.Before(c.fetched) {
		k, err := kr.store.ByHash(ctx, h)
		switch {
		case errors.Is(err, ErrNotFound):
			c = cached{fetched: now}
		case err != nil:
			return Key{}, fmt.Errorf("key store: %w", err)
		default:
			c = cached{key: k, found: true, fetched: now}
		}
		kr.remember(h, c)
	}
	if !c.found {
		return Key{}, ErrUnknown
	}
	if err := c.key.State(now); err != nil {
		return Key{}, err
	}
	kr.mu.Lock()
	kr.touched[c.key.ID] = now
	kr.mu.Unlock()
	return c.key, nil
}

func (kr *Keyring) remember(h [32]byte, c cached) {
	kr.mu.Lock()
	defer kr.mu.Unlock()
	if len(kr.cache) >= cacheMax {
		clear(kr.cache)
	}
	kr.cache[h] = c
}

// forget drops what this replica cached about k: its own changes apply at once.
func (kr *Keyring) forget(k Key) {
	kr.mu.Lock()
	delete(kr.cache, k.Hash)
	kr.mu.Unlock()
}

// Spec is what an operator gives for a new key.
type Spec struct {
	Tenant, Name, User string
	ExpiresAt          time.Time // zero: never
}

// Create mints a key: the stored key and its secret, which is never kept.
func (kr *Keyring) Create(ctx context.Context, s Spec) (Key, string, error) {
	secret, err := newSecret()
	if err != nil {
		return Key{}, "", err
	}
	id, err := newID()
	if err != nil {
		return Key{}, "", err
	}
	// Microseconds: what PostgreSQL keeps, so both stores answer the same times.
	k := Key{ID: id, Tenant: s.Tenant, Name: s.Name, User: s.User, Hash: apikey.Hash(secret),
		CreatedAt: kr.now().UTC().Truncate(time.Microsecond), ExpiresAt: s.ExpiresAt.UTC().Truncate(time.Microsecond)}
	if err := kr.store.Insert(ctx, k); err != nil {
		return Key{}, "", fmt.Errorf("store new key: %w", err)
	}
	return k, secret, nil
}

// List returns the tenant's keys ("" for every tenant's).
func (kr *Keyring) List(ctx context.Context, tenant string) ([]Key, error) {
	return kr.store.List(ctx, tenant)
}

// Get returns the key with id, or ErrNotFound.
func (kr *Keyring) Get(ctx context.Context, id string) (Key, error) {
	return kr.store.Get(ctx, id)
}

// Revoke revokes the key with id now.
func (kr *Keyring) Revoke(ctx context.Context, id string) (Key, error) {
	k, err := kr.store.Revoke(ctx, id, kr.now().UTC().Truncate(time.Microsecond))
	if err != nil {
		return Key{}, err
	}
	kr.forget(k)
	return k, nil
}

// Rotate mints a key with the attributes of the key with id; the old key
// keeps working for grace (0: it is revoked at once).
func (kr *Keyring) Rotate(ctx context.Context, id string, grace time.Duration) (Key, string, error) {
	old, err := kr.store.Get(ctx, id)
	if err != nil {
		return Key{}, "", err
	}
	if err := old.State(kr.now()); err != nil {
		return Key{}, "", fmt.Errorf("rotate %s: %w", id, err)
	}
	k, secret, err := kr.Create(ctx, Spec{Tenant: old.Tenant, Name: old.Name, User: old.User, ExpiresAt: old.ExpiresAt})
	if err != nil {
		return Key{}, "", err
	}
	if grace <= 0 {
		_, err = kr.Revoke(ctx, id)
	} else {
		old, err = kr.store.Expire(ctx, id, kr.now().Add(grace).UTC().Truncate(time.Microsecond))
		kr.forget(old)
	}
	if err != nil {
		return Key{}, "", fmt.Errorf("rotate %s: retire the old key: %w", id, err)
	}
	return k, secret, nil
}

// Run writes last-use times to the store until ctx ends, then once more.
func (kr *Keyring) Run(ctx context.Context) {
	t := time.NewTicker(touchEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			kr.Flush(ctx)
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			kr.Flush(fctx)
			cancel()
			return
		}
	}
}

// Flush writes the last-use times gathered since the last flush. A failed
// write is retried at the next flush.
func (kr *Keyring) Flush(ctx context.Context) error {
	kr.mu.Lock()
	used := kr.touched
	if len(used) == 0 {
		kr.mu.Unlock()
		return nil
	}
	kr.touched = map[string]time.Time{}
	kr.mu.Unlock()
	if err := kr.store.Touch(ctx, used); err != nil {
		kr.mu.Lock()
		for id, t := range used {
			if t.After(kr.touched[id]) {
				kr.touched[id] = t
			}
		}
		kr.mu.Unlock()
		return fmt.Errorf("record key use: %w", err)
	}
	return nil
}
