package tokens

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// randomCalls makes n calls spread over tenants, models, keys and users within the hours
// from start, with every kind of line a report treats differently (edits, unknown prices,
// compactions, count_tokens with and without a measured compaction).
func randomCalls(rng *rand.Rand, n int, start time.Time, hours int) []Call {
	out := make([]Call, n)
	for i := range out {
		user := rng.IntN(40)
		c := Call{
			Time:      start.Add(time.Duration(rng.Int64N(int64(hours) * int64(time.Hour)))).Truncate(time.Microsecond),
			Tenant:    fmt.Sprintf("tenant-%d", user%7),
			Model:     fmt.Sprintf("model-%d", rng.IntN(5)),
			RequestID: fmt.Sprintf("req_%d", i),
			Status:    200,
			Usage: Usage{InputTokens: rng.Int64N(5000), OutputTokens: rng.Int64N(800),
				CacheCreationInputTokens: rng.Int64N(300), CacheReadInputTokens: rng.Int64N(9000)},
			Cost:         Money(rng.Int64N(50_000_000)),
			SavingsGross: Money(rng.Int64N(10_000_000)),
			CacheEffect:  [...]string{CacheNone, CacheMeasured, CacheUnknown}[rng.IntN(3)],
		}
		if c.CacheEffect == CacheMeasured {
			c.CacheMissedInputTokens, c.CacheMissCause = rng.Int64N(4000), CauseEdits
			c.CachePenalty = Money(rng.Int64N(2_000_000))
		}
		c.Savings = c.SavingsGross - c.CachePenalty
		if user%5 != 0 { // some calls carry no key id, some keys no user
			c.KeyID = fmt.Sprintf("%08x", user*7919)
			if user%3 != 0 {
				c.User = fmt.Sprintf("user%d@example.com", user)
			}
		}
		switch rng.IntN(12) {
		case 0:
			c.Edits = []AppliedEdit{{Type: EditClearToolUses, ClearedToolUses: rng.Int64N(9), ClearedInputTokens: rng.Int64N(40000)},
				{Type: EditClearThinking, ClearedThinkingTurns: rng.Int64N(4), ClearedInputTokens: rng.Int64N(900)}}
		case 1:
			c.PriceUnknown, c.Cost, c.Savings, c.SavingsGross, c.CachePenalty = true, 0, 0, 0, 0
		case 2:
			c.Compactions, c.CompactionCost, c.Usage.WebSearchRequests = 1, c.Cost/3, rng.Int64N(3)
		case 3:
			c.Usage, c.Cost, c.Savings, c.SavingsGross, c.CachePenalty = Usage{}, 0, 0, 0, 0
			c.CacheEffect, c.CacheMissedInputTokens, c.CacheMissCause = "", 0, ""
			c.CountTokens = &CountTokens{InputTokens: rng.Int64N(9000)}
			if rng.IntN(2) == 0 {
				c.CompactedInputTokens, c.CompactionSavings = rng.Int64N(5000), Money(rng.Int64N(3_000_000))
			}
		}
		out[i] = c
	}
	return out
}

// benchmarkAppend appends batches of size lines: ns/op is per batch, ns/line per line,
// cpu-ns/line the file ledger's CPU time per line and, for PostgreSQL (backend: the pid of the
// pool's one connection), pgcpu-ns/line the server's: on a loaded machine the CPU times
// stay put where the wall time does not.
func benchmarkAppend(b *testing.B, l BatchLedger, size int, backend int) {
	ctx := context.Background()
	// Lines of one hour, as a Recorder gathers them: a batch is a few milliseconds of calls.
	calls := randomCalls(rand.New(rand.NewPCG(1, 2)), 4096, t0, 1)
	for range 3 { // the statements prepared, the rollup loaded
		if _, err := l.AppendBatch(ctx, calls[:size]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	cpu0, pg0 := processCPU(), threadCPU(backend)
	i := 0
	for b.Loop() {
		if i+size > len(calls) {
			i = 0
		}
		if _, err := l.AppendBatch(ctx, calls[i:i+size]); err != nil {
			b.Fatal(err)
		}
		i += size
	}
	lines := float64(b.N * size)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/lines, "ns/line")
	if backend > 0 {
		b.ReportMetric(float64(threadCPU(backend)-pg0)/lines, "pgcpu-ns/line")
	} else { // a client of PostgreSQL counts its runtime's idle spinning: left out
		b.ReportMetric(float64(processCPU()-cpu0)/lines, "cpu-ns/line")
	}
}

// processCPU is this process's user and system CPU time, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// threadCPU is the CPU time process pid has run, in ns (Linux's schedstat; 0 elsewhere).
func threadCPU(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.Fields(string(s))[0], 10, 64)
	return n
}

// BenchmarkLedgerAppend is the ledger's append cost per line, one line a write and the
// batches a busy Recorder writes, on both stores.
func BenchmarkLedgerAppend(b *testing.B) {
	for _, size := range []int{1, 64} {
		b.Run(fmt.Sprintf("file/batch=%d", size), func(b *testing.B) {
			l, err := OpenFileLedger(filepath.Join(b.TempDir(), "l.jsonl"))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			benchmarkAppend(b, l, size, 0)
		})
		b.Run(fmt.Sprintf("postgres/batch=%d", size), func(b *testing.B) {
			l, backend := openBenchPG(b)
			defer l.Close()
			benchmarkAppend(b, l, size, backend)
		})
	}
}

// openBenchPG opens a PostgreSQL ledger of one connection and returns its backend's pid.
func openBenchPG(b *testing.B) (*PGLedger, int) {
	u, err := url.Parse(pgTestURL(b))
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "1") // one backend, whose CPU is the ledger's
	u.RawQuery = q.Encode()
	l, err := OpenPGLedger(context.Background(), u.String())
	if err != nil {
		b.Fatal(err)
	}
	var backend int
	if err := l.pool.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		l.Close()
		b.Fatal(err)
	}
	return l, backend
}

// BenchmarkLedgerRollupCost is what the rollups add to the append, measured so that the
// machine's load moves both sides alike: in one process, the same store writes batches with
// their rollup and without it in turns of 512 lines, and rollup-x is the CPU per line of the
// first over the second (the file ledger's process; PostgreSQL's one backend, folds included;
// without: the lines' INSERT alone).
func BenchmarkLedgerRollupCost(b *testing.B) {
	for _, size := range []int{1, 64} {
		b.Run(fmt.Sprintf("file/batch=%d", size), func(b *testing.B) {
			dir := b.TempDir()
			with, err := OpenFileLedger(filepath.Join(dir, "with.jsonl"))
			if err != nil {
				b.Fatal(err)
			}
			defer with.Close()
			without, err := OpenFileLedger(filepath.Join(dir, "without.jsonl"))
			if err != nil {
				b.Fatal(err)
			}
			defer without.Close()
			without.rf.Close()
			without.rf = nil // as a ledger that is not a regular file: no rollup
			benchmarkTurns(b, size, processCPU, with.AppendBatch, without.AppendBatch)
		})
		b.Run(fmt.Sprintf("postgres/batch=%d", size), func(b *testing.B) {
			l, backend := openBenchPG(b)
			defer l.Close()
			without := func(ctx context.Context, cs []Call) (int, error) {
				sql, args := pgLinesInsert(cs, nil)
				_, err := l.pool.Exec(ctx, sql, args...)
				return len(cs), err
			}
			benchmarkTurns(b, size, func() int64 { return threadCPU(backend) }, l.AppendBatch, without)
		})
	}
}

// benchmarkTurns appends batches of size lines with with and without in turns of 512 lines
// (an op is one turn of each) and reports the CPU per line of each (cpu: ns) and rollup-x,
// the median of the turns' ratios: a checkpoint or a new WAL segment lands in one turn, and
// moves the sums, not the median.
func benchmarkTurns(b *testing.B, size int, cpu func() int64, with, without func(context.Context, []Call) (int, error)) {
	ctx := context.Background()
	calls := randomCalls(rand.New(rand.NewPCG(1, 2)), 4096, t0, 1)
	appends := [2]func(context.Context, []Call) (int, error){with, without}
	for _, f := range appends { // the statements prepared, the rollup loaded
		for range 3 {
			if _, err := f(ctx, calls[:size]); err != nil {
				b.Fatal(err)
			}
		}
	}
	var spent, lines [2]int64
	var ratios []float64
	i := 0
	for b.Loop() {
		var turn [2]int64
		for side, f := range appends {
			c0 := cpu()
			for n := 0; n < 512; n += size {
				if i+size > len(calls) {
					i = 0
				}
				if _, err := f(ctx, calls[i:i+size]); err != nil {
					b.Fatal(err)
				}
				i += size
				lines[side] += int64(size)
			}
			turn[side] = cpu() - c0
			spent[side] += turn[side]
		}
		ratios = append(ratios, float64(turn[0])/float64(max(turn[1], 1)))
	}
	slices.Sort(ratios)
	b.ReportMetric(float64(spent[0])/float64(lines[0]), "cpu-ns/line")
	b.ReportMetric(float64(spent[1])/float64(lines[1]), "cpu-ns/line-without")
	b.ReportMetric(ratios[len(ratios)/2], "rollup-x")
}
