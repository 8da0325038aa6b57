package memoryhook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestContinuations(t *testing.T) {
	dir := t.TempDir()
	s, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	t.Run("keeps data per tenant and reply", func(t *testing.T) {
		if err := s.PutContinuation(ctx, "acme", "msg_1", []byte(`{"a":1}`), time.Hour); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetContinuation(ctx, "acme", "msg_1")
		if err != nil || string(got) != `{"a":1}` {
			t.Fatalf("got %q, %v", got, err)
		}
		if got, _ := s.GetContinuation(ctx, "beta", "msg_1"); got != nil {
			t.Fatalf("another tenant read it: %q", got)
		}
	})
	t.Run("answers nothing for an unknown reply", func(t *testing.T) {
		if got, err := s.GetContinuation(ctx, "acme", "msg_unknown"); got != nil || err != nil {
			t.Fatalf("got %q, %v", got, err)
		}
	})
	t.Run("forgets data past its expiry", func(t *testing.T) {
		if err := s.PutContinuation(ctx, "acme", "msg_old", []byte("x"), -time.Second); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetContinuation(ctx, "acme", "msg_old"); got != nil {
			t.Fatalf("expired continuation returned %q", got)
		}
	})
	t.Run("never uses a client's id as a file name", func(t *testing.T) {
		hostile := "../../../etc/passwd"
		if err := s.PutContinuation(ctx, "acme", hostile, []byte("x"), time.Hour); err != nil {
			t.Fatal(err)
		}
		filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if strings.Contains(p, "passwd") || strings.Contains(p, "..") {
				t.Errorf("hostile id reached the file system as %s", p)
			}
			return nil
		})
		if got, _ := s.GetContinuation(ctx, "acme", hostile); string(got) != "x" {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("refuses an invalid tenant", func(t *testing.T) {
		if err := s.PutContinuation(ctx, "../x", "msg", []byte("x"), time.Hour); err == nil {
			t.Fatal("accepted")
		}
	})
	t.Run("is invisible to the tenant's memory view", func(t *testing.T) {
		p, _ := ParsePath("/memories")
		out, err := s.View(ctx, Scope{Tenant: "acme", Limits: DefaultLimits()}, p, nil)
		if err != nil || strings.Contains(out, "continuation") {
			t.Fatalf("view = %q, %v", out, err)
		}
	})
}
