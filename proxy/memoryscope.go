package proxy

import (
	"context"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
)

// scope is the request's memory view. Without memory.scopes and a gate
// it is today's one store: the one the policy names for the key (see
// policy.Policy.MemoryStore), under the tenant's limits. With them, the
// mounts of the policy's scopes, each store chosen by the credential's
// identity (the ctxproxy key's user, else the key id), never by one the
// client names, and the gate counting the user's writes. ok is false when
// there is no store (memory per key or user, and no key).
func (x *exchange) scope() (sc memoryhook.Scope, ok bool) {
	pol := x.who.pol
	if !pol.Scoped() {
		store, ok := pol.MemoryStore(x.who.keyID)
		return memoryhook.Scope{Tenant: store, Limits: pol.Memory.Limits}, ok
	}
	mounts, ok := pol.MemoryMounts(x.who.keyID, x.who.user)
	sc = memoryhook.Scope{Tenant: pol.Tenant, Limits: pol.Memory.Limits, Mounts: mounts}
	if g := pol.Memory.Gate; g.On() {
		sc.Gate = &memoryhook.Gate{RefuseSecrets: g.RefuseSecrets, MaxPerMinute: g.MaxWritesPerMinute,
			Rate: x.s.writeRate, Who: pol.Tenant + "/" + policy.MemoryUser(x.who.keyID, x.who.user)}
	}
	return sc, ok
}

// seedTemplates copies each scope's template into the user's (or key's)
// store the first time a request of theirs reaches memory (memoryhook.Seed
// decides from the store's history whether it is the first time; this
// process asks once per store). A failure is logged and the calls run:
// the model finds the store without its seed, not a refusal.
func (x *exchange) seedTemplates(ctx context.Context) {
	pol := x.who.pol
	if x.s.cfg.Memory == nil || len(pol.Memory.Scopes) == 0 {
		return
	}
	for i := range pol.Memory.Scopes {
		s := &pol.Memory.Scopes[i]
		if s.Template == "" {
			continue
		}
		store, ok := pol.ScopeStoreName(s, x.who.keyID, x.who.user)
		if !ok {
			continue
		}
		key := store + "\x00" + s.Template
		if _, done := x.s.seeded.Load(key); done {
			continue
		}
		n, err := memoryhook.Seed(ctx, x.s.cfg.Memory, store, pol.Memory.Limits, s.Template)
		if err != nil {
			x.s.log.Error("memory template not copied", zap.String("tenant", x.who.label),
				zap.String("scope", s.Mount), zap.Error(err))
			continue
		}
		x.s.seeded.Store(key, true)
		if n > 0 {
			x.s.log.Info("memory template copied", zap.String("tenant", x.who.label),
				zap.String("scope", s.Mount), zap.String("key", x.who.keyID), zap.Int("files", n))
		}
	}
}
