package capabilities

import (
	"slices"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
)

// maxRefusals bounds what Refusals keeps: past it the oldest is forgotten (and, if the API
// still refuses it, learned again at the cost of one refused call).
const maxRefusals = 1024

// Refusal is an edit the upstream refused when ctxproxy added it to a tenant's request for a
// model under a thinking type (thinking.type as sent; "" without thinking). Its strings must
// not point into a request's buffer: they outlive it.
type Refusal struct {
	Tenant, Model, Thinking, Edit string
}

// Refusals is what the API itself taught ctxproxy beyond its models endpoint: combinations the
// endpoint does not settle (whether clear_thinking_20251015 is taken with thinking type
// between_tools is unverified, the December 2026 API reference's between_tools section) that
// the upstream refused. Kept in memory, bounded, until the tenant's models are read again on
// the next tick (Cache.Refresh): the API may come to take what it refused, and relearning costs
// one refused call a tick. The zero Refusals is empty and ready; Has costs one atomic load while
// it is empty.
type Refusals struct {
	n    atomic.Int32 // entries in set, read without the lock
	mu   sync.RWMutex
	set  map[Refusal]struct{}
	ring []Refusal // in the order learned: the oldest is forgotten first
	next int       // ring's oldest entry once it is full
	// logged is what was logged, so relearning after a read logs nothing new; bounded as set.
	logged map[Refusal]struct{}
}

// Add records f; it reports whether f is new.
func (r *Refusals) Add(f Refusal) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.set[f]; ok {
		return false
	}
	if r.set == nil {
		r.set = make(map[Refusal]struct{})
	}
	if len(r.ring) < maxRefusals {
		r.ring = append(r.ring, f)
	} else {
		delete(r.set, r.ring[r.next])
		r.ring[r.next] = f
		r.next = (r.next + 1) % maxRefusals
	}
	r.set[f] = struct{}{}
	r.n.Store(int32(len(r.set)))
	return true
}

// Forget drops what was learned for tenant, keeping the others' order.
func (r *Refusals) Forget(tenant string) {
	if r.n.Load() == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := make([]Refusal, 0, len(r.ring))
	for _, f := range slices.Concat(r.ring[r.next:], r.ring[:r.next]) {
		if f.Tenant == tenant {
			delete(r.set, f)
			continue
		}
		kept = append(kept, f)
	}
	r.ring, r.next = kept, 0
	r.n.Store(int32(len(r.set)))
}

// firstLog reports whether f has not been logged yet, and marks it logged.
func (r *Refusals) firstLog(f Refusal) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.logged[f]; ok {
		return false
	}
	if r.logged == nil || len(r.logged) >= maxRefusals {
		r.logged = make(map[Refusal]struct{})
	}
	r.logged[f] = struct{}{}
	return true
}

// Has reports whether f was learned (and not forgotten since).
func (r *Refusals) Has(f Refusal) bool {
	if r.n.Load() == 0 {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.set[f]
	return ok
}

// Refuse records that the upstream refused edit, which ctxproxy had added to tenant's request
// for model under thinking type thinking, so the policies stop writing it there (Refuses).
// The first time, it logs the tenant and model: an operator may want the policy changed. A
// nil Cache learns nothing.
func (c *Cache) Refuse(tenant, model, thinking, edit string) {
	if c == nil {
		return
	}
	f := Refusal{Tenant: tenant, Model: model, Thinking: thinking, Edit: edit}
	if c.refusals.Add(f) && c.refusals.firstLog(f) {
		c.o.Log.Warn("model capabilities: the API refused an edit ctxproxy added; it is no longer written for this model and thinking type",
			zap.String("tenant", tenant), zap.String("model", model),
			zap.String("thinking", thinking), zap.String("edit", edit))
	}
}

// Refuses reports whether the upstream refused edit for tenant's model under thinking type
// thinking (Refuse). It never blocks on a refresh. A nil Cache knows of no refusal.
func (c *Cache) Refuses(tenant, model, thinking, edit string) bool {
	return c != nil && c.refusals.Has(Refusal{Tenant: tenant, Model: model, Thinking: thinking, Edit: edit})
}
