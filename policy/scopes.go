package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/ctxproxy/ctxproxy/internal/apikey"
	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// ScopeStore says whose store a memory scope maps its mount to.
type ScopeStore string

const (
	// ScopeTenant: one store for the whole tenant (named as the tenant).
	ScopeTenant ScopeStore = "tenant"
	// ScopeUser: one store per person: the user a ctxproxy key was minted
	// for, else the key id (a key without a user is its own person).
	ScopeUser ScopeStore = "user"
	// ScopeKey: one store per key id.
	ScopeKey ScopeStore = "key"
)

// MemoryScope is one entry of memory.scopes: the model's paths at or
// below Mount are kept in the store Store names, relative to the mount
// (/memories/team/a.md is /memories/a.md of the team's store).
type MemoryScope struct {
	Mount    string          // canonical: "/memories" or "/memories/a/b", no trailing '/'
	At       memoryhook.Path // Mount, parsed
	Store    ScopeStore
	ReadOnly bool // model_access: read; operators still write it
	// Template is the absolute folder copied into a user's (or key's)
	// store on its first use; "" for none.
	Template string
	Line     int
}

// MemoryGate is memory.gate: checks a model's write passes before it
// persists. Operators' writes are not gated.
type MemoryGate struct {
	RefuseSecrets      bool // refuse writes that hold an API key, a private key or a token
	MaxWritesPerMinute int  // per user (see ScopeUser), over a rolling minute; 0: no limit
}

// On reports whether the gate checks anything.
func (g MemoryGate) On() bool { return g.RefuseSecrets || g.MaxWritesPerMinute > 0 }

// MemoryScopes returns the tenant's scopes, longest mount first, so the
// first whose mount holds a path is the one that serves it. A policy
// without memory.scopes has one implicit scope at /memories: the tenant's
// store, or for the default tenant each key's own (its clients are
// strangers to each other).
func (p *Policy) MemoryScopes() []MemoryScope {
	if len(p.Memory.Scopes) > 0 {
		return p.Memory.Scopes
	}
	if p.MemoryPerKey() {
		return implicitKeyScope
	}
	return implicitTenantScope
}

var (
	rootPath, _         = memoryhook.ParsePath(memoryhook.Root)
	implicitTenantScope = []MemoryScope{{Mount: memoryhook.Root, At: rootPath, Store: ScopeTenant}}
	implicitKeyScope    = []MemoryScope{{Mount: memoryhook.Root, At: rootPath, Store: ScopeKey}}
)

// MemoryMounts are the mounts of a request with key id keyID and ctxproxy
// user user (see ScopeStoreName), each store under the tenant's limits.
// ok is false when a scope has no store for it (no key).
func (p *Policy) MemoryMounts(keyID, user string) (mounts []memoryhook.Mount, ok bool) {
	scopes := p.MemoryScopes()
	mounts = make([]memoryhook.Mount, len(scopes))
	for i := range scopes {
		name, ok := p.ScopeStoreName(&scopes[i], keyID, user)
		if !ok {
			return nil, false
		}
		mounts[i] = memoryhook.Mount{At: scopes[i].At, Store: name, ReadOnly: scopes[i].ReadOnly, Limits: p.Memory.Limits}
	}
	return mounts, true
}

// Scoped reports whether the policy writes memory.scopes (or a gate): the
// model's view is then routed per scope.
func (p *Policy) Scoped() bool { return len(p.Memory.Scopes) > 0 || p.Memory.Gate.On() }

// UserStorePrefix begins the sub-store name of a user's store
// (tenant~u-<16 hex of sha256(user)>): never a key id's shape, so a user
// and a key never share a store, and any user name makes a valid store name.
const UserStorePrefix = "u-"

// UserStore names the store of user (a ctxproxy key's user) in tenant.
func UserStore(tenant, user string) string {
	sum := sha256.Sum256([]byte(user))
	return tenant + KeyStoreSep + UserStorePrefix + hex.EncodeToString(sum[:8])
}

// ScopeStoreName names the store scope s of p serves a request with
// key id keyID and ctxproxy user user from. Only the credential's identity
// selects a store, never one the client names (a header,
// metadata.user_id): a user could read a colleague's memory by sending
// another name. ok is false when there is none (a per-key or per-user
// scope, and a request without a key).
func (p *Policy) ScopeStoreName(s *MemoryScope, keyID, user string) (name string, ok bool) {
	switch {
	case s.Store == ScopeTenant:
		return p.Tenant, true
	case s.Store == ScopeUser && user != "":
		return UserStore(p.Tenant, user), true
	case apikey.IsID(keyID):
		return p.Tenant + KeyStoreSep + keyID, true
	}
	return "", false
}

// MemoryUser is the identity memory.gate counts writes by: the user of a
// ctxproxy key, else the key id.
func MemoryUser(keyID, user string) string {
	if user != "" {
		return "user:" + user
	}
	return "key:" + keyID
}

// HasSubStores reports whether the tenant keeps stores beside its own
// (tenant~<key id>, tenant~u-<hash>): a scope per user or per key.
func (p *Policy) HasSubStores() bool { return p.hasScope(ScopeKey) || p.hasScope(ScopeUser) }

// ResolveStore finds the store an operator names: a store's own name
// (see StoreOwner), or tenant~<user> for the store of a tenant's user
// (a name of a key id's shape is the key's store). It returns the
// owner and the store's own name; nil when there is none.
func (s *Set) ResolveStore(name string) (*Policy, string) {
	if p := s.StoreOwner(name); p != nil {
		return p, name
	}
	tenant, user, ok := strings.Cut(name, KeyStoreSep)
	p := s.Tenant(tenant)
	if !ok || user == "" || p == nil || !p.hasScope(ScopeUser) {
		return nil, ""
	}
	return p, UserStore(tenant, user)
}

// hasScope reports whether some scope of p keeps stores of kind k.
func (p *Policy) hasScope(k ScopeStore) bool {
	for _, s := range p.MemoryScopes() {
		if s.Store == k {
			return true
		}
	}
	return false
}

// ownsSubStore reports whether sub (what follows tenant~ in a store's
// name) can be one of p's stores: a key id where a scope keeps stores per
// key or per user (a key without a user), a user's where one keeps them
// per user.
func (p *Policy) ownsSubStore(sub string) bool {
	if apikey.IsID(sub) {
		return p.hasScope(ScopeKey) || p.hasScope(ScopeUser)
	}
	h, ok := strings.CutPrefix(sub, UserStorePrefix)
	return ok && len(h) == 16 && isLowerHex(h) && p.hasScope(ScopeUser)
}

func isLowerHex(s string) bool {
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// scopes parses memory.scopes; dir is the policies folder templates live in.
func (ps *parser) scopes(n *yaml.Node, dir string, isDefault bool) []MemoryScope {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		ps.add(n.Line, "memory.scopes must be a list, got %s", describe(n))
		return nil
	}
	var out []MemoryScope
	firstAt := map[string]int{}
	for i, item := range n.Content {
		item = resolve(item)
		where := "memory.scopes[" + itoa(i) + "]"
		s := MemoryScope{Line: item.Line, Store: ""}
		var seen struct{ path, store bool }
		good := ps.fields(item, where, []string{"path", "store", "model_access", "template"}, func(key string, _, v *yaml.Node) {
			switch key {
			case "path":
				str, ok := ps.str(v, where+".path")
				if !ok {
					return
				}
				seen.path = true
				if m, problem := canonicalMount(str); problem != "" {
					ps.add(v.Line, "%s.path %q %s", where, str, problem)
				} else {
					s.Mount = m
					var err error
					if s.At, err = memoryhook.ParsePath(m); err != nil {
						ps.add(v.Line, "%s.path %q: %s", where, str, err.Error())
					}
					if prev, dup := firstAt[m]; dup {
						ps.add(v.Line, "%s.path %q is the mount of the scope at line %d already (a trailing / is ignored)", where, str, prev)
					}
					firstAt[m] = item.Line
				}
			case "store":
				str, ok := ps.str(v, where+".store")
				if !ok {
					return
				}
				seen.store = true
				switch st := ScopeStore(str); st {
				case ScopeTenant, ScopeUser, ScopeKey:
					s.Store = st
				default:
					ps.add(v.Line, "%s.store must be user, key or tenant, got %q", where, str)
				}
			case "model_access":
				str, ok := ps.str(v, where+".model_access")
				if !ok {
					return
				}
				switch str {
				case "read":
					s.ReadOnly = true
				case "read_write":
				default:
					ps.add(v.Line, "%s.model_access must be read or read_write, got %q", where, str)
				}
			case "template":
				str, ok := ps.str(v, where+".template")
				if !ok {
					return
				}
				if abs, problem := templateDir(dir, str); problem != "" {
					ps.add(v.Line, "%s.template %q %s", where, str, problem)
				} else {
					s.Template = abs
				}
			}
		})
		if !good {
			continue
		}
		if !seen.path {
			ps.add(item.Line, "%s needs a path (a mount under /memories)", where)
		}
		if !seen.store {
			ps.add(item.Line, "%s needs a store: user, key or tenant", where)
		}
		if s.Template != "" && s.Store == ScopeTenant {
			ps.add(item.Line, "%s: a template seeds each user's or key's store; the tenant's store is written by operators", where)
		}
		if isDefault && s.Store == ScopeTenant && !s.ReadOnly {
			ps.add(item.Line, "%s: default.yaml serves clients that are strangers to each other; a store: tenant scope there must be model_access: read", where)
		}
		out = append(out, s)
	}
	// Longest mount first: the first scope holding a path serves it.
	slices.SortStableFunc(out, func(a, b MemoryScope) int { return strings.Count(b.Mount, "/") - strings.Count(a.Mount, "/") })
	return out
}

// canonicalMount checks a scope's mount and returns it without empty
// components or a trailing '/'; problem says what is wrong with it.
func canonicalMount(s string) (mount, problem string) {
	if s != "/memories" && !strings.HasPrefix(s, "/memories/") {
		return "", "is outside /memories: a mount is /memories or a folder below it"
	}
	elems := []string{}
	for _, e := range strings.Split(s[len("/memories"):], "/") {
		switch {
		case e == "":
			continue
		case e == "." || e == "..":
			return "", "holds . or ..; write the folder's own path"
		case len(e) > 255:
			return "", "has a name longer than 255 bytes"
		case strings.ContainsRune(e, '\\') || strings.ContainsFunc(e, func(r rune) bool {
			return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == unicode.ReplacementChar
		}):
			return "", "holds a character memory paths may not hold"
		}
		elems = append(elems, e)
	}
	if len(elems) > 10 {
		return "", "is more than 10 folders deep"
	}
	return strings.Join(append([]string{"/memories"}, elems...), "/"), ""
}

// templateDir resolves a template folder written relative to the policies
// folder dir; problem says why it cannot be used.
func templateDir(dir, rel string) (abs, problem string) {
	if rel == "" || filepath.IsAbs(rel) {
		return "", "must be a folder inside the policies folder, written relative to it"
	}
	base, err := filepath.Abs(dir)
	if err != nil {
		return "", "cannot be resolved: " + err.Error()
	}
	if real, err := filepath.EvalSymlinks(base); err == nil {
		base = real
	}
	if c := filepath.Clean(filepath.FromSlash(rel)); c == ".." || strings.HasPrefix(c, ".."+string(filepath.Separator)) {
		return "", "escapes the policies folder"
	}
	p := filepath.Join(base, filepath.FromSlash(rel))
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", "does not exist in the policies folder"
	}
	if r, err := filepath.Rel(base, real); err != nil || r == "." || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "", "escapes the policies folder"
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.IsDir() {
		return "", "is not a folder"
	}
	return real, ""
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// gate parses memory.gate.
func (ps *parser) gate(n *yaml.Node, g *MemoryGate) {
	if isNull(n) {
		return
	}
	ps.fields(n, "memory.gate", []string{"refuse_secrets", "max_writes_per_minute"}, func(key string, _, v *yaml.Node) {
		switch key {
		case "refuse_secrets":
			if b, ok := ps.bool(v, "memory.gate.refuse_secrets"); ok {
				g.RefuseSecrets = b
			}
		case "max_writes_per_minute":
			if x, ok := ps.int(v, "memory.gate.max_writes_per_minute", 1); ok {
				if x > 100000 {
					ps.add(v.Line, "memory.gate.max_writes_per_minute must be at most 100000, got %d", x)
				}
				g.MaxWritesPerMinute = int(min(x, 100000))
			}
		}
	})
}
