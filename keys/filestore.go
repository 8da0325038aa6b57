package keys

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// FileName is the file store's file in the data folder.
const FileName = "keys.json"

// FileStore keeps keys in one JSON file, for a single process: every change
// rewrites the file atomically (temp file, fsync, rename).
type FileStore struct {
	path string

	mu     sync.Mutex
	keys   []Key // oldest first
	byHash map[[32]byte]int
}

// fileKey is a key as the file holds it.
type fileKey struct {
	ID         string     `json:"id"`
	Tenant     string     `json:"tenant"`
	Name       string     `json:"name"`
	User       string     `json:"user,omitempty"`
	SHA256     string     `json:"sha256"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

type fileDoc struct {
	Keys []fileKey `json:"keys"`
}

// OpenFileStore opens dir/keys.json, creating dir; a missing file is no keys.
func OpenFileStore(dir string) (*FileStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open key file store: %w", err)
	}
	s := &FileStore{path: filepath.Join(dir, FileName), byHash: map[[32]byte]int{}}
	b, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open key file store: %w", err)
	}
	var doc fileDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("open key file store %s: %w", FileName, err)
	}
	for _, fk := range doc.Keys {
		k, err := fk.key()
		if err != nil {
			return nil, fmt.Errorf("open key file store %s: key %s: %w", FileName, fk.ID, err)
		}
		s.byHash[k.Hash] = len(s.keys)
		s.keys = append(s.keys, k)
	}
	return s, nil
}

func (fk fileKey) key() (Key, error) {
	k := Key{ID: fk.ID, Tenant: fk.Tenant, Name: fk.Name, User: fk.User, CreatedAt: fk.CreatedAt}
	if n, err := hex.Decode(k.Hash[:], []byte(fk.SHA256)); err != nil || n != 32 {
		return Key{}, errors.New("sha256 is not 64 hex digits")
	}
	for _, f := range []struct {
		from *time.Time
		to   *time.Time
	}{{fk.ExpiresAt, &k.ExpiresAt}, {fk.RevokedAt, &k.RevokedAt}, {fk.LastUsedAt, &k.LastUsedAt}} {
		if f.from != nil {
			*f.to = *f.from
		}
	}
	return k, nil
}

func toFile(k Key) fileKey {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	return fileKey{ID: k.ID, Tenant: k.Tenant, Name: k.Name, User: k.User, SHA256: hex.EncodeToString(k.Hash[:]),
		CreatedAt: k.CreatedAt, ExpiresAt: opt(k.ExpiresAt), RevokedAt: opt(k.RevokedAt), LastUsedAt: opt(k.LastUsedAt)}
}

// save writes every key; s.mu is held.
func (s *FileStore) save() error {
	doc := fileDoc{Keys: make([]fileKey, len(s.keys))}
	for i, k := range s.keys {
		doc.Keys[i] = toFile(k)
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("save keys: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), ".keys-*.tmp")
	if err != nil {
		return fmt.Errorf("save keys: %w", err)
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // gone after the rename
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("save keys: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("save keys: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save keys: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("save keys: %w", err)
	}
	return nil
}

// change applies fn to the key with id and saves; the key as changed.
func (s *FileStore) change(id string, fn func(*Key)) (Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.keys {
		if s.keys[i].ID == id {
			before := s.keys[i]
			fn(&s.keys[i])
			if err := s.save(); err != nil {
				s.keys[i] = before
				return Key{}, err
			}
			return s.keys[i], nil
		}
	}
	return Key{}, ErrNotFound
}

func (s *FileStore) Insert(_ context.Context, k Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.byHash[k.Hash]; dup {
		return errors.New("insert key: a key with this hash exists")
	}
	s.keys = append(s.keys, k)
	if err := s.save(); err != nil {
		s.keys = s.keys[:len(s.keys)-1]
		return err
	}
	s.byHash[k.Hash] = len(s.keys) - 1
	return nil
}

func (s *FileStore) List(_ context.Context, tenant string) ([]Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Key{}
	for _, k := range s.keys {
		if tenant == "" || k.Tenant == tenant {
			out = append(out, k)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

func (s *FileStore) Get(_ context.Context, id string) (Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.keys {
		if k.ID == id {
			return k, nil
		}
	}
	return Key{}, ErrNotFound
}

func (s *FileStore) ByHash(_ context.Context, h [32]byte) (Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.byHash[h]; ok {
		return s.keys[i], nil
	}
	return Key{}, ErrNotFound
}

func (s *FileStore) Revoke(_ context.Context, id string, at time.Time) (Key, error) {
	return s.change(id, func(k *Key) {
		if k.RevokedAt.IsZero() {
			k.RevokedAt = at
		}
	})
}

func (s *FileStore) Expire(_ context.Context, id string, at time.Time) (Key, error) {
	return s.change(id, func(k *Key) {
		if k.ExpiresAt.IsZero() || at.Before(k.ExpiresAt) {
			k.ExpiresAt = at
		}
	})
}

func (s *FileStore) Touch(_ context.Context, used map[string]time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for i := range s.keys {
		if t, ok := used[s.keys[i].ID]; ok && t.After(s.keys[i].LastUsedAt) {
			s.keys[i].LastUsedAt = t.UTC().Truncate(time.Microsecond)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return s.save()
}

func (s *FileStore) Close() error { return nil }
