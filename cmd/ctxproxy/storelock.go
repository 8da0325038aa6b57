package main

import (
	"errors"
	"path/filepath"
)

// The file memory store's serving lock. serve holds a shared lock on
// <memory-dir>.lock while it runs; `ctxproxy memory` without --url takes it
// exclusively to write (restore, import, purge), so it never writes a store a
// proxy is serving (whose history, guard and operator API would not see the
// write) unless told --direct. PostgreSQL needs none: its writes are
// transactions every replica sees.

// errStoreBusy is lockStore's error for a lock another process holds.
var errStoreBusy = errors.New("the store is in use by another process")

// storeLockPath is the lock file of the file store in memDir: beside it, not
// in it (the store's root holds only tenants).
func storeLockPath(memDir string) string { return filepath.Clean(memDir) + ".lock" }

// memoryWrites are the `ctxproxy memory` commands that write.
var memoryWrites = map[string]bool{"restore": true, "import": true, "purge": true}
