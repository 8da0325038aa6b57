package console

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/admin"
	"github.com/ctxproxy/ctxproxy/policy"
)

func TestMemorySessions(t *testing.T) {
	s := NewMemorySessions()
	now := time.Now()
	live, gone := [32]byte{1}, [32]byte{2}
	if err := s.Create(t.Context(), live, Session{CSRF: "a", Expires: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(t.Context(), gone, Session{CSRF: "b", Expires: now.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	t.Run("a live session is found", func(t *testing.T) {
		if got, err := s.Get(t.Context(), live, now); err != nil || got.CSRF != "a" {
			t.Errorf("%+v %v", got, err)
		}
	})
	t.Run("an expired one is not", func(t *testing.T) {
		if _, err := s.Get(t.Context(), gone, now); err != ErrNoSession {
			t.Errorf("err %v", err)
		}
		if _, err := s.Get(t.Context(), live, now.Add(time.Hour)); err != ErrNoSession {
			t.Errorf("at its expiry: err %v", err)
		}
	})
	t.Run("a deleted one is not", func(t *testing.T) {
		s.Delete(t.Context(), live)
		if _, err := s.Get(t.Context(), live, now); err != ErrNoSession {
			t.Errorf("err %v", err)
		}
	})
	t.Run("a sign-in forgets the expired sessions", func(t *testing.T) {
		s.Create(t.Context(), [32]byte{3}, Session{Expires: now.Add(time.Hour)})
		if len(s.m) != 1 {
			t.Errorf("%d sessions kept, want the live one", len(s.m))
		}
	})
}

// A session ends SessionTTL after its sign-in: its cookie then leads back to
// the sign-in page.
func TestSessionEndsAfterItsTTL(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "default.yaml"), []byte("tenant: default\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pols, err := policy.NewStore(dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	c, err := New(Config{Auth: admin.Auth{AdminToken: "the-token"}, Policies: pols, Now: func() time.Time { return time.Unix(0, now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	jar, _ := cookiejar.New(nil)
	cl := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (int, string) {
		resp, err := cl.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	_, form := get(Prefix + "login")
	i := strings.Index(form, `name="csrf_token" value="`) + len(`name="csrf_token" value="`)
	resp, err := cl.PostForm(srv.URL+Prefix+"login", url.Values{"token": {"the-token"}, "csrf_token": {form[i : i+64]}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", resp.StatusCode)
	}
	now.Add(int64(SessionTTL - time.Minute))
	if code, _ := get(Prefix); code != http.StatusOK {
		t.Errorf("a minute before its end: %d", code)
	}
	now.Add(int64(2 * time.Minute))
	if code, _ := get(Prefix); code != http.StatusSeeOther {
		t.Errorf("a minute after its end: %d, want 303 to the sign-in page", code)
	}
}
