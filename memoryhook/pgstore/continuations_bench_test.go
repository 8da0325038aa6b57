package pgstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/pgtest"
)

// BenchmarkGetContinuations: what a memory-mode request with thinking on pays to look up the
// hidden rounds its transcript may name (ten candidates, one kept), in one read against one per
// candidate as before.
func BenchmarkGetContinuations(b *testing.B) {
	db := pgtest.New(b, "pgstore_test")
	s, err := Open(context.Background(), db.URL, WithApplicationName(db.App), WithTimeout(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ctx := context.Background()
	ids := make([]string, 10)
	for i := range ids {
		ids[i] = fmt.Sprintf("thinking-splice:sig_%d", i)
	}
	if err := s.PutContinuation(ctx, "acme", ids[3], []byte(`{"visible":1,"turns":[]}`), time.Hour); err != nil {
		b.Fatal(err)
	}
	b.Run("one read", func(b *testing.B) {
		for b.Loop() {
			if got, err := s.GetContinuations(ctx, "acme", ids); err != nil || got[3] == nil {
				b.Fatal(got, err)
			}
		}
	})
	b.Run("one per candidate", func(b *testing.B) {
		for b.Loop() {
			for i, id := range ids {
				if got, err := s.GetContinuation(ctx, "acme", id); err != nil || (i == 3) != (got != nil) {
					b.Fatal(got, err)
				}
			}
		}
	})
}
