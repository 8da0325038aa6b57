package pgstore

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/memoryhook/storetest"
)

func TestMigrations(t *testing.T) {
	ctx := context.Background()
	t.Run("replicas starting at once migrate once", func(t *testing.T) {
		db := newTestDB(t)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := Open(ctx, db.url)
				if err != nil {
					t.Error(err)
					return
				}
				s.Close()
			}()
		}
		wg.Wait()
		if v := db.queryInt(t, `SELECT max(version) FROM ctxproxy_memory_migrations`); v != int64(Schema.Version()) {
			t.Errorf("version %d, want %d", v, Schema.Version())
		}
		if n := db.queryInt(t, `SELECT count(*) FROM ctxproxy_memory_migrations`); n != int64(Schema.Version()) {
			t.Errorf("%d migration rows", n)
		}
	})
	t.Run("reopening keeps the data", func(t *testing.T) {
		db := newTestDB(t)
		sc := memoryhook.Scope{Tenant: "acme"}
		s := db.open(t)
		mustOK(t, s, sc, storetest.J("command", "create", "path", "/memories/kept.md", "file_text", "kept\n"))
		if err := s.PutContinuation(ctx, "acme", "msg_1", []byte("c"), time.Hour); err != nil {
			t.Fatal(err)
		}
		s.Close()
		s = db.open(t)
		if got := mustOK(t, s, sc, storetest.J("command", "view", "path", "/memories/kept.md")); !strings.Contains(got, "\tkept") {
			t.Errorf("after reopening:\n%s", got)
		}
		if got, err := s.GetContinuation(ctx, "acme", "msg_1"); string(got) != "c" || err != nil {
			t.Errorf("continuation after reopening: %q, %v", got, err)
		}
	})
	t.Run("refuses a schema newer than the build", func(t *testing.T) {
		db := newTestDB(t)
		db.open(t).Close()
		db.exec(t, `INSERT INTO ctxproxy_memory_migrations (version) VALUES ($1)`, Schema.Version()+1)
		s, err := Open(ctx, db.url)
		if err == nil {
			s.Close()
			t.Fatal("opened")
		}
		if !strings.Contains(err.Error(), "newer than this build") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestTenantScoping(t *testing.T) {
	db := newTestDB(t)
	s := db.open(t)
	ctx := context.Background()
	t.Run("a tenant no policy can have is refused, not stored", func(t *testing.T) {
		for _, tenant := range []string{"", "../t1", "T1", "t1/x", "t1 "} {
			r := memoryhook.Exec(ctx, s, memoryhook.Scope{Tenant: tenant},
				[]byte(storetest.J("command", "create", "path", "/memories/a.md", "file_text", "x")))
			if r.Content != "Error: memory store unavailable: invalid tenant name" {
				t.Errorf("tenant %q: %s", tenant, r.Content)
			}
		}
		if n := db.queryInt(t, `SELECT count(*) FROM ctxproxy_memory_entries`); n != 0 {
			t.Errorf("%d rows stored", n)
		}
	})
	t.Run("tenant names that are prefixes of each other stay apart", func(t *testing.T) {
		for _, tenant := range []string{"t", "t1", "t10"} {
			mustOK(t, s, memoryhook.Scope{Tenant: tenant}, storetest.J("command", "create", "path", "/memories/own.md", "file_text", tenant))
		}
		mustOK(t, s, memoryhook.Scope{Tenant: "t1"}, storetest.J("command", "delete", "path", "/memories/own.md"))
		for _, tenant := range []string{"t", "t10"} {
			got := mustOK(t, s, memoryhook.Scope{Tenant: tenant}, storetest.J("command", "view", "path", "/memories/own.md"))
			if !strings.HasSuffix(got, "\t"+tenant) {
				t.Errorf("tenant %s: %s", tenant, got)
			}
		}
		db.checkUsage(t)
	})
}

func TestContinuationSweep(t *testing.T) {
	db := newTestDB(t)
	s := db.open(t)
	ctx := context.Background()
	s.sweepEvery = 0 // no sweeps while setting up
	for _, c := range []struct {
		tenant, id string
		ttl        time.Duration
	}{{"acme", "old-1", -time.Minute}, {"acme", "old-2", -time.Second}, {"acme", "live", time.Hour}, {"other", "old", -time.Minute}} {
		if err := s.PutContinuation(ctx, c.tenant, c.id, []byte("x"), c.ttl); err != nil {
			t.Fatal(err)
		}
	}
	s.sweepEvery = 1 // every put sweeps
	if err := s.PutContinuation(ctx, "acme", "new", []byte("y"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := db.queryInt(t, `SELECT count(*) FROM ctxproxy_memory_continuations WHERE tenant = 'acme'`); n != 2 {
		t.Errorf("acme keeps %d continuations, want 2 (live and new)", n)
	}
	if n := db.queryInt(t, `SELECT count(*) FROM ctxproxy_memory_continuations WHERE tenant = 'other'`); n != 1 {
		t.Errorf("another tenant's rows were swept: %d left", n)
	}
	if got, _ := s.GetContinuation(ctx, "other", "old"); got != nil {
		t.Errorf("expired: %q", got)
	}
	if n := db.queryInt(t, `SELECT count(*) FROM ctxproxy_memory_continuations WHERE tenant = 'other'`); n != 0 {
		t.Errorf("an expired continuation read stays stored")
	}
}
