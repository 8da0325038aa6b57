// Package testwait waits in tests for what happens behind a request (a ledger
// write, a reload, a connection closing) without a deadline of its own, which
// a busy machine could miss.
package testwait

import (
	"testing"
	"time"
)

// Eventually waits for f, which polls for something the test expects to
// happen. Only the test binary's -timeout bounds it, and it fails a little
// before that, saying what never happened (instead of a bare goroutine dump).
func Eventually(t testing.TB, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	var limit <-chan time.Time
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			limit = time.After(max(time.Until(dl)-20*time.Second, time.Until(dl)/2))
		}
	}
	select {
	case <-done:
	case <-limit:
		t.Fatalf("%s never happened", what)
	}
}
