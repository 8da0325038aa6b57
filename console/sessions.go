package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"sync"
	"time"
)

// SessionTTL is how long a console session lasts from sign-in.
const SessionTTL = 12 * time.Hour

// Session is a signed-in operator's console session, as the server keeps
// it. It holds no credential: the cookie carries a random id, the store
// knows only that id's sha256, and the token the operator signed in with is
// kept as its sha256, by which every request finds the principal again (a
// token removed from the policies, or an admin token changed, ends the
// session at its next request).
type Session struct {
	TokenSHA256 [32]byte
	CSRF        string // the token every form of the session carries
	Expires     time.Time
}

// ErrNoSession is a session id the store does not know, or whose session
// expired.
var ErrNoSession = errors.New("no such console session")

// Sessions keeps console sessions server-side, by the sha256 of their id.
// With several replicas the store must be shared (PostgreSQL), so any
// replica serves the next page.
type Sessions interface {
	Create(ctx context.Context, idSHA256 [32]byte, s Session) error
	// Get answers ErrNoSession for an unknown id or a session expired at now.
	Get(ctx context.Context, idSHA256 [32]byte, now time.Time) (Session, error)
	Delete(ctx context.Context, idSHA256 [32]byte) error
}

// MemorySessions keeps sessions in this process: for a single replica.
type MemorySessions struct {
	mu sync.Mutex
	m  map[[32]byte]Session
}

// NewMemorySessions is an empty in-process session store.
func NewMemorySessions() *MemorySessions { return &MemorySessions{m: map[[32]byte]Session{}} }

// Create keeps s, and forgets the sessions that expired (sign-ins are rare:
// the sweep keeps the map to the live sessions).
func (m *MemorySessions) Create(_ context.Context, id [32]byte, s Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for k, v := range m.m {
		if !now.Before(v.Expires) {
			delete(m.m, k)
		}
	}
	m.m[id] = s
	return nil
}

func (m *MemorySessions) Get(_ context.Context, id [32]byte, now time.Time) (Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[id]
	if !ok || !now.Before(s.Expires) {
		return Session{}, ErrNoSession
	}
	return s, nil
}

func (m *MemorySessions) Delete(_ context.Context, id [32]byte) error {
	m.mu.Lock()
	delete(m.m, id)
	m.mu.Unlock()
	return nil
}

// newSessionID is a session's cookie value and the sha256 the store keys it
// by.
func newSessionID() (cookie string, id [32]byte) {
	b := randomBytes()
	return base64.RawURLEncoding.EncodeToString(b), sha256.Sum256(b)
}

// sessionID is the store's key for a cookie value; false for a value no
// session id could be.
func sessionID(cookie string) ([32]byte, bool) {
	b, err := base64.RawURLEncoding.DecodeString(cookie)
	if err != nil || len(b) != 32 {
		return [32]byte{}, false
	}
	return sha256.Sum256(b), true
}

// randomToken is 32 random bytes in hex: a CSRF token.
func randomToken() string { return hex.EncodeToString(randomBytes()) }

func randomBytes() []byte {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	return b
}
