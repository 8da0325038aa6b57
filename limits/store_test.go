package limits

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/pgtest"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// stores runs fn against every SpendStore: memory, and PostgreSQL in a schema of its own.
func stores(t *testing.T, fn func(t *testing.T, s SpendStore)) {
	t.Run("memory", func(t *testing.T) { fn(t, NewMemoryStore()) })
	t.Run("postgres", func(t *testing.T) { fn(t, openPG(t)) })
}

func openPG(t testing.TB) *PGStore {
	t.Helper()
	db := pgtest.New(t, "limits_test")
	s, err := OpenPGStore(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func usd(cents int64) tokens.Money { return tokens.Money(cents) * tokens.NanosPerUSD / 100 }

func TestSpendStores(t *testing.T) {
	ctx := context.Background()
	day := []Counter{{Bucket: "2026-12-03", Cap: usd(100)}}
	stores(t, func(t *testing.T, s SpendStore) {
		t.Run("a hold counts against the cap until it is settled with the real cost", func(t *testing.T) {
			r, err := s.Reserve(ctx, "a", "t1", day, usd(60), time.Minute)
			if err != nil || r.Refused != -1 || r.Spent[0] != 0 || r.Reserved[0] != 0 {
				t.Fatalf("first reserve = %+v, %v", r, err)
			}
			r, err = s.Reserve(ctx, "b", "t1", day, usd(50), time.Minute)
			if err != nil || r.Refused != 0 || r.Reserved[0] != usd(60) {
				t.Fatalf("second reserve (60 held + 50 > 100) = %+v, %v", r, err)
			}
			if err := s.Settle(ctx, "a", "t1", day, usd(10)); err != nil {
				t.Fatal(err)
			}
			r, err = s.Reserve(ctx, "b", "t1", day, usd(50), time.Minute)
			if err != nil || r.Refused != -1 || r.Spent[0] != usd(10) || r.Reserved[0] != 0 {
				t.Fatalf("reserve after settling 10 = %+v, %v", r, err)
			}
			if err := s.Release(ctx, "b"); err != nil {
				t.Fatal(err)
			}
			got, err := s.Spent(ctx, "t1", day)
			if err != nil || got[0] != usd(10) {
				t.Fatalf("spent = %v, %v; want 0.10 (a release charges nothing)", got, err)
			}
		})
		t.Run("a request fits exactly at the cap and not a nano-dollar past it", func(t *testing.T) {
			c := []Counter{{Bucket: "2026-12", Cap: usd(100)}}
			if r, err := s.Reserve(ctx, "x", "t2", c, usd(100)+1, time.Minute); err != nil || r.Refused != 0 {
				t.Fatalf("over by one = %+v, %v", r, err)
			}
			if r, err := s.Reserve(ctx, "x", "t2", c, usd(100), time.Minute); err != nil || r.Refused != -1 {
				t.Fatalf("exactly the cap = %+v, %v", r, err)
			}
		})
		t.Run("a hold nobody settles expires", func(t *testing.T) {
			c := []Counter{{Bucket: "2026-W49", Cap: usd(100)}}
			if r, err := s.Reserve(ctx, "dead", "t3", c, usd(100), time.Millisecond); err != nil || r.Refused != -1 {
				t.Fatalf("reserve = %+v, %v", r, err)
			}
			time.Sleep(5 * time.Millisecond) // the hold's whole life; the check below is not about timing
			if r, err := s.Reserve(ctx, "live", "t3", c, usd(100), time.Minute); err != nil || r.Refused != -1 || r.Reserved[0] != 0 {
				t.Fatalf("reserve after the dead replica's hold expired = %+v, %v", r, err)
			}
		})
		t.Run("every counter must have room: the user's cap refuses when the tenant's would not", func(t *testing.T) {
			cs := []Counter{{Bucket: "2026-12-03", Cap: usd(1000)}, {User: "u1", Bucket: "2026-12-03", Cap: usd(5)}}
			if r, err := s.Reserve(ctx, "u", "t4", cs, usd(6), time.Minute); err != nil || r.Refused != 1 {
				t.Fatalf("reserve = %+v, %v; want refused by counter 1", r, err)
			}
			if err := s.Settle(ctx, "v", "t4", cs, usd(3)); err != nil {
				t.Fatal(err)
			}
			got, _ := s.Spent(ctx, "t4", cs)
			if got[0] != usd(3) || got[1] != usd(3) {
				t.Fatalf("spent = %v; a settle charges every counter", got)
			}
			other, _ := s.Spent(ctx, "t5", cs)
			if other[0] != 0 || other[1] != 0 {
				t.Fatalf("another tenant's counters = %v", other)
			}
		})
		t.Run("a batch's hold lives on as the batch's, and its results are claimed once", func(t *testing.T) {
			cs := []Counter{{Bucket: "2026-12-03", Cap: usd(100)}, {User: "u", Bucket: "2026-12-03", Cap: usd(100)}}
			if r, err := s.Reserve(ctx, "bh", "t7", cs, usd(50), time.Millisecond); err != nil || r.Refused != -1 {
				t.Fatalf("reserve = %+v, %v", r, err)
			}
			b := Batch{ID: "msgbatch_1", Tenant: "t7", HoldID: "bh", Counters: cs, KeyID: "0a1b2c3d", User: "ana"}
			if err := s.OpenBatch(ctx, b, time.Hour, time.Hour); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond) // past the request's own hold TTL
			if r, err := s.Reserve(ctx, "x", "t7", cs, usd(60), time.Minute); err != nil || r.Refused != 0 || r.Reserved[0] != usd(50) {
				t.Fatalf("reserve beside the batch = %+v, %v; want its $50 still held", r, err)
			}
			if _, ok, err := s.CloseBatch(ctx, "msgbatch_1", "another"); ok || err != nil {
				t.Fatalf("another tenant closed the batch: %v %v", ok, err)
			}
			got, ok, err := s.CloseBatch(ctx, "msgbatch_1", "t7")
			if !ok || err != nil || got.HoldID != "bh" || got.KeyID != "0a1b2c3d" || got.User != "ana" || len(got.Counters) != 2 ||
				got.Counters[1].User != "u" || got.Counters[1].Bucket != "2026-12-03" {
				t.Fatalf("CloseBatch = %+v %v %v", got, ok, err)
			}
			if _, ok, _ := s.CloseBatch(ctx, "msgbatch_1", "t7"); ok {
				t.Fatal("a batch was closed twice")
			}
			if err := s.Settle(ctx, got.HoldID, "t7", got.Counters, usd(10)); err != nil {
				t.Fatal(err)
			}
			if r, err := s.Reserve(ctx, "y", "t7", cs, usd(60), time.Minute); err != nil || r.Refused != -1 || r.Spent[1] != usd(10) {
				t.Fatalf("reserve after the batch settled = %+v, %v", r, err)
			}
		})
		t.Run("a batch is forgotten after its record's time, and one never recorded cannot be closed", func(t *testing.T) {
			if err := s.OpenBatch(ctx, Batch{ID: "msgbatch_old", Tenant: "t8"}, time.Hour, time.Millisecond); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
			for _, id := range []string{"msgbatch_old", "msgbatch_never"} {
				if _, ok, err := s.CloseBatch(ctx, id, "t8"); ok || err != nil {
					t.Errorf("CloseBatch(%s) = %v, %v", id, ok, err)
				}
			}
		})
		t.Run("concurrent reservations never pass the cap together", func(t *testing.T) {
			c := []Counter{{Bucket: "2026-12-03", Cap: usd(1000)}}
			var mu sync.Mutex
			admitted := 0
			var wg sync.WaitGroup
			for i := range 40 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := s.Reserve(ctx, fmt.Sprint("c", i), "t6", c, usd(100), time.Minute)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Refused == -1 {
						mu.Lock()
						admitted++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if admitted != 10 {
				t.Errorf("admitted %d of 40 holds of $1 under a $10 cap, want 10", admitted)
			}
		})
	})
}

// rates runs fn against every RateStore: memory, PostgreSQL and Redis.
func rates(t *testing.T, fn func(t *testing.T, r RateStore, prefix string)) {
	prefix := fmt.Sprintf("test-%d-%d:", os.Getpid(), time.Now().UnixNano())
	t.Run("memory", func(t *testing.T) { fn(t, NewMemoryRate(), prefix) })
	t.Run("postgres", func(t *testing.T) { fn(t, openPG(t).Rate(), prefix) })
	t.Run("redis", func(t *testing.T) { fn(t, openRedis(t), prefix) })
}

func openRedis(t testing.TB) *RedisRate {
	t.Helper()
	url := os.Getenv("CTXPROXY_TEST_REDIS")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := OpenRedisRate(ctx, url)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Redis required under CI: %v", err)
		}
		t.Skipf("no Redis: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestRateStores(t *testing.T) {
	ctx := context.Background()
	rates(t, func(t *testing.T, r RateStore, prefix string) {
		// 3 a minute: the allowance comes back one every 20 s, far longer than these calls take.
		t.Run("a minute's allowance passes as one burst and the next request is refused", func(t *testing.T) {
			for i := range 3 {
				if ok, _, err := r.Take(ctx, prefix+"burst", 3, 1); err != nil || !ok {
					t.Fatalf("request %d: ok=%v err=%v", i+1, ok, err)
				}
			}
			ok, retry, err := r.Take(ctx, prefix+"burst", 3, 1)
			if err != nil || ok {
				t.Fatalf("request 4: ok=%v err=%v, want refused", ok, err)
			}
			if retry <= 0 || retry > 20*time.Second {
				t.Errorf("retry after %s, want (0, 20s]", retry)
			}
		})
		t.Run("a cost takes that many units; a refused cost charges nothing", func(t *testing.T) {
			if ok, _, _ := r.Take(ctx, prefix+"tokens", 1000, 700); !ok {
				t.Fatal("700 of 1000 refused")
			}
			if ok, _, _ := r.Take(ctx, prefix+"tokens", 1000, 400); ok {
				t.Fatal("700+400 of 1000 admitted")
			}
			if ok, _, _ := r.Take(ctx, prefix+"tokens", 1000, 250); !ok {
				t.Fatal("700+250 of 1000 refused after a refusal that should have charged nothing")
			}
		})
		t.Run("a cost above the whole allowance takes the whole allowance", func(t *testing.T) {
			if ok, _, _ := r.Take(ctx, prefix+"big", 100, 5000); !ok {
				t.Fatal("a request bigger than a minute's allowance is refused even with a full allowance")
			}
			if ok, _, _ := r.Take(ctx, prefix+"big", 100, 1); ok {
				t.Fatal("the allowance was not used up")
			}
		})
	})
}

func TestMemoryRateRefillsEvenly(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	r := NewMemoryRate()
	r.now = func() time.Time { return now }
	for range 60 {
		if ok, _, _ := r.Take(context.Background(), "k", 60, 1); !ok {
			t.Fatal("burst refused")
		}
	}
	if ok, retry, _ := r.Take(context.Background(), "k", 60, 1); ok || retry != time.Second {
		t.Fatalf("61st: ok=%v retry=%s, want refused for 1s", ok, retry)
	}
	now = now.Add(time.Second)
	if ok, _, _ := r.Take(context.Background(), "k", 60, 1); !ok {
		t.Fatal("one second later one request is allowed")
	}
	if ok, _, _ := r.Take(context.Background(), "k", 60, 1); ok {
		t.Fatal("only one")
	}
}
