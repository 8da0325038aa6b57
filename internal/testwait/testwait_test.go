package testwait

import (
	"fmt"
	"testing"
	"time"
)

// deadlineTB is a test whose deadline is near, and which records its failure.
type deadlineTB struct {
	testing.TB
	deadline time.Time
	failed   string
}

func (d *deadlineTB) Helper()                           {}
func (d *deadlineTB) Deadline() (time.Time, bool)       { return d.deadline, true }
func (d *deadlineTB) Fatalf(format string, args ...any) { d.failed = fmt.Sprintf(format, args...) }

func TestEventually(t *testing.T) {
	t.Run("returns once what it waits for happened", func(t *testing.T) {
		ready := make(chan struct{})
		go close(ready)
		Eventually(t, "the channel closing", func() { <-ready })
	})
	t.Run("fails, saying what never happened, before the test's deadline", func(t *testing.T) {
		never := make(chan struct{})
		defer close(never)
		d := &deadlineTB{TB: t, deadline: time.Now().Add(time.Second)}
		Eventually(d, "the reload", func() { <-never })
		if d.failed != "the reload never happened" {
			t.Fatalf("failure %q", d.failed)
		}
	})
}
