package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/server"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// runValidate loads every policy file of DIR (else --policies) and the price table and prints
// file:line problems (exit 1), or one summary line per tenant and the price
// table in force (exit 0). A folder without tenant files is a problem too.
func runValidate(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("ctxproxy validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := serveFlag("policies").define(fs, getenv, "")
	prices := serveFlag("prices").define(fs, getenv, "")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: ctxproxy validate [flags] [DIR]\n\nChecks the policy files of DIR (default --policies) and the price table.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch fs.NArg() {
	case 0:
	case 1:
		*dir = fs.Arg(0)
	default:
		fmt.Fprintf(stderr, "ctxproxy validate: one folder at most, got %q\n", fs.Args())
		return 2
	}
	ok := true
	set, err := policy.LoadDir(*dir)
	var les policy.LoadErrors
	switch {
	case errors.As(err, &les):
		for _, le := range les {
			fmt.Fprintln(stdout, le.Error())
		}
		ok = false
	case err != nil:
		fmt.Fprintln(stdout, err)
		ok = false
	case len(set.Tenants()) == 0:
		fmt.Fprintf(stdout, "%s: no tenant policy files (*.yaml): every request would be forwarded with no policy\n", *dir)
		ok = false
	default:
		for _, p := range set.Tenants() {
			fmt.Fprintln(stdout, p.Summary())
		}
	}
	path, required := server.PricesFile(*dir, *prices)
	tab, err := tokens.OpenPrices(path, required)
	if err != nil {
		fmt.Fprintln(stdout, err)
		return 1
	}
	fmt.Fprintln(stdout, "prices: "+tab.Describe(path))
	if !ok {
		return 1
	}
	return 0
}

// runReport prints the cost report from the ledger.
func runReport(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("ctxproxy report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ledgerSpec := serveFlag("ledger").define(fs, getenv, "")
	tenant := fs.String("tenant", "", "only this tenant")
	since := fs.String("since", "", "from this time (RFC 3339 or YYYY-MM-DD)")
	until := fs.String("until", "", "up to this time (RFC 3339 or YYYY-MM-DD)")
	groupBy := fs.String("group-by", "model", "model, day, key (key id) or user")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	policies := fs.String("policies", envOr(getenv, "CTXPROXY_POLICIES", ""), "policy folder, for spend against caps (env CTXPROXY_POLICIES; default ./policies when it exists)")
	limitsStore := fs.String("limits-store", envOr(getenv, "CTXPROXY_LIMITS_STORE", ""), "spend counters: a postgres:// URL (default: --ledger when it is one) (env CTXPROXY_LIMITS_STORE)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ctxproxy report: unexpected argument %q (the ledger is --ledger)\n", fs.Arg(0))
		return 2
	}
	filter, err := tokens.ParseFilter(*tenant, *since, *until)
	if err != nil {
		fmt.Fprintln(stderr, "ctxproxy report:", err)
		return 2
	}
	group, err := tokens.ParseGroupBy(*groupBy)
	if err != nil {
		fmt.Fprintln(stderr, "ctxproxy report: --group-by:", err)
		return 2
	}
	// A report reads a ledger; it never starts one, nor writes its schema (ReadLedger), so a
	// mistyped --ledger is an error, not an empty report.
	ledger, err := tokens.ReadLedger(ctx, *ledgerSpec)
	if err != nil {
		fmt.Fprintf(stderr, "ctxproxy report: %v (--ledger, env CTXPROXY_LEDGER: the serving process's ledger)\n", err)
		return 1
	}
	defer ledger.Close()
	rep, err := tokens.RunReport(ctx, ledger, filter, group)
	if err != nil {
		fmt.Fprintln(stderr, "ctxproxy report:", err)
		return 1
	}
	if rep.Caps, err = reportCaps(ctx, &config{Policies: *policies, Ledger: *ledgerSpec, LimitsStore: *limitsStore}, *tenant, stderr); err != nil {
		fmt.Fprintln(stderr, "ctxproxy report:", err)
		return 1
	}
	if *tenant != "" && rep.Total.Calls == 0 {
		fmt.Fprintf(stderr, "ctxproxy report: tenant %q has no ledger lines%s\n", *tenant, periodNote(*since, *until))
	}
	write := tokens.WriteReportTable
	if *asJSON {
		write = tokens.WriteReportJSON
	}
	if err := write(stdout, rep); err != nil {
		fmt.Fprintln(stderr, "ctxproxy report:", err)
		return 1
	}
	return 0
}

// periodNote is " from SINCE", " until UNTIL", both, or "" for the whole ledger.
func periodNote(since, until string) string {
	s := ""
	if since != "" {
		s += " from " + since
	}
	if until != "" {
		s += " until " + until
	}
	return s
}
