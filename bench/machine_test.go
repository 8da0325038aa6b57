package main

import (
	"testing"
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
	if m := readMachineTimes(); m.all <= 0 || m.busy > m.all {
		t.Fatalf("this machine's /proc/stat: %+v", m)
	}
}
