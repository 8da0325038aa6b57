package capabilities

import (
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// UsageWindow is how recently a tenant must have used a model for its
// retirement to concern the tenant (unless its policy names the model).
const UsageWindow = 7 * 24 * time.Hour

// Retiring is a model of a tenant that is deprecated or retired, and that
// the tenant's requests used in the last seven days or its policy names.
type Retiring struct {
	Tenant    string
	Model     string // the id the models endpoint lists
	Lifecycle string // deprecated or retired
	RetiresAt string // RFC 3339, "" when the endpoint gives no date
	LastUsed  time.Time
	Named     bool // the tenant's policy names it
}

// Used records that a request of tenant named model at at. A use is a call
// the tenant's reports count (a Messages call or a batch): not a count_tokens
// call, which bills nothing, nor a policy-lab measurement; the ledger that
// seeds a restart (SeedUsage) leaves out the same calls. Only models the
// tenant's last read lists are recorded (so what clients send cannot grow
// it); it never blocks.
func (c *Cache) Used(tenant, model string, at time.Time) {
	if c == nil {
		return
	}
	tm := c.snap.Load().tenants[tenant]
	if tm == nil {
		return
	}
	if i, ok := tm.t.lookup(model); ok {
		if s := at.Unix(); tm.used[i].Load() < s {
			tm.storeNewer(i, s)
		}
	}
}

// storeNewer records s as when model i was last used, unless a later time
// is recorded.
func (tm *tenantModels) storeNewer(i int, s int64) {
	for {
		old := tm.used[i].Load()
		if old >= s || tm.used[i].CompareAndSwap(old, s) {
			return
		}
	}
}

// withUsage is the tenant's models of table t read at now, with the usage
// the tenant's previous models recorded and the usage seeded for it
// (model → unix seconds; SeedUsage), the later of the two.
func withUsage(t *table, now time.Time, prev *tenantModels, seeded map[string]int64) *tenantModels {
	tm := &tenantModels{t: t, read: now, used: make([]atomic.Int64, len(t.list))}
	if prev != nil {
		for i := range prev.t.list {
			if s := prev.used[i].Load(); s != 0 {
				if j, ok := t.byName[prev.t.list[i].ID]; ok {
					tm.used[j].Store(s)
				}
			}
		}
	}
	for model, s := range seeded {
		if i, ok := t.lookup(model); ok {
			tm.storeNewer(i, s)
		}
	}
	return tm
}

// Use is a tenant's use of a model at a time, as a record of past calls
// (the ledger) tells it.
type Use struct {
	Tenant, Model string
	At            time.Time
}

// SeedUsage merges uses into when each tenant last used each model, keeping
// the later of a use and what the cache recorded: so a restarted proxy still
// counts the calls before its start towards UsageWindow. A model the
// tenant's last read does not list, or a tenant not read yet, gets it when
// read. Uses older than UsageWindow are dropped. If some tenant's models are
// known, OnRetiring is called again with the result. Call it at start, not
// on a request's path (it waits for a refresh in progress).
func (c *Cache) SeedUsage(uses []Use) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.o.Now()
	since := now.Add(-UsageWindow).Unix()
	if c.seeded == nil {
		c.seeded = map[string]map[string]int64{}
	}
	s := c.snap.Load()
	for _, u := range uses {
		at := u.At.Unix()
		if at < since || u.Tenant == "" || u.Model == "" {
			continue
		}
		m := c.seeded[u.Tenant]
		if m == nil {
			m = map[string]int64{}
			c.seeded[u.Tenant] = m
		}
		if m[u.Model] < at {
			m[u.Model] = at
		}
		if tm := s.tenants[u.Tenant]; tm != nil {
			if i, ok := tm.t.lookup(u.Model); ok {
				tm.storeNewer(i, at)
			}
		}
	}
	if len(s.tenants) > 0 && c.o.OnRetiring != nil {
		c.o.OnRetiring(c.retiring(s, c.o.Tenants(), now))
	}
}

// pruneSeeds drops the seeded uses that are out of the window at now.
// Called with mu held.
func (c *Cache) pruneSeeds(now time.Time) {
	since := now.Add(-UsageWindow).Unix()
	for tenant, m := range c.seeded {
		for model, at := range m {
			if at < since {
				delete(m, model)
			}
		}
		if len(m) == 0 {
			delete(c.seeded, tenant)
		}
	}
}

// Retiring is the tenant's retiring models as of its last read, most urgent
// (earliest retires_at) first.
func (c *Cache) Retiring(tenant string) []Retiring {
	if c == nil {
		return nil
	}
	var named []string
	for _, t := range c.o.Tenants() {
		if t.Name == tenant {
			named = t.Models
		}
	}
	return c.retiring(c.snap.Load(), []Tenant{{Name: tenant, Models: named}}, c.o.Now())
}

func (c *Cache) retiring(s *snapshot, tenants []Tenant, now time.Time) []Retiring {
	var out []Retiring
	since := now.Add(-UsageWindow).Unix()
	for _, t := range tenants {
		tm := s.tenants[t.Name]
		if tm == nil {
			continue
		}
		start := len(out)
		for i := range tm.t.list {
			m := &tm.t.list[i]
			if !m.Retiring() {
				continue
			}
			used := tm.used[i].Load()
			named := slices.ContainsFunc(t.Models, func(n string) bool {
				j, ok := tm.t.lookup(n)
				return ok && j == i
			})
			if used < since && !named {
				continue
			}
			r := Retiring{Tenant: t.Name, Model: m.ID, Lifecycle: m.Lifecycle, RetiresAt: m.RetiresAt, Named: named}
			if used != 0 {
				r.LastUsed = time.Unix(used, 0).UTC()
			}
			out = append(out, r)
		}
		slices.SortStableFunc(out[start:], func(a, b Retiring) int {
			switch {
			case a.RetiresAt == b.RetiresAt:
				return 0
			case a.RetiresAt == "":
				return 1
			case b.RetiresAt == "":
				return -1
			}
			return strings.Compare(a.RetiresAt, b.RetiresAt)
		})
	}
	return out
}
