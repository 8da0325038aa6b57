package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ctxproxy/ctxproxy/console/pgsessions"
	"github.com/ctxproxy/ctxproxy/internal/pgmigrate"
	"github.com/ctxproxy/ctxproxy/internal/pgurl"
	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/memoryhook/pgstore"
	"github.com/ctxproxy/ctxproxy/server"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// migrateTargets are the databases `ctxproxy migrate` brings up to date: the
// serve flag that names each, and the schemas the store opened from that flag
// applies at start (the same lists, so migrate and a starting server never
// disagree). A part with a database URL of its own adds a row here.
var migrateTargets = []struct {
	flag    string
	schemas []pgmigrate.Schema
}{
	// The keys and the console's sessions live with the memory.
	{"memory-store", append(append(append([]pgmigrate.Schema(nil), pgstore.Schemas...), keys.PGSchemas...), pgsessions.PGSchemas...)},
	{"ledger", tokens.PGSchemas},
	{"limits-store", limits.PGSchemas},
}

// runMigrate applies every PostgreSQL schema the server needs, for the
// --memory-store, --ledger and --limits-store that are postgres:// URLs (the
// server's flags, env twins and defaults), and exits non-zero with the cause
// when it cannot.
// Servers also migrate at start; this runs it before a rollout.
func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("ctxproxy migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: ctxproxy migrate [--memory-store URL] [--ledger URL] [--limits-store URL]\n\n"+
			"Applies the PostgreSQL schemas of the memory store, the ledger and the spend counters, under\nthe advisory lock "+
			"the servers use; a file store or file ledger needs none.\n\n")
		fs.PrintDefaults()
	}
	vals := map[string]*string{}
	for _, t := range migrateTargets {
		vals[t.flag] = serveFlag(t.flag).define(fs, getenv, "")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	// The limits store the server would open (unset: the ledger's database when it is one).
	*vals["limits-store"] = server.LimitsStoreURL(*vals["limits-store"], *vals["ledger"])
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ctxproxy migrate: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	migrated := 0
	for _, t := range migrateTargets {
		url := *vals[t.flag]
		if !pgurl.Is(url) {
			continue
		}
		migrated++
		res, where, err := migrateURL(ctx, url, t.schemas)
		for _, a := range res {
			fmt.Fprintf(stdout, "--%s %s: schema %s at version %d (was %d)\n", t.flag, where, a.Schema, a.To, a.From)
		}
		if err != nil {
			fmt.Fprintf(stderr, "ctxproxy migrate: --%s %s: %v\n", t.flag, where, err)
			return 1
		}
	}
	if migrated == 0 {
		fmt.Fprintln(stdout, "nothing to migrate: none of --memory-store, --ledger and --limits-store is a postgres:// URL")
	}
	return 0
}

// migrateURL applies schemas to the database at url; where names it without
// the password.
func migrateURL(ctx context.Context, url string, schemas []pgmigrate.Schema) (res []pgmigrate.Applied, where string, err error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's message may quote the URL, password included.
		return nil, "(unparsable URL)", errors.New("invalid connection string")
	}
	where = fmt.Sprintf("%s@%s:%d/%s", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second // a Job must fail, not hang, on a wrong host
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "ctxproxy-migrate"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, where, err
	}
	defer pool.Close()
	res, err = pgmigrate.Apply(ctx, pool, schemas...)
	return res, where, err
}
