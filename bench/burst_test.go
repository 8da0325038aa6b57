package main

import (
	"strings"
	"testing"
	"time"
)

func TestBurstVerdict(t *testing.T) {
	sample := func(when, server string, conns, goroutines int, live uint64) burstSample {
		s := burstSample{when: when, server: server, n: 100, p50: 400 * time.Microsecond, upstream: conns}
		s.stats.Goroutines, s.stats.HeapLive = goroutines, live
		return s
	}
	const mib = 1 << 20
	for _, tc := range []struct {
		name string
		rows []burstSample
		want string
	}{
		{"the last point decides: a pool that was trimmed passes", []burstSample{
			sample("before the burst", "long-running", 1, 20, 4*mib),
			sample("+10s", "long-running", 500, 1020, 9*mib), sample("+10s", "fresh copy", 1, 20, 4*mib),
			sample("+30s", "long-running", 1, 22, 4*mib), sample("+30s", "fresh copy", 1, 20, 4*mib),
		}, "- PASS at +30s"},
		{"idle upstream connections kept after the burst miss", []burstSample{
			sample("+30s", "long-running", 40, 100, 4*mib), sample("+30s", "fresh copy", 1, 20, 4*mib),
		}, "- MISS at +30s"},
		{"a live heap grown past a quarter and 1 MiB misses", []burstSample{
			sample("+30s", "long-running", 1, 20, 8*mib), sample("+30s", "fresh copy", 1, 20, 4*mib),
		}, "- MISS at +30s"},
		{"no point with both servers says so", []burstSample{
			sample("before the burst", "long-running", 1, 20, 4*mib),
		}, "- no point measured both servers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := burstVerdict(tc.rows); !strings.Contains(got, tc.want) {
				t.Fatalf("verdict:\n%s\nwant a line with %q", got, tc.want)
			}
		})
	}
}
