package pgsessions

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/console"
	"github.com/ctxproxy/ctxproxy/internal/pgtest"
)

func TestStore(t *testing.T) {
	db := pgtest.New(t, "pgsessions")
	ctx := context.Background()
	st, err := Open(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Database time: the sweep on Create uses now().
	now := time.Now()
	live, gone := [32]byte{1}, [32]byte{2}
	tok := [32]byte{9, 9}
	if err := st.Create(ctx, gone, console.Session{TokenSHA256: tok, CSRF: "b", Expires: now.Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := st.Create(ctx, live, console.Session{TokenSHA256: tok, CSRF: "a", Expires: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	t.Run("a live session is found, as it was kept", func(t *testing.T) {
		got, err := st.Get(ctx, live, now)
		if err != nil || got.CSRF != "a" || got.TokenSHA256 != tok || !got.Expires.Equal(now.Add(time.Hour).Truncate(time.Microsecond)) {
			t.Errorf("%+v %v", got, err)
		}
	})
	t.Run("not at or after its expiry", func(t *testing.T) {
		if _, err := st.Get(ctx, live, now.Add(time.Hour)); !errors.Is(err, console.ErrNoSession) {
			t.Errorf("err %v", err)
		}
	})
	t.Run("a sign-in swept the expired one", func(t *testing.T) {
		if n := db.QueryInt(t, `SELECT count(*) FROM ctxproxy_console_sessions`); n != 1 {
			t.Errorf("%d rows, want the live session's only", n)
		}
	})
	t.Run("a deleted session is not found", func(t *testing.T) {
		if err := st.Delete(ctx, live); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Get(ctx, live, now); !errors.Is(err, console.ErrNoSession) {
			t.Errorf("err %v", err)
		}
	})
}
