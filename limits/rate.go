package limits

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// RateStore is a per-minute limiter shared by whoever shares the store. Every implementation is
// GCRA (the generic cell rate algorithm) with the burst equal to the limit: a tenant may spend a
// whole minute's allowance back to back, and the allowance then comes back evenly over the
// minute (one request every 60s/limit), so there is no window edge at which twice the limit
// passes.
type RateStore interface {
	// Take charges cost (at most perMinute) against key. When that would pass the limit nothing
	// is charged and retryAfter is how long until it would fit.
	Take(ctx context.Context, key string, perMinute, cost int64) (ok bool, retryAfter time.Duration, err error)
	Name() string
}

const minute = time.Minute

// increment is the time cost units take at perMinute, in nanoseconds: minute × cost / perMinute,
// exact in 128 bits (cost is at most perMinute, so the result is at most a minute).
func increment(perMinute, cost int64) int64 {
	hi, lo := bits.Mul64(uint64(minute), uint64(cost))
	q, _ := bits.Div64(hi, lo, uint64(perMinute))
	return int64(q)
}

// gcra is one step of the algorithm on a theoretical arrival time, in nanoseconds.
func gcra(tat, now, perMinute, cost int64) (newTAT int64, ok bool, retryAfter time.Duration) {
	inc := increment(perMinute, cost)
	newTAT = max(tat, now) + inc
	if over := newTAT - now - int64(minute); over > 0 {
		return tat, false, time.Duration(over)
	}
	return newTAT, true, 0
}

// MemoryRate is a RateStore of one process.
type MemoryRate struct {
	mu  sync.Mutex
	now func() time.Time
	tat map[string]int64
}

// NewMemoryRate returns an empty in-process limiter.
func NewMemoryRate() *MemoryRate { return &MemoryRate{now: time.Now, tat: map[string]int64{}} }

func (m *MemoryRate) Name() string { return "memory" }

func (m *MemoryRate) Take(_ context.Context, key string, perMinute, cost int64) (bool, time.Duration, error) {
	i, retry := m.takeAll([]rateTake{{key: key, perMinute: perMinute, cost: cost}})
	return i < 0, retry, nil
}

// rateTake is one Take of MemoryRate.takeAll; perMinute 0 takes nothing.
type rateTake struct {
	key             string
	perMinute, cost int64
}

// takeAll is Take of each of ts in turn, until one does not fit: its index and retry-after, -1
// when all fit (what the takes before it charged stays charged, as with Take one by one). The
// takes share one lock and one reading of the clock: every admission makes two.
func (m *MemoryRate) takeAll(ts []rateTake) (refused int, retryAfter time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now().UnixNano()
	for i, t := range ts {
		if t.perMinute <= 0 {
			continue
		}
		tat, ok, retry := gcra(m.tat[t.key], now, t.perMinute, min(t.cost, t.perMinute))
		m.tat[t.key] = tat
		if !ok {
			return i, retry
		}
	}
	return -1, 0
}

// PGRate is the limiter in PostgreSQL (table ctxproxy_rate of the limits schema): one row per key,
// updated by one statement under its row lock, on the database's clock.
type PGRate struct{ s *PGStore }

// Rate is the store's per-minute limiter.
func (s *PGStore) Rate() *PGRate { return &PGRate{s: s} }

func (p *PGRate) Name() string { return "postgres" }

func (p *PGRate) Take(ctx context.Context, key string, perMinute, cost int64) (bool, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, p.s.timeout)
	defer cancel()
	inc, period := increment(perMinute, min(cost, perMinute)), int64(minute)
	var over int64
	if err := p.s.pool.QueryRow(ctx, `SELECT ctxproxy_rate_take($1, $2, $3)`, key, inc, period).Scan(&over); err != nil {
		return false, 0, fmt.Errorf("rate limit: %w", err)
	}
	if over == 0 {
		return true, 0, nil
	}
	return false, time.Duration(max(over, int64(time.Millisecond))), nil
}

// RedisRate is the limiter in Redis, with go-redis/redis_rate's GCRA script (one round trip).
type RedisRate struct {
	rdb *redis.Client
	lim *redis_rate.Limiter
}

// OpenRedisRate connects to a redis:// URL and checks it answers.
func OpenRedisRate(ctx context.Context, url string) (*RedisRate, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("open rate limit store: %w", err)
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("open rate limit store %s: %w", opt.Addr, err)
	}
	return &RedisRate{rdb: rdb, lim: redis_rate.NewLimiter(rdb)}, nil
}

func (r *RedisRate) Name() string { return "redis" }

// Close closes the client.
func (r *RedisRate) Close() error { return r.rdb.Close() }

func (r *RedisRate) Take(ctx context.Context, key string, perMinute, cost int64) (bool, time.Duration, error) {
	lim := redis_rate.Limit{Rate: int(perMinute), Burst: int(perMinute), Period: minute}
	res, err := r.lim.AllowN(ctx, key, lim, int(min(cost, perMinute)))
	if err != nil {
		return false, 0, fmt.Errorf("rate limit: %w", err)
	}
	if res.Allowed > 0 {
		return true, 0, nil
	}
	return false, max(res.RetryAfter, time.Millisecond), nil
}
