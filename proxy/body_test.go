package proxy

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
)

func TestBodyClass(t *testing.T) {
	for n, want := range map[int]int{1: -1, minPooledBody - 1: -1, minPooledBody: 0, minPooledBody + 1: 1,
		2 * minPooledBody: 1, 1 << 20: 4, 32 << 20: 9, 32<<20 + 1: -1} {
		if got := bodyClass(n); got != want {
			t.Errorf("bodyClass(%d) = %d, want %d", n, got, want)
		}
		if c := bodyClass(n); c >= 0 && minPooledBody<<c < n {
			t.Errorf("class %d of %d bytes is too small", c, n)
		}
	}
}

func TestABodyBufferIsNotReusedWhileAReaderIsShortOfEOF(t *testing.T) {
	buf, lease := newBodyBuf(100 << 10)
	r := lease.reader([][]byte{buf[:10], buf[10:]})
	io.CopyN(io.Discard, r, 50) // an upstream that answered before reading it all
	lease.release()
	for range 20 {
		b, l := newBodyBuf(100 << 10)
		if &b[:1][0] == &buf[:1][0] {
			t.Fatal("a buffer a reader still held went back to the pool")
		}
		l.release()
	}
}

func TestAFullyReadBodyBufferGoesBackToThePool(t *testing.T) {
	// sync.Pool may drop what it is given (it does at random under -race),
	// so this looks for a reuse among several tries.
	for range 50 {
		buf, lease := newBodyBuf(100 << 10)
		io.Copy(io.Discard, lease.reader([][]byte{buf}))
		lease.release()
		b, l := newBodyBuf(100 << 10)
		reused := &b[:1][0] == &buf[:1][0]
		l.release()
		if reused {
			return
		}
	}
	t.Fatal("a fully read buffer never came back from the pool")
}

// Many concurrent large bodies, each distinct: what the upstream gets is
// exactly what each client sent, so no pooled buffer is ever shared.
func TestPooledBodiesNeverMix(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	seen := map[string]string{} // sum in the message → sum of the body received
	h.fake.SetResponder(func(r *fakeapi.Request) fakeapi.Reply {
		tag := gjson.GetBytes(r.Body, "metadata.user_id").Str
		sum := fmt.Sprintf("%x", sha256.Sum256(r.Body))
		mu.Lock()
		seen[tag] = sum
		mu.Unlock()
		return fakeapi.TextReply("ok")
	})
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"m","max_tokens":1,"metadata":{"user_id":"u%d"},"messages":[{"role":"user","content":"%s"}]}`,
				i, strings.Repeat(fmt.Sprintf("client %d says hello. ", i), 8000))
			resp := h.post("/v1/messages", keyOther, body)
			if got := readAll(t, resp.Body); resp.StatusCode != http.StatusOK {
				t.Errorf("request %d: %d %.200s", i, resp.StatusCode, got)
			}
		}()
	}
	wg.Wait()
	for _, r := range h.fake.Requests() {
		tag := gjson.GetBytes(r.Body, "metadata.user_id").Str
		var i int
		fmt.Sscanf(tag, "u%d", &i)
		if !strings.Contains(string(r.Body), fmt.Sprintf("client %d says hello", i)) ||
			strings.Contains(string(r.Body), fmt.Sprintf("client %d says", (i+1)%40)) {
			t.Errorf("request %s reached the upstream with another client's bytes", tag)
		}
	}
	if len(seen) != 40 {
		t.Fatalf("upstream saw %d distinct requests, want 40", len(seen))
	}
}

// readBody takes exactly the declared length: a body that goes on past it (which a handler
// called with an unframed body can see) or stops short of it is an error, not a truncation.
func TestReadBodyHoldsToItsContentLength(t *testing.T) {
	for _, tc := range []struct {
		name     string
		body     string
		declared int64
		want     error
	}{
		{"a body of its declared length is read whole", "0123456789", 10, nil},
		{"a body longer than declared is refused", "0123456789+", 10, errPastLength},
		{"a body shorter than declared is refused", "012345678", 10, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(tc.body))
			r.ContentLength = tc.declared
			got, _, err := readBody(r, 1<<20)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if err == nil && string(got) != tc.body {
				t.Fatalf("read %q, want %q", got, tc.body)
			}
		})
	}
}
