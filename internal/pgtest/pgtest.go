// Package pgtest gives tests a PostgreSQL schema of their own and a TCP
// forwarder that can take the database down and bring it back.
//
// The database is CTXPROXY_TEST_PG, else the machine's
// postgres://postgres@127.0.0.1:5432/test. Without it a test is skipped,
// or fails under CI=true.
package pgtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BaseURL is the machine's test database.
const BaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

var seq atomic.Int64

// DB is one test's schema. URL points at it (search_path); App is an
// application_name no other test uses; Admin runs statements on the side.
type DB struct {
	URL, Schema, App string
	Admin            *pgx.Conn
}

func baseURL() string {
	if u := os.Getenv("CTXPROXY_TEST_PG"); u != "" {
		return u
	}
	return BaseURL
}

// New creates a schema named after prefix for t, dropped after it.
func New(t testing.TB, prefix string) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	url := baseURL()
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL required under CI: %v", err)
		}
		t.Skipf("no PostgreSQL: %v", err)
	}
	n := seq.Add(1)
	db := &DB{
		Schema: fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), n),
		App:    fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(prefix, "_", "-"), os.Getpid(), n),
		Admin:  admin,
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+db.Schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP SCHEMA "+db.Schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", db.Schema, err)
		}
		admin.Close(ctx)
	})
	db.URL = WithParam(url, "search_path", db.Schema)
	return db
}

// WithParam adds a query parameter to a PostgreSQL URL.
func WithParam(url, k, v string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + k + "=" + v
}

// Exec runs sql on the side, in the test's schema.
func (db *DB) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Admin.Exec(context.Background(), "SET search_path TO "+db.Schema); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Admin.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// QueryInt runs a query returning one integer, in the test's schema.
func (db *DB) QueryInt(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	if _, err := db.Admin.Exec(context.Background(), "SET search_path TO "+db.Schema); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := db.Admin.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// Terminate ends every backend whose application_name is app; it returns
// how many.
func (db *DB) Terminate(t testing.TB, app string) int64 {
	t.Helper()
	return db.QueryInt(t, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = $1`, app)
}

// Forwarder is a TCP proxy to PostgreSQL that a test can take down (refuse
// every connection), black-hole (accept and never answer: a hung database)
// and bring back, for a deterministic outage.
type Forwarder struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	mode  string // "up", "down", "blackhole"
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewForwarder forwards a 127.0.0.1 port to target until t ends.
func NewForwarder(t testing.TB, target string) *Forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &Forwarder{ln: ln, target: target, mode: "up", conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	t.Cleanup(func() {
		ln.Close()
		f.Set("down")
		f.wg.Wait()
	})
	return f
}

// Addr is the forwarder's host:port.
func (f *Forwarder) Addr() string { return f.ln.Addr().String() }

// URL is url with the database address replaced by the forwarder's; ok is
// false when url does not name 127.0.0.1:5432.
func (f *Forwarder) URL(url string) (string, bool) {
	out := strings.Replace(url, "127.0.0.1:5432", f.Addr(), 1)
	return out, out != url
}

// Set switches the mode ("up", "down", "blackhole"), cutting every open
// connection.
func (f *Forwarder) Set(mode string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode = mode
	for c := range f.conns {
		c.Close()
	}
}

// track registers c unless the mode says otherwise; false = closed.
func (f *Forwarder) track(c net.Conn, want string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mode != want {
		c.Close()
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Forwarder) untrack(cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(f.conns, c)
	}
}

func (f *Forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		mode := f.mode
		f.mu.Unlock()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			switch mode {
			case "down":
				c.Close()
			case "blackhole":
				if f.track(c, "blackhole") {
					io.Copy(io.Discard, c) // until the client gives up or the mode changes
					f.untrack(c)
				}
			case "up":
				up, err := net.Dial("tcp", f.target)
				if err != nil {
					c.Close()
					return
				}
				if !f.track(c, "up") || !f.track(up, "up") {
					f.untrack(c, up)
					return
				}
				done := make(chan struct{}, 2)
				go func() { io.Copy(up, c); done <- struct{}{} }()
				go func() { io.Copy(c, up); done <- struct{}{} }()
				<-done
				f.untrack(c, up)
				<-done
			}
		}()
	}
}
