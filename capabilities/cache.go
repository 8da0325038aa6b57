package capabilities

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/internal/upstreamreq"
)

const (
	// DefaultEvery is how often the models are read again.
	DefaultEvery = 10 * time.Minute
	// staleAfter is how long a tenant's last good read stands while reads
	// fail; past it the built-in lists decide again.
	staleAfter = time.Hour
	// readTimeout bounds one tenant's read.
	readTimeout = 30 * time.Second
	// parallelReads bounds the reads in flight.
	parallelReads = 4
)

// Tenant is a tenant whose models are read.
type Tenant struct {
	Name string
	// Key is the tenant's own upstream key; "" for a pass-through tenant,
	// read with the first credential the proxy forwards for it (Offer).
	Key string
	// Models are the models the tenant's policy names.
	Models []string
}

// Options configure a Cache.
type Options struct {
	Upstream  *url.URL
	Transport http.RoundTripper // nil: http.DefaultTransport
	// Tenants lists the tenants to read; called at every refresh, so a
	// policy reload is followed.
	Tenants func() []Tenant
	// OnRetiring is called after every refresh with every tenant's models
	// that are deprecated or retired and that the tenant used in the last
	// seven days or its policy names (Retiring).
	OnRetiring func([]Retiring)
	Every      time.Duration    // 0: DefaultEvery
	Ticks      <-chan time.Time // replaces the ticker of Every (tests)
	Now        func() time.Time // nil: time.Now
	Log        *zap.Logger
}

// Cache holds each tenant's models as last read. Model and Offer are for the
// request path: neither blocks nor calls upstream.
type Cache struct {
	o      Options
	client *http.Client
	snap   atomic.Pointer[snapshot]
	// offered is a pass-through tenant's credential (tenant → credential):
	// the first the proxy forwarded, until a read refuses it.
	offered sync.Map
	wake    chan struct{} // a credential was offered
	mu      sync.Mutex    // one refresh at a time (readers never take it)
	// refusals are the edits the upstream refused when ctxproxy added them (refusals.go); a
	// refresh keeps them: the models endpoint does not say what they say.
	refusals Refusals
	// seeded is when each tenant last used each model (tenant → model as
	// the ledger names it → unix seconds), as SeedUsage was told: merged
	// into every read of the tenant's models, so a model not listed yet,
	// or a tenant not read yet, still has it when read. Guarded by mu.
	seeded map[string]map[string]int64
}

// snapshot is every tenant's models, immutable once stored.
type snapshot struct {
	tenants map[string]*tenantModels
}

// tenantModels is one tenant's models; the table may be shared with other
// tenants of the same credential, the usage is the tenant's.
type tenantModels struct {
	t    *table
	read time.Time      // when it was read
	used []atomic.Int64 // per model of t.list: when a request last named it (unix seconds)
}

// New builds a Cache; nothing is read until Refresh or Run.
func New(o Options) *Cache {
	if o.Every <= 0 {
		o.Every = DefaultEvery
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Tenants == nil {
		o.Tenants = func() []Tenant { return nil }
	}
	tr := o.Transport
	if tr == nil {
		tr = http.DefaultTransport
	}
	c := &Cache{o: o, client: &http.Client{Transport: tr}, wake: make(chan struct{}, 1)}
	c.snap.Store(&snapshot{})
	return c
}

// Model is what the tenant's last read said of model (a listed id, or a
// dated snapshot of one); the zero Model when nothing is known: no read
// succeeded, or the model is not listed. A nil Cache knows nothing.
func (c *Cache) Model(tenant, model string) Model {
	if c == nil {
		return Model{}
	}
	if tm := c.snap.Load().tenants[tenant]; tm != nil {
		if i, ok := tm.t.lookup(model); ok {
			return tm.t.list[i]
		}
	}
	return Model{}
}

// Models is every model of the tenant's last read, newest first; nil when
// none succeeded. The caller must not change it.
func (c *Cache) Models(tenant string) []Model {
	if c == nil {
		return nil
	}
	if tm := c.snap.Load().tenants[tenant]; tm != nil {
		return tm.t.list
	}
	return nil
}

// Known reports whether the tenant's models have been read.
func (c *Cache) Known(tenant string) bool {
	return c != nil && c.snap.Load().tenants[tenant] != nil
}

// Offer gives the credential of h (x-api-key or Authorization), which the
// proxy is forwarding for pass-through tenant, to read its models with,
// unless the tenant already has one. The read happens in Run, never here.
func (c *Cache) Offer(tenant string, h http.Header) {
	if c == nil || c.snap.Load().tenants[tenant] != nil {
		return
	}
	if _, ok := c.offered.Load(tenant); ok {
		return
	}
	cred := upstreamreq.CredentialOf(h)
	if cred.Empty() {
		return
	}
	if _, loaded := c.offered.LoadOrStore(tenant, cred); !loaded {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// Run reads again on every tick (Options.Every) and, between ticks, the
// tenants a credential was just offered for, until ctx is done. Call Refresh
// first for the read at start.
func (c *Cache) Run(ctx context.Context) {
	ticks := c.o.Ticks
	if ticks == nil {
		t := time.NewTicker(c.o.Every)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			c.Refresh(ctx)
		case <-c.wake:
			c.refresh(ctx, false)
		}
	}
}

// Refresh reads every tenant's models now and returns when done. A tenant
// whose read fails keeps its last good read for an hour, then falls back to
// the built-in lists; the failure is logged with the tenant and its cause.
func (c *Cache) Refresh(ctx context.Context) error { return c.refresh(ctx, true) }

// refresh reads the tenants with a credential: all of them (all), or only
// those not read yet.
func (c *Cache) refresh(ctx context.Context, all bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.snap.Load()
	now := c.o.Now()

	type job struct {
		cred    upstreamreq.Credential
		tenants []string
		named   []string // the models the tenants' policies name
		offered bool
		models  []Model
		aliases map[string]string // a named model the list lacks → the id it stands for
		err     error
	}
	var jobs []*job
	byCred := map[upstreamreq.Credential]*job{}
	keep := map[string]bool{}
	tenantList := c.o.Tenants()
	for _, t := range tenantList {
		keep[t.Name] = true
		if !all && old.tenants[t.Name] != nil {
			continue
		}
		cred, offered := upstreamreq.Key(t.Key), false
		if t.Key == "" {
			v, ok := c.offered.Load(t.Name)
			if !ok {
				continue
			}
			cred, offered = v.(upstreamreq.Credential), true
		}
		j := byCred[cred]
		if j == nil {
			j = &job{cred: cred, offered: offered}
			byCred[cred] = j
			jobs = append(jobs, j)
		}
		j.tenants = append(j.tenants, t.Name)
		j.named = append(j.named, t.Models...)
	}

	sem := make(chan struct{}, parallelReads)
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			rctx, cancel := context.WithTimeout(ctx, readTimeout)
			defer cancel()
			j.models, j.err = readModels(rctx, c.client, c.o.Upstream, j.cred)
			if j.err == nil {
				j.models, j.aliases = resolveNamed(rctx, c.client, c.o.Upstream, j.cred, j.models, j.named)
			}
		}()
	}
	wg.Wait()

	c.pruneSeeds(now)
	next := &snapshot{tenants: make(map[string]*tenantModels, len(old.tenants)+len(jobs))}
	for name, tm := range old.tenants {
		if keep[name] {
			next.tenants[name] = tm
		}
	}
	var errs []error
	for _, j := range jobs {
		if j.err == nil {
			t := newTable(j.models)
			for alias, id := range j.aliases {
				if i, ok := t.byName[id]; ok {
					t.byName[alias] = i
				}
			}
			for _, name := range j.tenants {
				next.tenants[name] = withUsage(t, now, old.tenants[name], c.seeded[name])
				if all {
					c.refusals.Forget(name) // learned again, if the API still refuses
				}
			}
			continue
		}
		errs = append(errs, j.err)
		for _, name := range j.tenants {
			prev := next.tenants[name]
			stale := prev == nil || now.Sub(prev.read) > staleAfter
			if stale {
				delete(next.tenants, name)
			}
			if all && j.offered && rejected(j.err) {
				// The next credential forwarded for the tenant may be taken
				// (at most one such read between two ticks).
				c.offered.Delete(name)
			}
			c.o.Log.Warn("model capabilities: cannot read the models endpoint",
				zap.String("tenant", name), zap.Error(j.err),
				zap.Bool("built_in_lists", stale))
		}
	}
	c.snap.Store(next)
	if c.o.OnRetiring != nil {
		c.o.OnRetiring(c.retiring(next, tenantList, now))
	}
	return errors.Join(errs...)
}
