package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/pgtest"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/memoryhook/storetest"
)

// viaForwarder opens a store on db whose connections go through a forwarder.
func viaForwarder(t *testing.T, db *testDB, opts ...Option) (*Store, *pgtest.Forwarder) {
	t.Helper()
	f := pgtest.NewForwarder(t, "127.0.0.1:5432")
	url, ok := f.URL(db.url)
	if !ok {
		t.Skip("CTXPROXY_TEST_PG does not point at 127.0.0.1:5432")
	}
	return db.openURL(t, url, opts...), f
}

const unavailMsg = "Error: memory store unavailable: "

// everyCommand is one of each command, all of which succeed on a store
// holding /memories/f.md ("one\ntwo\n").
func everyCommand(i int) []string {
	n := fmt.Sprintf("/memories/n-%d.md", i)
	return []string{
		storetest.J("command", "view", "path", "/memories"),
		storetest.J("command", "view", "path", "/memories/f.md"),
		storetest.J("command", "create", "path", n, "file_text", "new\n"),
		storetest.J("command", "str_replace", "path", "/memories/f.md", "old_str", "one", "new_str", "one"),
		storetest.J("command", "insert", "path", n, "insert_line", 0, "insert_text", "first"),
		storetest.J("command", "rename", "old_path", n, "new_path", n+".moved"),
		storetest.J("command", "delete", "path", n+".moved"),
	}
}

func TestDatabaseDownAndBack(t *testing.T) {
	db := newTestDB(t)
	// The store that goes through the outage has deadlines a loaded machine
	// never reaches while the database answers, so only the outage can fail
	// a command; hung, a second store's short deadline is what is tested.
	st, fwd := viaForwarder(t, db, WithTimeout(time.Minute), WithReadyTimeout(time.Minute))
	url, _ := fwd.URL(db.url)
	hung := db.openURL(t, url, WithTimeout(200*time.Millisecond), WithReadyTimeout(200*time.Millisecond))
	sc := memoryhook.Scope{Tenant: "acme"}
	ctx := context.Background()
	mustOK(t, st, sc, storetest.J("command", "create", "path", "/memories/f.md", "file_text", "one\ntwo\n"))

	allFail := func(t *testing.T, st *Store, reason string) {
		t.Helper()
		for _, in := range everyCommand(0) {
			r := exec(st, sc, in)
			if !r.IsError || !r.Unavailable || r.Content != unavailMsg+reason {
				t.Errorf("%s: %+v", in, r)
			}
			var ue *memoryhook.UnavailableError
			if !errors.As(r.Err, &ue) {
				t.Errorf("%s: error %v is not an UnavailableError", in, r.Err)
			}
		}
		if err := st.PutContinuation(ctx, "acme", "msg_1", []byte("x"), time.Hour); err == nil {
			t.Error("PutContinuation succeeded")
		}
		if got, err := st.GetContinuation(ctx, "acme", "msg_1"); err == nil {
			t.Errorf("GetContinuation = %q, no error", got)
		}
	}
	allWork := func(t *testing.T, i int) {
		t.Helper()
		for _, in := range everyCommand(i) {
			mustOK(t, st, sc, in)
		}
		if err := st.Ready(ctx); err != nil {
			t.Errorf("Ready: %v", err)
		}
	}

	t.Run("works through the forwarder", func(t *testing.T) { allWork(t, 1) })

	t.Run("down: every command answers unavailable and Ready says why", func(t *testing.T) {
		fwd.Set("down")
		allFail(t, st, "database unavailable")
		err := st.Ready(ctx)
		if err == nil || !strings.HasPrefix(err.Error(), "memory store unavailable: database unavailable: ") {
			t.Errorf("Ready = %v", err)
		}
		t.Logf("Ready while down: %v", err)
	})

	t.Run("hung: commands give up at their deadline", func(t *testing.T) {
		fwd.Set("blackhole")
		allFail(t, hung, "database timed out")
		if err := hung.Ready(ctx); err == nil || !strings.Contains(err.Error(), "database timed out") {
			t.Errorf("Ready = %v", err)
		}
		// A caller's deadline sooner than the store's (a minute) wins.
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		r := memoryhook.Exec(cctx, st, sc, []byte(storetest.J("command", "view", "path", "/memories/f.md")))
		if r.Content != unavailMsg+"database timed out" {
			t.Errorf("with the caller's deadline: %s", r.Content)
		}
		if cctx.Err() == nil {
			t.Error("returned before the caller's deadline: not a timeout")
		}
	})

	t.Run("back: the same store recovers by itself", func(t *testing.T) {
		fwd.Set("up")
		allWork(t, 2)
		if got := mustOK(t, st, sc, storetest.J("command", "view", "path", "/memories/f.md")); !strings.Contains(got, "\ttwo") {
			t.Errorf("data lost across the outage:\n%s", got)
		}
	})
	db.checkUsage(t)
}

// Terminating the store's backends mid-run (as a database restart or
// failover does) costs at most the commands in flight: each either lands
// or answers unavailable, and the pool reconnects by itself.
func TestBackendsTerminatedMidRun(t *testing.T) {
	db := newTestDB(t)
	st := db.open(t)
	sc := memoryhook.Scope{Tenant: "acme"}
	mustOK(t, st, sc, storetest.J("command", "create", "path", "/memories/log.md", "file_text", "start"))
	mustOK(t, st, sc, storetest.J("command", "create", "path", "/memories/f.md", "file_text", "one\ntwo\n"))

	t.Run("an idle pool's first command after a termination works", func(t *testing.T) {
		mustOK(t, st, sc, storetest.J("command", "view", "path", "/memories/log.md"))
		if n := db.terminate(t); n == 0 {
			t.Fatal("no backend of the store to terminate")
		}
		// The pooled connection is dead; the command is retried on a new one.
		mustOK(t, st, sc, storetest.J("command", "insert", "path", "/memories/log.md", "insert_line", 1, "insert_text", "after-terminate"))
		if err := st.Ready(context.Background()); err != nil {
			t.Errorf("Ready: %v", err)
		}
	})

	t.Run("commands in flight land or answer unavailable", func(t *testing.T) {
		const workers, each = 4, 25
		var wg sync.WaitGroup
		var mu sync.Mutex
		var landed []string
		unavail := 0
		stop := make(chan struct{})
		killed := make(chan int64, 1)
		go func() { // terminate repeatedly while the workers run
			var n int64
			defer func() { killed <- n }()
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
					n += db.terminate(t)
				}
			}
		}()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					line := fmt.Sprintf("w%d-%02d", w, i)
					r := exec(st, sc, storetest.J("command", "insert", "path", "/memories/log.md", "insert_line", 1, "insert_text", line))
					mu.Lock()
					switch {
					case !r.IsError:
						landed = append(landed, line)
					case r.Unavailable && strings.HasPrefix(r.Content, unavailMsg):
						unavail++
					default:
						t.Errorf("%s: %s", line, r.Content)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(stop)
		t.Logf("%d landed, %d unavailable, %d backends terminated", len(landed), unavail, <-killed)
		got := mustOK(t, st, sc, storetest.J("command", "view", "path", "/memories/log.md"))
		for _, line := range landed {
			if !strings.Contains(got, "\t"+line+"\n") {
				t.Errorf("%s answered success but is not in the file", line)
			}
		}
	})

	t.Run("after the terminations everything works", func(t *testing.T) {
		db.terminate(t)
		for _, in := range everyCommand(9) {
			mustOK(t, st, sc, in)
		}
	})
	db.checkUsage(t)
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	t.Run("fails when the database cannot be reached", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if s, err := Open(cctx, "postgres://postgres@"+addr+"/test?sslmode=disable"); err == nil {
			s.Close()
			t.Fatal("opened")
		}
	})
	t.Run("hides the password of a bad URL", func(t *testing.T) {
		_, err := Open(ctx, "postgres://u:s3cret@127.0.0.1:5432/test?sslmode=bogus")
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("bounds a stalled transaction", func(t *testing.T) {
		s := newTestDB(t).open(t, WithTimeout(3*time.Second))
		var v string
		if err := s.pool.QueryRow(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != "6s" {
			t.Errorf("idle_in_transaction_session_timeout = %s, want 6s", v)
		}
	})
	t.Run("sets application_name", func(t *testing.T) {
		db := newTestDB(t)
		st := db.open(t)
		if err := st.Ready(ctx); err != nil {
			t.Fatal(err)
		}
		if n := db.queryInt(t, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, db.app); n == 0 {
			t.Errorf("no connection named %s", db.app)
		}
	})
}
