package storetest

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// RunContinuations is the conformance suite of memoryhook.Continuations;
// newStore returns a fresh, empty store for each test. Both stores run it:
//
//	storetest.RunContinuations(t, func(t *testing.T) memoryhook.Continuations { return newStore(t) })
func RunContinuations(t *testing.T, newStore func(t *testing.T) memoryhook.Continuations) {
	ctx := context.Background()
	put := func(t *testing.T, c memoryhook.Continuations, tenant, id string, data []byte, ttl time.Duration) {
		t.Helper()
		if err := c.PutContinuation(ctx, tenant, id, data, ttl); err != nil {
			t.Fatalf("put %s/%s: %v", tenant, id, err)
		}
	}
	get := func(t *testing.T, c memoryhook.Continuations, tenant, id string) []byte {
		t.Helper()
		got, err := c.GetContinuation(ctx, tenant, id)
		if err != nil {
			t.Fatalf("get %s/%s: %v", tenant, id, err)
		}
		return got
	}
	t.Run("keeps data per tenant and reply", func(t *testing.T) {
		c := newStore(t)
		put(t, c, "t1", "msg_1", []byte(`{"a":1}`), time.Hour)
		put(t, c, "t1", "msg_2", []byte(`{"b":2}`), time.Hour)
		if got := get(t, c, "t1", "msg_1"); string(got) != `{"a":1}` {
			t.Errorf("msg_1 = %q", got)
		}
		if got := get(t, c, "t1", "msg_2"); string(got) != `{"b":2}` {
			t.Errorf("msg_2 = %q", got)
		}
	})
	t.Run("another tenant sees nothing and keeps its own", func(t *testing.T) {
		c := newStore(t)
		put(t, c, "t1", "msg_1", []byte("t1's"), time.Hour)
		if got := get(t, c, "t2", "msg_1"); got != nil {
			t.Errorf("t2 read t1's continuation: %q", got)
		}
		put(t, c, "t2", "msg_1", []byte("t2's"), time.Hour)
		if got := get(t, c, "t1", "msg_1"); string(got) != "t1's" {
			t.Errorf("t1's continuation became %q", got)
		}
		if got := get(t, c, "t2", "msg_1"); string(got) != "t2's" {
			t.Errorf("t2's continuation = %q", got)
		}
	})
	t.Run("answers nil and no error for an unknown reply", func(t *testing.T) {
		c := newStore(t)
		if got, err := c.GetContinuation(ctx, "t1", "msg_unknown"); got != nil || err != nil {
			t.Errorf("got %q, %v", got, err)
		}
	})
	t.Run("a second put replaces the first", func(t *testing.T) {
		c := newStore(t)
		put(t, c, "t1", "msg_1", []byte("old, and longer than the new one"), time.Hour)
		put(t, c, "t1", "msg_1", []byte("new"), time.Hour)
		if got := get(t, c, "t1", "msg_1"); string(got) != "new" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("forgets data past its expiry", func(t *testing.T) {
		c := newStore(t)
		put(t, c, "t1", "msg_old", []byte("x"), -time.Second)
		if got := get(t, c, "t1", "msg_old"); got != nil {
			t.Errorf("expired continuation returned %q", got)
		}
		if got := get(t, c, "t1", "msg_old"); got != nil {
			t.Errorf("expired continuation returned on the second read: %q", got)
		}
		put(t, c, "t1", "msg_old", []byte("again"), time.Hour)
		if got := get(t, c, "t1", "msg_old"); string(got) != "again" {
			t.Errorf("a put after expiry: got %q", got)
		}
	})
	t.Run("a put with a new expiry revives nothing else", func(t *testing.T) {
		c := newStore(t)
		put(t, c, "t1", "msg_live", []byte("live"), time.Hour)
		put(t, c, "t1", "msg_dead", []byte("dead"), -time.Second)
		if got := get(t, c, "t1", "msg_live"); string(got) != "live" {
			t.Errorf("live = %q", got)
		}
		if got := get(t, c, "t1", "msg_dead"); got != nil {
			t.Errorf("dead = %q", got)
		}
	})
	t.Run("keeps any reply id and any bytes", func(t *testing.T) {
		c := newStore(t)
		all := make([]byte, 256)
		for i := range all {
			all[i] = byte(i)
		}
		ids := []string{"../../../etc/passwd", "msg/with/slashes", "", "ü✓ \x00 nul", strings.Repeat("long-", 2000)}
		for i, id := range ids {
			put(t, c, "t1", id, append([]byte{byte(i)}, all...), time.Hour)
		}
		for i, id := range ids {
			if got := get(t, c, "t1", id); !bytes.Equal(got, append([]byte{byte(i)}, all...)) {
				t.Errorf("id %.20q: got %q", id, got)
			}
		}
	})
	t.Run("reads several in one call, in order, as one by one", func(t *testing.T) {
		c := newStore(t)
		put(t, c, "t1", "msg_a", []byte("a"), time.Hour)
		put(t, c, "t1", "msg_b", []byte("b"), time.Hour)
		put(t, c, "t1", "msg_dead", []byte("dead"), -time.Second)
		put(t, c, "t2", "msg_c", []byte("t2's c"), time.Hour)
		ids := []string{"msg_b", "msg_unknown", "msg_a", "msg_dead", "msg_c", "msg_b"}
		got, err := c.GetContinuations(ctx, "t1", ids)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"b", "", "a", "", "", "b"}
		if len(got) != len(want) {
			t.Fatalf("%d results for %d ids", len(got), len(ids))
		}
		for i := range want {
			if string(got[i]) != want[i] || (want[i] == "" && got[i] != nil) {
				t.Errorf("%s: got %q, want %q", ids[i], got[i], want[i])
			}
			if one := get(t, c, "t1", ids[i]); !bytes.Equal(one, got[i]) {
				t.Errorf("%s: one by one %q, in the batch %q", ids[i], one, got[i])
			}
		}
		if got, err := c.GetContinuations(ctx, "t1", nil); err != nil || len(got) != 0 {
			t.Errorf("no ids: %q, %v", got, err)
		}
	})
	t.Run("refuses an invalid tenant", func(t *testing.T) {
		c := newStore(t)
		for _, tenant := range []string{"", "../x", ".continuations", "T1", "a/b"} {
			if err := c.PutContinuation(ctx, tenant, "msg", []byte("x"), time.Hour); err == nil {
				t.Errorf("put for tenant %q accepted", tenant)
			}
			if _, err := c.GetContinuation(ctx, tenant, "msg"); err == nil {
				t.Errorf("get for tenant %q accepted", tenant)
			}
			if _, err := c.GetContinuations(ctx, tenant, []string{"msg"}); err == nil {
				t.Errorf("a batch get for tenant %q accepted", tenant)
			}
		}
	})
	t.Run("is invisible to the tenant's memory", func(t *testing.T) {
		c := newStore(t)
		put(t, c, "t1", "msg_1", []byte("x"), time.Hour)
		st, ok := c.(memoryhook.Store)
		if !ok {
			t.Skip("not a memory store")
		}
		got := Transcript(ctx, st, memoryhook.Scope{Tenant: "t1"}, []string{view("/memories")})
		if !strings.HasSuffix(got, "4K\t/memories\n\n") {
			t.Errorf("the memory shows more than the empty root:\n%s", got)
		}
	})
}
