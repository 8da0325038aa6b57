package proxy

import (
	"crypto/sha256"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The official SDKs resend a non-streamed request whose response was cut part-way (the TS SDK
// since 1.17.0, the Go SDK since 2.17.0; the December 2026 API reference's section on resent
// requests): same credential, a byte-identical body, x-stainless-retry-count 1, 2, … . In
// memory proxy mode the first attempt may have run memory writes before its reply was cut, and
// running the request again would write them twice. So the reply of a plain memory-loop request
// that wrote is kept for a few minutes, and a resend of it (a retry count of 1 or more, the same
// credential and body) is answered from it: no upstream call, no memory command. Kept in this
// process only: a resend that reaches another replica runs again.

const (
	replayTTL      = 5 * time.Minute
	replayMaxItems = 256
	replayMaxBytes = 8 << 20 // a reply larger than this is not kept
)

// replayKey names a request: its credential and its body as the client sent it.
type replayKey [sha256.Size]byte

func newReplayKey(h http.Header, body []byte) replayKey {
	d := sha256.New()
	d.Write([]byte(h.Get("X-Api-Key")))
	d.Write([]byte{0})
	d.Write([]byte(h.Get("Authorization")))
	d.Write([]byte{0})
	d.Write(body)
	var k replayKey
	d.Sum(k[:0])
	return k
}

// isResend reports whether h is an SDK's resend of a request (x-stainless-retry-count ≥ 1).
func isResend(h http.Header) bool {
	n, err := strconv.Atoi(h.Get("X-Stainless-Retry-Count"))
	return err == nil && n >= 1
}

type servedReply struct {
	at     time.Time
	status int
	header http.Header
	body   []byte
}

// replies keeps served replies for replay, the oldest dropped first.
type replies struct {
	mu    sync.Mutex
	m     map[replayKey]*servedReply
	order []replayKey
}

func (r *replies) put(k replayKey, status int, h http.Header, body []byte) {
	if len(body) > replayMaxBytes {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[replayKey]*servedReply{}
	}
	if _, ok := r.m[k]; !ok {
		r.order = append(r.order, k)
	}
	r.m[k] = &servedReply{at: time.Now(), status: status, header: h.Clone(), body: append([]byte(nil), body...)}
	for len(r.order) > replayMaxItems {
		delete(r.m, r.order[0])
		r.order = r.order[1:]
	}
}

func (r *replies) get(k replayKey) (*servedReply, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.m[k]
	if !ok || time.Since(s.at) > replayTTL {
		return nil, false
	}
	return s, true
}

// replayRequest names a memory proxy-mode Messages request for the SDKs' resends. Its key is
// needed only for a resend (looked up) or a loop that wrote (kept): a pooled body, which the
// rewrite leaves as it came until the request is over, is hashed only then, so a request that
// neither resends nor writes never hashes its transcript (a megabyte is about half a
// millisecond of CPU). A body rewritten in place is hashed before the rewrite.
type replayRequest struct {
	on   bool
	h    http.Header
	body []byte // the client's body, until keyed hashes it
	key  replayKey
}

// keyed is the request's key, hashed at the first call.
func (q *replayRequest) keyed() replayKey {
	if q.body != nil {
		q.key, q.body = newReplayKey(q.h, q.body), nil
	}
	return q.key
}

// replayKeyFor names a memory proxy-mode Messages request, before the rewrite.
func (x *exchange) replayKeyFor(body []byte) {
	if !x.who.memory || x.ep != epMessages {
		return
	}
	x.replay = replayRequest{on: true, h: x.r.Header, body: body}
	if rewritesInPlace(body) {
		x.replay.keyed()
	}
}

// replayed answers an SDK's resend of a request this process already served (and whose loop
// wrote memory) with the reply it got; false when it is not one.
func (x *exchange) replayed() bool {
	if !x.replay.on || !isResend(x.r.Header) {
		return false
	}
	s, ok := x.s.replies.get(x.replay.keyed())
	if !ok {
		return false
	}
	h := x.w.Header()
	for k, v := range s.header {
		h[k] = v
	}
	h.Set("X-Ctxproxy-Replayed", "true")
	x.out.status = s.status
	x.w.WriteHeader(s.status)
	n, _ := x.w.Write(s.body)
	x.out.n += int64(n)
	return true
}

// keepReply keeps a whole reply of a loop that wrote memory, for the client's resend.
func (x *exchange) keepReply(status int, body []byte) {
	if x.replay.on && x.loop.wrote && status == http.StatusOK {
		x.s.replies.put(x.replay.keyed(), status, x.w.Header(), body)
	}
}
