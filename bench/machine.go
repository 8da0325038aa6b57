package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// machineTimes is the whole machine's CPU time from /proc/stat: what every process and the kernel
// used (busy) out of all the CPUs' time (all). A server that is cheap itself but makes the fake
// upstream or the load generator work harder (cache it evicts, smaller reads it causes) shows here.
type machineTimes struct {
	busy, all time.Duration
}

func (m machineTimes) add(o machineTimes) machineTimes {
	return machineTimes{m.busy + o.busy, m.all + o.all}
}
func (m machineTimes) sub(o machineTimes) machineTimes {
	return machineTimes{m.busy - o.busy, m.all - o.all}
}

// readMachineTimes reads /proc/stat's first line (zero where there is none): user nice system
// idle iowait irq softirq steal, in USER_HZ ticks.
func readMachineTimes() machineTimes {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return machineTimes{}
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return machineTimes{}
	}
	return parseMachineTimes(line)
}

func parseMachineTimes(line string) machineTimes {
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return machineTimes{}
	}
	var m machineTimes
	for i, f := range fields[1:9] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return machineTimes{}
		}
		d := time.Duration(n) * clockTick
		m.all += d
		if i != 3 && i != 4 { // idle, iowait
			m.busy += d
		}
	}
	return m
}

// machineNotes says, per row of the small and large loads, the whole machine's CPU per request
// over the throughput phase and how much of it stayed idle.
func (r *runner) machineNotes(b *strings.Builder) {
	var lines []string
	for _, cl := range r.cells {
		if cl.mach.all <= 0 || cl.n <= 0 || cl.load == "streams" {
			continue
		}
		per := func(d time.Duration) time.Duration { return (d / time.Duration(cl.n)).Round(time.Microsecond) }
		lines = append(lines, fmt.Sprintf("- row %s, %s: %v CPU per request (the fake upstream's %v), %.0f%% idle",
			cl.row.id, cl.load, per(cl.mach.busy), per(cl.fakeCPU),
			100*float64(cl.mach.all-cl.mach.busy)/float64(cl.mach.all)))
	}
	if len(lines) == 0 {
		return
	}
	b.WriteString("\n### The whole machine during the throughput phase\n\n" +
		"Every process's CPU (the load generator, the fake upstream, the server, the kernel's own work) per request served, and the share of " +
		"the CPUs left idle, from /proc/stat over each row's slices.\n\n" + strings.Join(lines, "\n") + "\n")
}
