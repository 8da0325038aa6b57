package policy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// Store holds the current Set. Readers call Current on every request; Reload builds a whole new Set
// and swaps it in atomically, so a request never sees half a reload.
type Store struct {
	dir string
	log *zap.Logger
	cur atomic.Pointer[Set]
	mu  sync.Mutex // serialises Reload so an older load never overwrites a newer one
	// last is the outcome of the latest load (the first, or a reload).
	last atomic.Pointer[ReloadStatus]

	// debounce is how long Watch waits for a burst of file events to end before reloading.
	debounce time.Duration
	// maxDelay bounds how long a stream of events can postpone the reload.
	maxDelay time.Duration
	// Test hooks: started is called once the folder is watched, reloaded after every reload Watch
	// triggers.
	started  func()
	reloaded func(error)
	// onReload are called after every reload, under mu (see OnReload).
	onReload []func(error)
	// models is given to every policy loaded (WithModels).
	models ModelSource
}

// StoreOption configures a Store.
type StoreOption func(*Store)

// WithModels has every policy the store loads ask m which edits a model takes (Policy's
// rewrite); without it the built-in lists decide.
func WithModels(m ModelSource) StoreOption { return func(s *Store) { s.models = m } }

// OnReload registers f to be called after every reload, from SIGHUP (Reload) or a change in the
// folder (Watch), with its error (nil: the new Set is in force). Calls run one at a time, in
// reload order; f must not call Reload. What reloads with the policies (prices, the metrics'
// tenant labels) hangs here, so both paths reload it.
func (s *Store) OnReload(f func(error)) {
	s.mu.Lock()
	s.onReload = append(s.onReload, f)
	s.mu.Unlock()
}

// NewStore loads dir; the first load must succeed.
func NewStore(dir string, log *zap.Logger, opts ...StoreOption) (*Store, error) {
	if log == nil {
		log = zap.NewNop()
	}
	s := &Store{dir: dir, log: log, debounce: 100 * time.Millisecond, maxDelay: time.Second}
	for _, o := range opts {
		o(s)
	}
	set, err := LoadDir(dir)
	if err != nil {
		return nil, err
	}
	set.useModels(s.models)
	s.cur.Store(set)
	s.last.Store(&ReloadStatus{At: time.Now()})
	return s, nil
}

// ReloadStatus is the outcome of the latest load of the folder.
type ReloadStatus struct {
	At time.Time
	// Problems is why it was refused, by file and line (a problem of no
	// file, such as an unreadable folder, has File ""); none when it
	// succeeded. Kept structured so a reader can show each tenant the
	// problems of its own file only.
	Problems LoadErrors
}

// OK says whether the latest load succeeded.
func (r ReloadStatus) OK() bool { return len(r.Problems) == 0 }

// LastReload is the outcome of the latest load or reload.
func (s *Store) LastReload() ReloadStatus { return *s.last.Load() }

// Dir is the folder the store loads.
func (s *Store) Dir() string { return s.dir }

// Current is the Set in force. It never returns nil.
func (s *Store) Current() *Set { return s.cur.Load() }

// Reload loads the folder again. On failure the last good Set stays in force; the error is logged
// and returned (LoadErrors when files are bad).
func (s *Store) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.reload()
	for _, f := range s.onReload {
		f(err)
	}
	return err
}

func (s *Store) reload() error {
	set, err := LoadDir(s.dir)
	if err != nil {
		var le LoadErrors
		if errors.As(err, &le) {
			problems := make([]string, len(le))
			for i, e := range le {
				problems[i] = e.Error()
			}
			s.last.Store(&ReloadStatus{At: time.Now(), Problems: le})
			s.log.Error("policy reload refused; the last good policies stay in force",
				zap.String("dir", s.dir), zap.Strings("problems", problems))
		} else {
			s.last.Store(&ReloadStatus{At: time.Now(), Problems: LoadErrors{{Msg: err.Error()}}})
			s.log.Error("policy reload refused; the last good policies stay in force",
				zap.String("dir", s.dir), zap.Error(err))
		}
		return err
	}
	set.useModels(s.models)
	old := s.cur.Swap(set)
	s.last.Store(&ReloadStatus{At: time.Now()})
	auditLimits(s.log, old, set, time.Now())
	names := make([]string, 0, len(set.tenants))
	for _, p := range set.tenants {
		names = append(names, p.Tenant)
	}
	s.log.Info("policies reloaded", zap.String("dir", s.dir), zap.Strings("tenants", names))
	return nil
}

// Watch reloads the store when anything in its folder changes, after the events have been quiet for
// a short while (editors write a temp file and rename it over the original, producing several events;
// Kubernetes swaps a ..data symlink). The folder itself is watched, not the files, so a file replaced
// by rename stays watched. Watch returns nil when ctx is done.
func (s *Store) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch policies: %w", err)
	}
	defer w.Close()
	if err := w.Add(s.dir); err != nil {
		return fmt.Errorf("watch policies %s: %w", s.dir, err)
	}
	if s.started != nil {
		s.started()
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var pendingSince time.Time // first event not yet followed by a reload
	schedule := func() {
		now := time.Now()
		if pendingSince.IsZero() {
			pendingSince = now
		}
		// Wait for the burst to end, but never longer than maxDelay after its first event, so a file
		// written continuously cannot postpone the reload forever.
		timer.Reset(min(s.debounce, max(0, s.maxDelay-now.Sub(pendingSince))))
	}
	// A change made after the store was loaded but before the folder was
	// watched raised no event: one reload once watching catches it (the proxy
	// serves while Watch starts, so an edit right after start would otherwise
	// be missed until the next one).
	schedule()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("watch policies: watcher closed")
			}
			s.log.Debug("policy folder changed", zap.String("file", ev.Name), zap.String("op", ev.Op.String()))
			schedule()
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("watch policies: watcher closed")
			}
			// An overflow loses events: reload to be sure nothing was missed.
			s.log.Warn("policy watcher error", zap.Error(err))
			schedule()
		case <-timer.C:
			pendingSince = time.Time{}
			err := s.Reload()
			if s.reloaded != nil {
				s.reloaded(err)
			}
		}
	}
}

// auditLimits logs every tenant whose limits a reload changed, added or removed: the audit log of
// limit changes (tenant, before, after, time). Tenants that come or go with their limits count.
func auditLimits(log *zap.Logger, old, cur *Set, at time.Time) {
	seen := map[string]bool{}
	for _, p := range cur.Tenants() {
		seen[p.Tenant] = true
		before := old.Tenant(p.Tenant)
		var b Limits
		if before != nil {
			b = before.Limits
		}
		if !before.hasSameLimits(p) && (b.Any() || p.Limits.Any()) {
			logLimitChange(log, p.Tenant, &b, &p.Limits, at)
		}
	}
	for _, p := range old.Tenants() {
		if !seen[p.Tenant] && p.Limits.Any() {
			logLimitChange(log, p.Tenant, &p.Limits, &Limits{}, at)
		}
	}
}

func (p *Policy) hasSameLimits(q *Policy) bool {
	return p != nil && q != nil && p.Limits.String() == q.Limits.String()
}

func logLimitChange(log *zap.Logger, tenant string, before, after *Limits, at time.Time) {
	log.Warn("limits changed", zap.String("audit", "limits"), zap.String("tenant", tenant),
		zap.String("before", before.String()), zap.String("after", after.String()), zap.Time("at", at.UTC()))
}
