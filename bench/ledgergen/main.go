// Command ledgergen writes synthetic ledger lines through the ledger's own append path (so a
// store keeps its rollups as in production), for timing reports on a month of calls
// :
//
//	go run ./bench/ledgergen -ledger postgres://postgres@127.0.0.1:5432/ledger10m -n 10000000
//	go run ./bench/ledgergen -ledger file:/tmp/ledger.jsonl -n 1000000 -month 2026-11
//
// The lines spread over the UTC calendar month given (default the current one), in time
// order as a proxy writes them, over 100 tenants, 10 models and 1,000 users (each user a key
// of one tenant; one call in ten made with a tenant key of no user), priced with the built-in
// prices; a few clear tool uses, a few are cut streams, count_tokens calls or priceless models.
// The same -seed makes the same lines.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/tokens"
)

const (
	tenants = 100
	users   = 1000
)

// models are the ten models calls name, the first ones the busiest; the last has no price.
var models = []string{
	"claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001", "claude-opus-4-8", "claude-sonnet-4-6",
	"claude-opus-4-6", "claude-sonnet-5", "claude-opus-5", "claude-haiku-5-5", "claude-opus-4-1-20250805",
	"claude-unpriced-9",
}

func main() {
	spec := flag.String("ledger", "", "ledger to write to: file:PATH or a postgres:// URL")
	n := flag.Int("n", 1_000_000, "lines to write")
	month := flag.String("month", time.Now().UTC().Format("2006-01"), "UTC calendar month the lines spread over (YYYY-MM)")
	batch := flag.Int("batch", 1000, "lines per append (one write, one INSERT)")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	if *spec == "" || *n <= 0 || *batch <= 0 {
		fmt.Fprintln(os.Stderr, "usage: ledgergen -ledger file:PATH|postgres://… -n N [-month YYYY-MM] [-batch 1000]")
		os.Exit(2)
	}
	start, err := time.Parse("2006-01", *month)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ledgergen: -month %q: want YYYY-MM\n", *month)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *spec, *n, *batch, start, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "ledgergen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, spec string, n, batch int, start time.Time, seed uint64) error {
	l, err := tokens.OpenLedger(ctx, spec)
	if err != nil {
		return err
	}
	bl, ok := l.(tokens.BatchLedger)
	if !ok {
		l.Close()
		return fmt.Errorf("%s does not append in batches", spec)
	}
	g := newGen(seed, start, start.AddDate(0, 1, 0), n)
	// One batch is made while the one before is written.
	batches := make(chan []tokens.Call, 2)
	go func() {
		defer close(batches)
		for done := 0; done < n; {
			size := min(batch, n-done)
			cs := make([]tokens.Call, size)
			for i := range cs {
				cs[i] = g.call(done + i)
			}
			select {
			case batches <- cs:
			case <-ctx.Done():
				return
			}
			done += size
		}
	}()
	began, written, last := time.Now(), 0, time.Now()
	for cs := range batches {
		if _, err := bl.AppendBatch(ctx, cs); err != nil {
			l.Close()
			return fmt.Errorf("after %d lines: %w", written, err)
		}
		written += len(cs)
		if time.Since(last) > 10*time.Second {
			last = time.Now()
			fmt.Fprintf(os.Stderr, "ledgergen: %d of %d lines, %.0f lines/s\n", written, n, float64(written)/time.Since(began).Seconds())
		}
	}
	if err := l.Close(); err != nil {
		return err
	}
	if written < n {
		return fmt.Errorf("stopped after %d of %d lines: %w", written, n, ctx.Err())
	}
	el := time.Since(began)
	fmt.Printf("ledgergen: wrote %d lines to %s in %s (%.0f lines/s, %.1f µs a line)\n",
		written, redact(spec), el.Round(time.Millisecond), float64(written)/el.Seconds(), float64(el.Microseconds())/float64(written))
	return nil
}

// gen makes the lines: line i of n at start + i/n of the month, with a jitter of its own.
type gen struct {
	rng        *rand.Rand
	prices     *tokens.Prices
	start      time.Time
	step       time.Duration
	userKeys   [users]string
	tenantKeys [tenants]string
}

func newGen(seed uint64, start, end time.Time, n int) *gen {
	g := &gen{rng: rand.New(rand.NewPCG(seed, 33)), prices: tokens.BuiltinPrices(), start: start,
		step: end.Sub(start) / time.Duration(n)}
	for i := range g.userKeys {
		g.userKeys[i] = fmt.Sprintf("%08x", uint32(i)*2654435761)
	}
	for i := range g.tenantKeys {
		g.tenantKeys[i] = fmt.Sprintf("%08x", uint32(i+users)*2654435761)
	}
	return g
}

func (g *gen) call(i int) tokens.Call {
	r := g.rng
	t := g.start.Add(time.Duration(i)*g.step + time.Duration(r.Int64N(int64(g.step)+1)))
	// Models: the first busiest (about half the calls on the first two).
	m := min(int(r.ExpFloat64()*2.5), len(models)-1)
	c := tokens.Call{
		Time: t, Model: models[m], RequestID: fmt.Sprintf("req_gen%09d", i), MessageID: fmt.Sprintf("msg_gen%09d", i),
		Stream: r.IntN(3) > 0, Status: 200,
		Usage: tokens.Usage{InputTokens: 200 + r.Int64N(8000), OutputTokens: 50 + r.Int64N(2000),
			CacheCreationInputTokens: r.Int64N(3000), CacheReadInputTokens: r.Int64N(60000)},
	}
	if u := r.IntN(users + users/9); u < users {
		c.Tenant, c.KeyID, c.User = fmt.Sprintf("tenant-%03d", u%tenants), g.userKeys[u], fmt.Sprintf("user%04d@example.com", u)
	} else {
		tn := r.IntN(tenants)
		c.Tenant, c.KeyID = fmt.Sprintf("tenant-%03d", tn), g.tenantKeys[tn]
	}
	switch k := r.IntN(100); {
	case k < 30:
		c.Edits = []tokens.AppliedEdit{{Type: tokens.EditClearToolUses, ClearedToolUses: 1 + r.Int64N(8), ClearedInputTokens: 1000 + r.Int64N(40000)}}
		c.CacheEffect = tokens.CacheMeasured
		if r.IntN(8) == 0 {
			c.CacheMissedInputTokens, c.CacheMissCause = r.Int64N(4000), tokens.CauseEdits
		}
	case k < 33:
		c.Usage.OutputTokens, c.Cut = 4096, true
	case k < 35:
		c.Usage = tokens.Usage{}
		c.CountTokens = &tokens.CountTokens{InputTokens: 1000 + r.Int64N(90000)}
	}
	if c.CountTokens == nil {
		g.prices.Price(&c)
	}
	return c
}

// redact leaves a URL's password out of what is printed.
func redact(spec string) string {
	if at := strings.LastIndex(spec, "@"); at > 0 {
		if s := strings.Index(spec, "://"); s > 0 && s < at {
			if colon := strings.Index(spec[s+3:at], ":"); colon >= 0 {
				return spec[:s+3+colon] + ":***" + spec[at:]
			}
		}
	}
	return spec
}
