package tokens

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
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

// benchmarkAppend appends batches of size lines: ns/op is per batch, ns/line per line.
func benchmarkAppend(b *testing.B, l BatchLedger, size int) {
	ctx := context.Background()
	// Lines of one hour, as a Recorder gathers them: a batch is a few milliseconds of calls.
	calls := randomCalls(rand.New(rand.NewPCG(1, 2)), 4096, t0, 1)
	b.ReportAllocs()
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
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/line")
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
			benchmarkAppend(b, l, size)
		})
		b.Run(fmt.Sprintf("postgres/batch=%d", size), func(b *testing.B) {
			l, err := OpenPGLedger(context.Background(), pgTestURL(b))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			benchmarkAppend(b, l, size)
		})
	}
}
