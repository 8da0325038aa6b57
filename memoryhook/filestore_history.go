package memoryhook

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"
)

var _ Governed = (*FileStore)(nil)

// Backend is the storage under the store's commands (for operator writes).
func (s *FileStore) Backend() Backend { return s.b }

func (h *fileHistory) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for t, l := range h.logs {
		l.f.Close()
		delete(h.logs, t)
	}
	h.root.Close()
}

// locked runs fn with the tenant's write lock and its loaded log.
func (b *fileBackend) locked(ctx context.Context, tenant string, fn func(r *os.Root, l *tenantLog, u Usage) (Usage, error)) error {
	return b.write(ctx, Scope{Tenant: tenant}, func(r *os.Root, u Usage) (Usage, error) {
		l, err := b.hist.load(ctx, r, tenant, Limits{})
		if err != nil {
			return u, err
		}
		return fn(r, l, u)
	})
}

// log returns the tenant's loaded log for reading.
func (b *fileBackend) log(ctx context.Context, tenant string) (*tenantLog, error) {
	b.hist.mu.Lock()
	l := b.hist.logs[tenant]
	b.hist.mu.Unlock()
	if l != nil {
		return l, nil
	}
	err := b.locked(ctx, tenant, func(_ *os.Root, got *tenantLog, u Usage) (Usage, error) {
		l = got
		return u, nil
	})
	return l, err
}

// Memories implements History.
func (s *FileStore) Memories(ctx context.Context, tenant string) ([]Memory, error) {
	l, err := s.b.log(ctx, tenant)
	if err != nil {
		return nil, err
	}
	l.mu.RLock()
	out := make([]Memory, 0, len(l.live))
	for _, m := range l.live {
		out = append(out, *m)
	}
	l.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// MemoryByID implements History.
func (s *FileStore) MemoryByID(ctx context.Context, tenant, id string) (Memory, error) {
	l, err := s.b.log(ctx, tenant)
	if err != nil {
		return Memory{}, err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if m := l.mems[id]; m != nil {
		return *m, nil
	}
	return Memory{}, ErrNotExist
}

// Versions implements History.
func (s *FileStore) Versions(ctx context.Context, tenant string, q VersionQuery) ([]Version, error) {
	l, err := s.b.log(ctx, tenant)
	if err != nil {
		return nil, err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []Version
	for i := len(l.vers) - 1; i >= 0 && (q.Limit <= 0 || len(out) < q.Limit); i-- {
		fv := l.vers[i]
		if !q.Match(&fv.Version) {
			continue
		}
		v := fv.Version
		if q.Content {
			if v.Content, v.HasContent, err = l.content(fv); err != nil {
				return nil, err
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// Version implements History.
func (s *FileStore) Version(ctx context.Context, tenant, id string, content bool) (Version, error) {
	l, err := s.b.log(ctx, tenant)
	if err != nil {
		return Version{}, err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	fv := l.byID[id]
	if fv == nil {
		return Version{}, ErrNotExist
	}
	v := fv.Version
	if content {
		v.Content, v.HasContent, err = l.content(fv)
	}
	return v, err
}

// Redact implements History.
func (s *FileStore) Redact(ctx context.Context, tenant, id string, by Actor) (Version, error) {
	var out Version
	err := s.b.locked(ctx, tenant, func(_ *os.Root, l *tenantLog, u Usage) (Usage, error) {
		fv := l.byID[id]
		if fv == nil {
			return u, ErrNotExist
		}
		if m := l.mems[fv.MemoryID]; m != nil && m.VersionID == id {
			return u, ErrHeadVersion
		}
		if !fv.RedactedAt.IsZero() {
			out = fv.Version
			return u, nil
		}
		now := time.Now().UTC()
		err := s.b.hist.rewrite(tenant, l, func(*fver) bool { return true }, func(v *logVer) {
			if v.ID == id {
				v.Content, v.Has, v.Path, v.SHA, v.Size = nil, false, "", "", 0
				v.RedactedAt, v.RedactedBy = &now, &by
			}
		})
		if err != nil {
			return u, err
		}
		out = l.byID[id].Version
		return u, nil
	})
	return out, err
}

// heads maps each live memory to its head version. Call with l.mu held.
func (l *tenantLog) heads() map[string]string {
	out := make(map[string]string, len(l.mems))
	for id, m := range l.mems {
		out[id] = m.VersionID
	}
	return out
}

// Prune implements History.
func (s *FileStore) Prune(ctx context.Context, tenant string, r Retention, now time.Time) (int, error) {
	var n int
	err := s.b.locked(ctx, tenant, func(_ *os.Root, l *tenantLog, u Usage) (Usage, error) {
		vs := make([]Version, len(l.vers))
		for i, fv := range l.vers {
			vs[i] = fv.Version
		}
		drop := PruneSet(vs, l.heads(), r, now)
		if len(drop) == 0 {
			return u, nil
		}
		gone := make(map[string]bool, len(drop))
		for _, id := range drop {
			gone[id] = true
		}
		n = len(drop)
		return u, s.b.hist.rewrite(tenant, l, func(fv *fver) bool { return !gone[fv.ID] }, nil)
	})
	return n, err
}

// Purge implements History.
func (s *FileStore) Purge(ctx context.Context, tenant string) (files, versions int, err error) {
	err = s.b.locked(ctx, tenant, func(_ *os.Root, l *tenantLog, u Usage) (Usage, error) {
		files, versions = len(l.mems), len(l.vers)
		h := s.b.hist
		h.mu.Lock()
		delete(h.logs, tenant)
		h.mu.Unlock()
		l.f.Close()
		if err := h.root.Remove(logName(tenant)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return Usage{}, err
		}
		if err := s.b.root.RemoveAll(tenant); err != nil {
			return Usage{}, err
		}
		// What threads owed the tenant goes too: nothing of it is left.
		if err := s.b.root.RemoveAll(continuationDir + "/" + tenant); err != nil {
			return Usage{}, err
		}
		return Usage{}, nil
	})
	return files, versions, err
}

// SubStores implements History: the store's tenant directories and history
// logs named tenant~….
func (s *FileStore) SubStores(ctx context.Context, tenant string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	prefix := SubStorePrefix(tenant)
	found := map[string]bool{}
	for _, dir := range []struct {
		root   *os.Root
		suffix string
	}{{s.b.root, ""}, {s.b.hist.root, ".jsonl"}} {
		names, err := readNames(dir.root)
		if err != nil {
			return nil, fmt.Errorf("memory stores of %s: %w", tenant, err)
		}
		for _, name := range names {
			if name, ok := strings.CutSuffix(name, dir.suffix); ok && strings.HasPrefix(name, prefix) && ValidTenant(name) {
				found[name] = true
			}
		}
	}
	out := make([]string, 0, len(found))
	for name := range found {
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}

// readNames lists the names in directory r.
func readNames(r *os.Root) ([]string, error) {
	f, err := r.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
