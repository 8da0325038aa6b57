package memapi

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
)

// PruneAll prunes every tenant's history by its policy once, and that of
// each key's store of a tenant with memory per key; it returns how many
// versions went.
func PruneAll(ctx context.Context, st memoryhook.Governed, pols *policy.Store, log *zap.Logger) int {
	total := 0
	for _, p := range pols.Current().Tenants() {
		stores := []string{p.Tenant}
		if p.HasSubStores() {
			keys, err := st.SubStores(ctx, p.Tenant)
			if err != nil && ctx.Err() == nil {
				log.Error("memory history pruning failed: the keys' stores are not listed", zap.String("tenant", p.Tenant), zap.Error(err))
			}
			stores = append(stores, keys...)
		}
		for _, name := range stores {
			n, err := st.Prune(ctx, name, p.Memory.History, time.Now())
			if err != nil {
				if ctx.Err() == nil {
					log.Error("memory history pruning failed", zap.String("tenant", p.Tenant), zap.String("store", name), zap.Error(err))
				}
				continue
			}
			if n > 0 {
				log.Info("memory history pruned", zap.String("tenant", p.Tenant), zap.String("store", name), zap.Int("versions", n))
			}
			total += n
		}
	}
	return total
}

// RunRetention prunes at start and then every interval until ctx ends.
func RunRetention(ctx context.Context, st memoryhook.Governed, pols *policy.Store, log *zap.Logger, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		PruneAll(ctx, st, pols, log)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// KeyUsers lists the users of a tenant's ctxproxy keys (Config.Users), so
// the API names each user's store by its user; nil without a keyring.
func KeyUsers(ring *keys.Keyring) func(context.Context, string) ([]string, error) {
	if ring == nil {
		return nil
	}
	return func(ctx context.Context, tenant string) ([]string, error) {
		ks, err := ring.List(ctx, tenant)
		if err != nil {
			return nil, err
		}
		var users []string
		for _, k := range ks {
			if k.User != "" {
				users = append(users, k.User)
			}
		}
		return users, nil
	}
}
