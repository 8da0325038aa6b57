package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/ctxproxy/ctxproxy/advise"
	"github.com/ctxproxy/ctxproxy/server"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// runAdvise prints which context-management policy a tenant should run: its own and each shadow
// candidate the policy lab measured, from the ledger (package advise).
func runAdvise(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("ctxproxy advise", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ledgerSpec := serveFlag("ledger").define(fs, getenv, "")
	tenant := fs.String("tenant", "", "the tenant to advise (required)")
	since := fs.String("since", "", "from this time (RFC 3339 or YYYY-MM-DD)")
	until := fs.String("until", "", "up to this time (RFC 3339 or YYYY-MM-DD)")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	policies := fs.String("policies", envOr(getenv, "CTXPROXY_POLICIES", ""), "policy folder, for its prices.yaml (env CTXPROXY_POLICIES)")
	pricesPath := serveFlag("prices").define(fs, getenv, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *tenant == "" {
		fmt.Fprintln(stderr, "ctxproxy advise: --tenant is required")
		return 2
	}
	filter, err := tokens.ParseFilter(*tenant, *since, *until)
	if err != nil {
		fmt.Fprintln(stderr, "ctxproxy advise:", err)
		return 2
	}
	path, required := server.PricesFile(*policies, *pricesPath)
	prices, err := tokens.OpenPrices(path, required)
	if err != nil {
		fmt.Fprintln(stderr, "ctxproxy advise: load prices:", err)
		return 1
	}
	// Advice reads a ledger as a report does: it never starts one, nor writes its schema.
	ledger, err := tokens.ReadLedger(ctx, *ledgerSpec)
	if err != nil {
		fmt.Fprintf(stderr, "ctxproxy advise: %v (--ledger, env CTXPROXY_LEDGER: the serving process's ledger)\n", err)
		return 1
	}
	defer ledger.Close()
	calls, err := ledger.Query(ctx, filter)
	if err != nil {
		fmt.Fprintln(stderr, "ctxproxy advise:", err)
		return 1
	}
	a := advise.Build(*tenant, calls, prices.Prices)
	if !filter.Since.IsZero() {
		a.Since = &filter.Since
	}
	if !filter.Until.IsZero() {
		a.Until = &filter.Until
	}
	write := advise.WriteTable
	if *asJSON {
		write = advise.WriteJSON
	}
	if err := write(stdout, a); err != nil {
		fmt.Fprintln(stderr, "ctxproxy advise:", err)
		return 1
	}
	return 0
}
