package policy

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ctxproxy/ctxproxy/internal/apikey"
)

// Set is the policies of one folder, immutable once built.
type Set struct {
	Dir     string
	byHash  map[[32]byte]*Policy
	byName  map[string]*Policy
	tenants []*Policy // sorted by name
	def     *Policy
}

// newSet indexes policies, reporting tenants and key hashes that appear more than once.
func newSet(policies []*Policy) (*Set, LoadErrors) {
	s := &Set{byHash: map[[32]byte]*Policy{}, byName: map[string]*Policy{}}
	var errs LoadErrors
	for _, p := range policies {
		if prev, dup := s.byName[p.Tenant]; dup {
			errs = append(errs, LoadError{File: p.File, Line: p.Line,
				Msg: fmt.Sprintf("tenant %q is already defined in %s:%d", p.Tenant, prev.File, prev.Line)})
			continue
		}
		bad := false
		for i, h := range p.KeyHashes {
			if prev, dup := s.byHash[h]; dup && prev != p {
				line := p.Line
				if i < len(p.keyLines) {
					line = p.keyLines[i]
				}
				errs = append(errs, LoadError{File: p.File, Line: line,
					Msg: fmt.Sprintf("api key hash %s… of tenant %q is also listed by tenant %q (%s:%d)", apikey.ID(h), p.Tenant, prev.Tenant, prev.File, prev.keyLine(h))})
				bad = true
			}
		}
		if bad {
			continue
		}
		for _, h := range p.KeyHashes {
			s.byHash[h] = p
		}
		s.byName[p.Tenant] = p
		s.tenants = append(s.tenants, p)
		if p.Tenant == DefaultTenant {
			s.def = p
		}
	}
	sort.Slice(s.tenants, func(i, j int) bool { return s.tenants[i].Tenant < s.tenants[j].Tenant })
	return s, errs
}

// Lookup finds the tenant whose api_keys_sha256 lists sha256(apiKey). When none does it returns
// Default() (nil if there is no default.yaml) and ok=false. An empty key is never looked up: a
// request without a credential belongs to no tenant.
func (s *Set) Lookup(apiKey string) (p *Policy, ok bool) {
	if apiKey == "" {
		return s.Default(), false
	}
	return s.LookupHash(apikey.Hash(apiKey))
}

// LookupHash is Lookup for a key already hashed.
func (s *Set) LookupHash(h [32]byte) (p *Policy, ok bool) {
	if s == nil {
		return nil, false
	}
	if p, ok := s.byHash[h]; ok {
		return p, true
	}
	return s.def, false
}

// Default is tenant "default" from default.yaml, nil if absent.
func (s *Set) Default() *Policy {
	if s == nil {
		return nil
	}
	return s.def
}

// Tenant returns the policy of the named tenant, nil if there is none.
func (s *Set) Tenant(name string) *Policy {
	if s == nil {
		return nil
	}
	return s.byName[name]
}

// StoreOwner returns the policy a memory store named name belongs to: a
// tenant's own store, or a key's or user's store (tenant~<key id>,
// tenant~u-<hash>, see Policy.ScopeStoreName) of a tenant with a scope
// that keeps such stores; nil if none does.
func (s *Set) StoreOwner(name string) *Policy {
	tenant, sub, perKey := strings.Cut(name, KeyStoreSep)
	p := s.Tenant(tenant)
	if p == nil || perKey && !p.ownsSubStore(sub) {
		return nil
	}
	return p
}

// Tenants returns every policy, default included, sorted by tenant name.
func (s *Set) Tenants() []*Policy {
	if s == nil {
		return nil
	}
	return append([]*Policy(nil), s.tenants...)
}

func (p *Policy) keyLine(h [32]byte) int {
	for i, k := range p.KeyHashes {
		if k == h && i < len(p.keyLines) {
			return p.keyLines[i]
		}
	}
	return p.Line
}

// useModels gives every policy of s, a Set not yet in force, the model source m.
func (s *Set) useModels(m ModelSource) {
	for _, p := range s.tenants {
		p.models = m
		if p.Shadow != nil {
			for i := range p.Shadow.Candidates {
				p.Shadow.Candidates[i].Policy.models = m
			}
		}
	}
}
