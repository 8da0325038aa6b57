package keys

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/apikey"
	"github.com/ctxproxy/ctxproxy/internal/pgtest"
)

// clock is a settable time for keyrings under test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClock() *clock { return &clock{t: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)} }

func ring(s Store, c *clock) *Keyring {
	kr := NewKeyring(s)
	kr.now = c.now
	return kr
}

func TestMintedKeys(t *testing.T) {
	seen := map[string]bool{}
	shape := regexp.MustCompile(`^sk-ctx-[0-9A-Za-z]{44}$`)
	for range 200 {
		s, err := newSecret()
		if err != nil {
			t.Fatal(err)
		}
		if !shape.MatchString(s) || seen[s] {
			t.Fatalf("secret %q: bad shape or repeated", s)
		}
		seen[s] = true
	}
	k := Key{Hash: apikey.Hash("sk-ctx-example")}
	if got := k.KeyID(); len(got) != 8 || !strings.HasPrefix(strings.ToLower(hexOf(apikey.Hash("sk-ctx-example"))), got) {
		t.Fatalf("KeyID = %q", got)
	}
}

func hexOf(h [32]byte) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 64)
	for i, c := range h {
		b[2*i], b[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(b)
}

// Every store passes the same suite.
func TestStores(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		testStore(t, func(t *testing.T) Store {
			s, err := OpenFileStore(dir)
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
	t.Run("postgres", func(t *testing.T) {
		db := pgtest.New(t, "keys_test")
		testStore(t, func(t *testing.T) Store {
			s, err := OpenPGStore(context.Background(), db.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

func testStore(t *testing.T, open func(*testing.T) Store) {
	ctx := context.Background()
	c := newClock()
	kr := ring(open(t), c)
	a, secretA, err := kr.Create(ctx, Spec{Tenant: "acme", Name: "ci", User: "ana"})
	if err != nil {
		t.Fatal(err)
	}
	c.add(time.Second)
	b, secretB, err := kr.Create(ctx, Spec{Tenant: "acme", Name: "laptop", ExpiresAt: c.now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := kr.Create(ctx, Spec{Tenant: "other", Name: "x"}); err != nil {
		t.Fatal(err)
	}

	t.Run("a minted key verifies as itself, and only its hash is kept", func(t *testing.T) {
		k, err := kr.Verify(ctx, secretA)
		if err != nil || k.ID != a.ID || k.Tenant != "acme" || k.User != "ana" || k.Hash != apikey.Hash(secretA) {
			t.Fatalf("Verify = %+v, %v", k, err)
		}
	})
	t.Run("a key the store never saw is unknown", func(t *testing.T) {
		if _, err := kr.Verify(ctx, "sk-ctx-madeup"); !errors.Is(err, ErrUnknown) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("list is per tenant, oldest first, and survives a reopen", func(t *testing.T) {
		for _, kr := range []*Keyring{kr, ring(open(t), c)} {
			ks, err := kr.List(ctx, "acme")
			if err != nil || len(ks) != 2 || ks[0].ID != a.ID || ks[1].ID != b.ID || !ks[1].ExpiresAt.Equal(b.ExpiresAt) {
				t.Fatalf("List = %+v, %v", ks, err)
			}
			if all, _ := kr.List(ctx, ""); len(all) != 3 {
				t.Fatalf("List all = %d keys", len(all))
			}
		}
	})
	t.Run("an expired key is refused as expired", func(t *testing.T) {
		c.add(2 * time.Hour)
		if _, err := kr.Verify(ctx, secretB); !errors.Is(err, ErrExpired) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("revocation applies at once on the replica that made it", func(t *testing.T) {
		other := ring(open(t), c) // a second replica on the same store
		if _, err := other.Verify(ctx, secretA); err != nil {
			t.Fatal(err)
		}
		if _, err := kr.Revoke(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := kr.Verify(ctx, secretA); !errors.Is(err, ErrRevoked) {
			t.Fatalf("err = %v", err)
		}
		t.Run("and on another within the cache time", func(t *testing.T) {
			if _, ok := other.store.(*FileStore); ok {
				t.Skip("the file store is one process's")
			}
			c.add(CacheTTL)
			if _, err := other.Verify(ctx, secretA); !errors.Is(err, ErrRevoked) {
				t.Fatalf("err = %v", err)
			}
		})
	})
	t.Run("rotation mints a key with the same attributes; the old one lives out its grace", func(t *testing.T) {
		old, oldSecret, _ := kr.Create(ctx, Spec{Tenant: "acme", Name: "svc", User: "bot"})
		k, secret, err := kr.Rotate(ctx, old.ID, time.Minute)
		if err != nil || k.ID == old.ID || k.Name != "svc" || k.User != "bot" || k.Tenant != "acme" {
			t.Fatalf("Rotate = %+v, %v", k, err)
		}
		if _, err := kr.Verify(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if _, err := kr.Verify(ctx, oldSecret); err != nil {
			t.Fatalf("old key within its grace: %v", err)
		}
		c.add(time.Minute)
		if _, err := kr.Verify(ctx, oldSecret); !errors.Is(err, ErrExpired) {
			t.Fatalf("old key after its grace: %v", err)
		}
		k2, _, err := kr.Rotate(ctx, k.ID, 0)
		if err != nil || k2.ID == k.ID {
			t.Fatal(err)
		}
		if _, err := kr.Verify(ctx, secret); !errors.Is(err, ErrRevoked) {
			t.Fatalf("rotated with no grace: %v", err)
		}
	})
	t.Run("an unknown id is not found", func(t *testing.T) {
		if _, err := kr.Revoke(ctx, "key_nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("last use reaches the store on flush", func(t *testing.T) {
		k, secret, _ := kr.Create(ctx, Spec{Tenant: "acme", Name: "used"})
		if _, err := kr.Verify(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if err := kr.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := ring(open(t), c).Get(ctx, k.ID)
		if err != nil || !got.LastUsedAt.Equal(c.now()) {
			t.Fatalf("LastUsedAt = %v, %v; want %v", got.LastUsedAt, err, c.now())
		}
	})
}
