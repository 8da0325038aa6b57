package limits

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// Caps lists every spend cap of the tenants in set (only tenant when it is not "") with what is
// spent against it in the period that holds now: one row per tenant cap, and one per end user
// with spend for each per-user cap. It is what `ctxproxy report` and /admin/report show.
func Caps(ctx context.Context, store SpendStore, set *policy.Set, tenant string, now time.Time) ([]tokens.CapRow, error) {
	var out []tokens.CapRow
	for _, p := range set.Tenants() {
		if (tenant != "" && p.Tenant != tenant) || !p.Limits.Capped() {
			continue
		}
		for _, sl := range p.Limits.Spend {
			bucket, reset := Bucket(sl.Period, now)
			spent, err := store.Spent(ctx, p.Tenant, []Counter{{Bucket: bucket}})
			if err != nil {
				return nil, fmt.Errorf("caps of %s: %w", p.Tenant, err)
			}
			out = append(out, capRow(p.Tenant, "", sl, bucket, spent[0], reset))
		}
		for _, sl := range p.Limits.PerUserSpend {
			bucket, reset := Bucket(sl.Period, now)
			users, err := store.UserSpend(ctx, p.Tenant, bucket)
			if err != nil {
				return nil, fmt.Errorf("caps of %s: %w", p.Tenant, err)
			}
			names := make([]string, 0, len(users))
			for u := range users {
				names = append(names, u)
			}
			sort.Strings(names)
			for _, u := range names {
				out = append(out, capRow(p.Tenant, u, sl, bucket, users[u], reset))
			}
		}
	}
	return out, nil
}

func capRow(tenant, user string, sl policy.SpendLimit, bucket string, spent tokens.Money, reset time.Time) tokens.CapRow {
	c := tokens.Money(sl.Nanos)
	return tokens.CapRow{Tenant: tenant, User: user, Period: string(sl.Period), Bucket: bucket,
		Spent: spent, Cap: c, Utilization: float64(spent) / float64(c), ResetsAt: reset}
}

// Store is the enforcer's spend store, for reports.
func (e *Enforcer) Store() SpendStore { return e.cfg.Spend }
