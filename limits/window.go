package limits

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// WindowStore counts events per key over a rolling window, shared by whoever shares the store: at
// most max events in any window, exactly (a log of the events, not a cell rate). The memory
// gate's max_writes_per_minute counts a user's writes in it, so that replicas sharing the
// limiter's store count one allowance. The shared rate stores (PostgreSQL, Redis) are
// WindowStores; the in-process one is not (the gate counts in its process then).
type WindowStore interface {
	// TakeWindow counts one event of key when fewer than max fall in the window before now;
	// otherwise it counts nothing and retryAfter is how long until one leaves the window.
	TakeWindow(ctx context.Context, key string, max int64, window time.Duration) (ok bool, retryAfter time.Duration, err error)
}

// Window is the enforcer's rate store as a WindowStore, nil when it is not shared (in-process).
func (e *Enforcer) Window() WindowStore {
	w, _ := e.cfg.Rate.(WindowStore)
	return w
}

// TakeWindow counts in table ctxproxy_window (the limits schema's version 4), under a
// transaction-scoped advisory lock on the key, on the database's clock.
func (p *PGRate) TakeWindow(ctx context.Context, key string, max int64, window time.Duration) (bool, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, p.s.timeout)
	defer cancel()
	var wait int64
	if err := p.s.pool.QueryRow(ctx, `SELECT ctxproxy_window_take($1, $2, $3)`, key, max, window.Nanoseconds()).Scan(&wait); err != nil {
		return false, 0, fmt.Errorf("rolling window: %w", err)
	}
	if wait == 0 {
		return true, 0, nil
	}
	return false, time.Duration(wait), nil
}

// windowScript keeps a key's events in a sorted set scored by the server's clock in
// microseconds; one round trip, atomic as every script is. It returns 0 when the event was
// counted, else the microseconds until the oldest counted one leaves the window.
var windowScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local max, window = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local n = redis.call('ZCARD', KEYS[1])
if n < max then
	redis.call('ZADD', KEYS[1], now, ARGV[3])
	redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000))
	return 0
end
local oldest = redis.call('ZRANGE', KEYS[1], n - max, n - max, 'WITHSCORES')
return math.max(tonumber(oldest[2]) + window - now, 1)
`)

// TakeWindow counts in a sorted set under key (prefixed ctxproxy:window:).
func (r *RedisRate) TakeWindow(ctx context.Context, key string, max int64, window time.Duration) (bool, time.Duration, error) {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return false, 0, err
	}
	wait, err := windowScript.Run(ctx, r.rdb, []string{"ctxproxy:window:" + key}, max, window.Microseconds(), hex.EncodeToString(id[:])).Int64()
	if err != nil {
		return false, 0, fmt.Errorf("rolling window: %w", err)
	}
	if wait == 0 {
		return true, 0, nil
	}
	return false, time.Duration(wait) * time.Microsecond, nil
}
