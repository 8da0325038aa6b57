package limits

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/pgtest"
)

// windows runs fn against each shared WindowStore, twice opened (two replicas on one store).
func windows(t *testing.T, fn func(t *testing.T, a, b WindowStore, prefix string)) {
	prefix := fmt.Sprintf("test-%d-%d:", os.Getpid(), time.Now().UnixNano())
	t.Run("postgres", func(t *testing.T) {
		db := pgtest.New(t, "limits_window_test")
		open := func() WindowStore {
			s, err := OpenPGStore(t.Context(), db.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			return s.Rate()
		}
		fn(t, open(), open(), prefix)
	})
	t.Run("redis", func(t *testing.T) { fn(t, openRedis(t), openRedis(t), prefix) })
}

func TestWindowStores(t *testing.T) {
	ctx := context.Background()
	windows(t, func(t *testing.T, a, b WindowStore, prefix string) {
		// A window of an hour: nothing leaves it while the test runs, however slow the machine.
		t.Run("at most max events in the window, counted across the replicas", func(t *testing.T) {
			for i, w := range []WindowStore{a, b, a} {
				if ok, _, err := w.TakeWindow(ctx, prefix+"alice", 3, time.Hour); err != nil || !ok {
					t.Fatalf("event %d: ok=%v err=%v", i+1, ok, err)
				}
			}
			for _, w := range []WindowStore{a, b} {
				ok, retry, err := w.TakeWindow(ctx, prefix+"alice", 3, time.Hour)
				if err != nil || ok {
					t.Fatalf("event 4: ok=%v err=%v, want refused", ok, err)
				}
				if retry <= 0 || retry > time.Hour {
					t.Errorf("retry after %s, want (0, 1h]", retry)
				}
			}
			if ok, _, err := b.TakeWindow(ctx, prefix+"bob", 3, time.Hour); err != nil || !ok {
				t.Fatalf("another key is counted apart: ok=%v err=%v", ok, err)
			}
		})
		t.Run("concurrent events from both replicas are counted one after the other", func(t *testing.T) {
			var wg sync.WaitGroup
			var mu sync.Mutex
			passed := 0
			for i := range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					w := []WindowStore{a, b}[i%2]
					ok, _, err := w.TakeWindow(ctx, prefix+"burst", 7, time.Hour)
					if err != nil {
						t.Error(err)
					}
					if ok {
						mu.Lock()
						passed++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if passed != 7 {
				t.Errorf("%d of 20 concurrent events passed, want 7", passed)
			}
		})
		t.Run("an event leaves the window when it is older than the window", func(t *testing.T) {
			// A window of one microsecond (Redis's clock unit): the first event has left it by the
			// time the second arrives, which a round trip takes longer than.
			for i := range 2 {
				if ok, _, err := a.TakeWindow(ctx, prefix+"short", 1, time.Microsecond); err != nil || !ok {
					t.Fatalf("event %d: ok=%v err=%v", i+1, ok, err)
				}
			}
		})
	})
}

func TestOnlySharedRateStoresAreWindowStores(t *testing.T) {
	if w := New(Config{Spend: NewMemoryStore(), Rate: NewMemoryRate()}).Window(); w != nil {
		t.Errorf("the in-process rate store is a shared window: %T", w)
	}
	if w := New(Config{Spend: NewMemoryStore(), Rate: openRedis(t)}).Window(); w == nil {
		t.Error("Redis is not a shared window")
	}
}
