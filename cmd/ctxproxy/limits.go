package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/pgurl"

	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/server"
	"github.com/ctxproxy/ctxproxy/tokens"
)

const defaultPolicies = "./policies"

// reportCaps is spend against caps for `ctxproxy report`, read from the limits store when it is
// PostgreSQL. Counters in a serving process's memory are not reachable from here: it says so
// (when a tenant has caps) and /admin/report of that process shows them.
func reportCaps(ctx context.Context, cfg *config, tenant string, stderr io.Writer) ([]tokens.CapRow, error) {
	dir := cfg.Policies
	if dir == "" {
		// Not asked for: the caps are shown when the default folder is there.
		if _, err := os.Stat(defaultPolicies); err != nil {
			return nil, nil
		}
		dir = defaultPolicies
	}
	set, err := policy.LoadDirWithoutKeys(dir) // a report calls no upstream: it needs no tenant's key
	if err != nil {
		return nil, fmt.Errorf("--policies: %w", err)
	}
	capped := false
	for _, p := range set.Tenants() {
		capped = capped || ((tenant == "" || p.Tenant == tenant) && p.Limits.Capped())
	}
	if !capped {
		return nil, nil
	}
	u := server.LimitsStoreURL(cfg.LimitsStore, cfg.Ledger)
	if !pgurl.Is(u) {
		fmt.Fprintln(stderr, "ctxproxy report: spend counters are in the serving process's memory (no PostgreSQL --limits-store or --ledger): see its /admin/report")
		return nil, nil
	}
	st, err := limits.ReadPGStore(ctx, u) // a report writes no schema
	if err != nil {
		return nil, fmt.Errorf("--limits-store: %w", err)
	}
	defer st.Close()
	return limits.Caps(ctx, st, set, tenant, time.Now())
}
