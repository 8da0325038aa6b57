// Package pgurl says whether a store setting names a PostgreSQL database:
// the one test of --memory-store, --ledger and --limits-store values, so
// every store and subcommand agrees on what a PostgreSQL URL is.
package pgurl

import "strings"

// Is says whether s is a PostgreSQL connection URL (postgres:// or postgresql://).
func Is(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}
