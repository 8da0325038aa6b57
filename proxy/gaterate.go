package proxy

import (
	"context"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// gateRate is what counts the memory gate's writes per user (max_writes_per_minute): the limits
// store's rolling windows when replicas share one (PostgreSQL or Redis), so that a user has one
// allowance however the replicas share their requests; else this process's count.
func gateRate(e *limits.Enforcer, log *zap.Logger) memoryhook.WriteCounter {
	local := memoryhook.NewWriteRate(nil)
	if e == nil {
		return local
	}
	if w := e.Window(); w != nil {
		return &sharedWriteRate{window: w, local: local, log: log}
	}
	return local
}

// sharedWriteRate counts in the shared store; when the store fails, the write is counted in
// this process instead (logged with the tenant and the cause): a store outage neither stops
// the model's memory nor lifts the limit.
type sharedWriteRate struct {
	window limits.WindowStore
	local  *memoryhook.WriteRate
	log    *zap.Logger
}

func (r *sharedWriteRate) Allow(ctx context.Context, who string, max int) bool {
	ok, _, err := r.window.TakeWindow(ctx, "memory-gate:"+who, int64(max), time.Minute)
	if err != nil {
		tenant, _, _ := strings.Cut(who, "/")
		r.log.Error("memory gate: the limits store failed; counting this replica's writes alone",
			zap.String("tenant", tenant), zap.Error(err))
		return r.local.Allow(ctx, who, max)
	}
	return ok
}
