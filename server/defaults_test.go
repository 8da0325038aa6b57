package server

import (
	"testing"
	"time"
)

func TestWithDefaults(t *testing.T) {
	t.Run("a zero body limit or timeout takes serve's default", func(t *testing.T) {
		got := Settings{}.withDefaults()
		d := DefaultSettings
		if got.MaxBody != d.MaxBody || got.UpstreamTimeout != d.UpstreamTimeout || got.StreamIdleTimeout != d.StreamIdleTimeout {
			t.Fatalf("got %d, %s, %s; want DefaultSettings' %d, %s, %s", got.MaxBody, got.UpstreamTimeout, got.StreamIdleTimeout,
				d.MaxBody, d.UpstreamTimeout, d.StreamIdleTimeout)
		}
	})
	t.Run("a set one is kept", func(t *testing.T) {
		got := Settings{MaxBody: 64, UpstreamTimeout: time.Second, StreamIdleTimeout: 2 * time.Second}.withDefaults()
		if got.MaxBody != 64 || got.UpstreamTimeout != time.Second || got.StreamIdleTimeout != 2*time.Second {
			t.Fatalf("got %d, %s, %s", got.MaxBody, got.UpstreamTimeout, got.StreamIdleTimeout)
		}
	})
}
