package main

import (
	"errors"
	"runtime"
	"testing"
	"time"
)

func TestParseMachineTimes(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       machineTimes
	}{
		{"idle and iowait are not busy; guest is in user already",
			"cpu  100 5 50 1000 20 3 2 1 40 0\n", machineTimes{busy: 161 * clockTick, all: 1181 * clockTick}},
		{"a line that is not the total is nothing", "cpu0 1 2 3 4 5 6 7 8\n", machineTimes{}},
		{"a short line is nothing", "cpu 1 2 3\n", machineTimes{}},
		{"a field that is not a number is nothing", "cpu 1 2 x 4 5 6 7 8\n", machineTimes{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseMachineTimes(tc.line); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if runtime.GOOS != "linux" {
		return // no /proc/stat: the bench's machine notes are empty there
	}
	if m := readMachineTimes(); m.all <= 0 || m.busy > m.all {
		t.Fatalf("this machine's /proc/stat: %+v", m)
	}
}

func TestMedianOfRuns(t *testing.T) {
	run := func(rps float64, p50 time.Duration, cpu time.Duration, err error) *cell {
		return &cell{rps: rps, p50: p50, p99: 10 * p50, cpu: cpu * 100, cpuN: 100, err: err}
	}
	t.Run("req/s, p50, p99 and CPU per request are each the runs' median", func(t *testing.T) {
		got := medianOfRuns([]*cell{
			run(300, 520*time.Microsecond, 1300*time.Microsecond, nil),
			run(320, 470*time.Microsecond, 1200*time.Microsecond, nil),
			run(310, 490*time.Microsecond, 1400*time.Microsecond, nil),
		})
		if got.rps != 310 || got.p50 != 490*time.Microsecond || got.p99 != 4900*time.Microsecond || got.cpuPer() != 1300*time.Microsecond {
			t.Fatalf("got rps %v p50 %v p99 %v cpu/req %v", got.rps, got.p50, got.p99, got.cpuPer())
		}
	})
	t.Run("a failed run does not count", func(t *testing.T) {
		got := medianOfRuns([]*cell{
			run(0, time.Second, time.Second, errors.New("refused")),
			run(320, 470*time.Microsecond, 1200*time.Microsecond, nil),
			run(310, 490*time.Microsecond, 1400*time.Microsecond, nil),
		})
		if got.err != nil || got.p50 == time.Second || got.cpuPer() == time.Second {
			t.Fatalf("the failed run counted: %+v", got)
		}
	})
}
