package limits

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// The unified headers' values are kept as text (the utilisation's hundredths, each bucket's
// reset): each must be what formatting the value writes, byte for byte.
func TestUnifiedHeaderTextsAreTheFormattedValues(t *testing.T) {
	header := func(u *unified, name uint8) string {
		for i := range u.n {
			if u.names[i] == name {
				return u.vals[i]
			}
		}
		return ""
	}
	t.Run("the utilisation is rounded to hundredths, below 1 until the cap is reached", func(t *testing.T) {
		const cap = tokens.Money(3_000_000_007) // a cap whose hundredths are no round amounts
		for spent := tokens.Money(0); spent <= 2*cap; spent += cap / 997 {
			s := standing{cap: cap, spent: spent, exceeded: spent >= cap, resetText: "1"}
			want := float64(int64(float64(spent)/float64(cap)*100+0.5)) / 100
			if !s.exceeded {
				want = min(want, 0.99)
			}
			var u unified
			unifiedHeaders(&u, &s, time.Unix(0, 0), "")
			if got := header(&u, nOverUtil); got != strconv.FormatFloat(want, 'f', -1, 64) {
				t.Fatalf("spent %d of %d: utilization %q, want %v", spent, cap, got, want)
			}
		}
	})
	t.Run("the reset is the bucket's end in Unix seconds, across the buckets' ends", func(t *testing.T) {
		for _, p := range []policy.Period{policy.Daily, policy.Weekly, policy.Monthly} {
			for at := time.Date(2026, 12, 28, 0, 0, 0, 0, time.UTC); at.Before(time.Date(2027, 2, 3, 0, 0, 0, 0, time.UTC)); at = at.Add(7 * time.Hour) {
				w := bucketOf(p, at)
				if _, reset := Bucket(p, at); w.resetText != strconv.FormatInt(reset.Unix(), 10) {
					t.Fatalf("%s at %s: reset %q, want %d", p, at, w.resetText, reset.Unix())
				}
			}
		}
	})
}

// The memory store settles the counters a settle names, whether or not they are the ones its
// id held (a request's settle names them, a batch's may not).
func TestAMemorySettleChargesTheCountersItNames(t *testing.T) {
	ctx := context.Background()
	held := []Counter{{Bucket: "2026-12-03", Cap: usd(100)}, {User: "u", Bucket: "2026-12-03", Cap: usd(100)}}
	other := []Counter{{Bucket: "2026-12"}, {User: "v", Bucket: "2026-12-03"}}
	cases := []struct {
		name    string
		settled []Counter
	}{
		{"the counters the id holds", held},
		{"other counters than the id holds", other},
		{"fewer counters than the id holds", held[1:]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewMemoryStore()
			if r, err := s.Reserve(ctx, "a", "t1", held, usd(50), time.Minute); err != nil || r.Refused != -1 {
				t.Fatalf("reserve = %+v, %v", r, err)
			}
			if err := s.Settle(ctx, "a", "t1", c.settled, usd(7)); err != nil {
				t.Fatal(err)
			}
			for _, cs := range [][]Counter{held, other} {
				for _, k := range cs {
					got, _ := s.Spent(ctx, "t1", []Counter{k})
					want := tokens.Money(0)
					for _, n := range c.settled {
						if n == k {
							want = usd(7)
						}
					}
					if got[0] != want {
						t.Errorf("counter %+v spent %v, want %v", k, got[0], want)
					}
				}
			}
			if r, _ := s.Reserve(ctx, "b", "t1", held, usd(1), time.Minute); r.Reserved[0] != 0 || r.Reserved[1] != 0 {
				t.Errorf("the settled id still holds: %+v", r)
			}
		})
	}
}

// The per-minute limits are taken in order: a request refused by its input tokens has had its
// request counted, as each limit's store charges it on its own.
func TestARateRefusalKeepsTheLimitsTakenBeforeIt(t *testing.T) {
	r := newRig(t)
	pol := parsePolicy(t, "limits:\n  requests_per_minute: 2\n  input_tokens_per_minute: 100\n")
	req := smallRequest(pol, "") // 400 bytes: 100 input tokens, the whole allowance
	if _, ref := r.e.Admit(context.Background(), req); ref != nil {
		t.Fatal(ref.Message)
	}
	for _, want := range []string{"input_tokens_per_minute", "requests_per_minute"} {
		_, ref := r.e.Admit(context.Background(), req)
		if ref == nil || ref.Limit != want {
			t.Fatalf("refusal %+v, want by %s", ref, want)
		}
	}
}
