package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/policy"
)

// Forwarding while reading. A large Messages or count_tokens body goes upstream while it
// arrives, as a bare proxy forwards it, instead of after the whole body is in: a policy.Lead says
// which bytes the rewrite is certain to leave as they are (or how it changes them), and those go
// at once. The upstream headers are sent before the end of the body shows what they must be, so
// they are the tenant's last led request's (leadShape): the betas it needed and how many bytes the
// rewrite added, which with the client's Content-Length gives the upload's. At the end the body is
// rewritten as always; when the rewrite, or the tenant's limits, refuse it, the upload is cut
// before its end, so the upstream never has a whole request; when it needed other betas or another
// length than those sent, or the Lead's promise did not hold, the upload is cut and the whole body
// sent again, as a buffered one. A tenant's first large body goes buffered: it sets the shape.
//
// Not led: memory proxy mode (the loop builds its first request from the whole body), bodies
// whose length is not known or below minLeadBody, compressed request bodies, traced requests
// (the call's span is named from the rewritten body); and all of them unless
// Config.ForwardWhileReading (--forward-while-reading) is on.

// minLeadBody is the smallest body forwarded while it arrives: a smaller one arrives in a read
// or two, and would only pay for the hand-off.
const minLeadBody = 256 << 10

// leadBatch is how much goes upstream at a time: each hand-off wakes the transport's writer for a
// writev, so a read's worth each (often a few KiB) would cost more than it saves.
const leadBatch = 128 << 10

// mayLead says whether the request's body is forwarded while it arrives.
func (x *exchange) mayLead() bool {
	s, r := x.s, x.r
	return s.cfg.ForwardWhileReading && policy.LeadWorks &&
		(x.ep == epMessages || x.ep == epCountTokens) && !x.who.memory &&
		r.ContentLength >= minLeadBody && r.ContentLength <= s.cfg.MaxBody &&
		r.Header.Get("Content-Encoding") == "" && !s.cfg.Tracer.Enabled()
}

// readLeading is readClientBody, rewrite and checkLimits for a body forwarded while it arrives.
// On true, in.lead is the upload when it went ahead (callUpstream takes its reply); otherwise
// the body is sent as a buffered one. Like readClientBody it returns in on a failure too.
func (x *exchange) readLeading() (in clientBody, q request, t *limits.Ticket, ok bool) {
	r, pol, tenant := x.r, x.who.pol, x.who.tenant
	n := int(r.ContentLength)
	buf, lease := newBodyBuf(n)
	in.lease = lease
	q.header = x.upstreamHeader()
	lead := pol.NewLead(q.header)
	shape, shaped := x.s.shapeOf(tenant)
	var up *leadUpload
	defer func() {
		if up != nil && in.lead != up {
			up.abort() // refused, failed, or sent again whole
		}
	}()
	rd := http.MaxBytesReader(nil, r.Body, x.s.cfg.MaxBody)
	got := 0
	var pending [][]byte // handed out, not yet queued: the upload gets them leadBatch at a time
	pendingN := 0
	for got < n {
		m, err := rd.Read(buf[got:])
		got += m
		pieces := lead.Advance(buf[:got]) // skims messages as it comes, shaped or not
		if shaped {
			for _, p := range pieces {
				pending = append(pending, p)
				pendingN += len(p)
			}
		}
		if pendingN >= leadBatch {
			if up == nil {
				up = x.startLead(q.header, lease, shape, n)
			}
			up.body.add(pending)
			pending, pendingN = pending[:0], 0
		}
		if err != nil && got < n {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			x.fail(http.StatusBadRequest, "invalid_request_error", "could not read request body: "+err.Error())
			return in, q, nil, false
		}
	}
	if err := pastLength(rd); err != nil {
		x.fail(http.StatusBadRequest, "invalid_request_error", "could not read request body: "+err.Error())
		return in, q, nil, false
	}
	in.n = int64(n)
	x.shadow = x.openShadow(buf)
	parts, rest, info, err := pol.RewriteLead(buf, q.header, lead)
	if !x.accept(&q, parts, info, err) {
		return in, q, nil, false
	}
	x.conv = x.openConversation(buf, &info.Top)
	q.msgs, q.msgsRead = info.Top.Messages.Of(buf), true
	x.conv.askDiagnostics(&q, false)
	rest = x.conv.withDiagnostics(rest)
	if t, ok = x.checkLimits(&q, n); !ok {
		return in, q, nil, false
	}
	now := leadShape{betas: info.Betas(), added: partsLen(q.parts) - n}
	if now != shape || !shaped {
		x.s.leadShapes.Store(tenant, now)
	}
	if up == nil || rest == nil || now != shape {
		return in, q, t, true // the deferred abort cuts an upload; callUpstream sends parts
	}
	up.body.add(pending)
	up.body.finish(rest)
	in.lead = up
	return in, q, t, true
}

// leadShape is what a tenant's led upload sends before its body has arrived: the betas its
// rewrite merges and the bytes it adds (the upload's length is the client's plus these).
type leadShape struct {
	betas policy.Betas
	added int
}

// shapeOf is the shape of the tenant's last large body, if it has sent one.
func (s *Server) shapeOf(tenant string) (leadShape, bool) {
	v, ok := s.leadShapes.Load(tenant)
	if !ok {
		return leadShape{}, false
	}
	return v.(leadShape), true
}

func partsLen(parts [][]byte) int {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	return n
}

// leadUpload is the upstream request of a body forwarded while it arrives.
type leadUpload struct {
	taken    bool // an upstream call took it (take)
	answered bool // its reply was the call's: the body went upstream while it arrived
	body     *leadBody
	cancel   context.CancelFunc
	t0       time.Time
	done     chan struct{} // closed when resp and err are set
	resp     *http.Response
	err      error
}

// startLead sends the upstream request whose body is fed as the client's n bytes arrive, in the
// tenant's last shape: its betas merged into the client's anthropic-beta, and its length.
func (x *exchange) startLead(header http.Header, lease *bodyLease, shape leadShape, n int) *leadUpload {
	s := x.s
	h := header.Clone()
	shape.betas.Merge(h)
	ctx, cancel := context.WithCancel(x.r.Context())
	u := &leadUpload{body: newLeadBody(lease), cancel: cancel, t0: time.Now(), done: make(chan struct{})}
	req := s.up.newRequest(ctx, x.r, h, nil, nil)
	req.Body, req.GetBody, req.ContentLength = u.body, nil, int64(n+shape.added) // never resent by the transport
	go func() {
		defer close(u.done)
		u.resp, u.err = s.up.send(req)
	}()
	return u
}

// abort cuts the upload before its end and waits for its request to be over.
func (u *leadUpload) abort() {
	u.body.cut()
	u.cancel()
	<-u.done
	if u.resp != nil {
		u.resp.Body.Close()
	}
}

// result is the upstream's reply to the upload, once the body is all handed to it; ok false
// when the upload failed before its end (the upstream saw no whole request) and the request is
// to be sent again whole. ctx, when cancelled, cancels the upload's request, as it would a
// request it made.
func (u *leadUpload) result(ctx context.Context) (resp *http.Response, err error, ok bool) {
	select {
	case <-u.done:
	case <-ctx.Done():
		u.cancel()
		<-u.done
	}
	if u.err != nil && !u.body.delivered() && ctx.Err() == nil {
		return nil, nil, false
	}
	context.AfterFunc(ctx, u.cancel)
	u.answered = true
	return u.resp, u.err, true
}

// errLeadCut is what the upstream request's body reads once its upload was cut.
var errLeadCut = errors.New("upload cut: the body was refused or is sent again whole")

// leadBody is the upstream request body of a led upload: pieces added as the Lead hands them
// out, then the rewritten rest. The transport reads it on its own goroutine; EOF only after
// finish, so a cut upload never ends as a whole request.
type leadBody struct {
	mu    sync.Mutex
	more  sync.Cond
	queue [][]byte
	final bool  // queue ends with the rest of the body
	err   error // cut
	eof   bool  // every byte handed to the transport
	lease *bodyLease
}

func newLeadBody(lease *bodyLease) *leadBody {
	b := &leadBody{lease: lease}
	b.more.L = &b.mu
	lease.opened() // settled at EOF, as a leasedReader
	return b
}

// add queues pieces (which alias the client's body or the Lead's text and stay unchanged).
func (b *leadBody) add(pieces [][]byte) {
	b.mu.Lock()
	b.queue = append(b.queue, pieces...)
	b.mu.Unlock()
	b.more.Signal()
}

// finish queues the rest of the body and lets the body end after it.
func (b *leadBody) finish(rest [][]byte) {
	b.mu.Lock()
	b.queue = append(b.queue, rest...)
	b.final = true
	b.mu.Unlock()
	b.more.Signal()
}

// cut makes the body fail before its end, unless it already ended.
func (b *leadBody) cut() {
	b.mu.Lock()
	if !b.eof && b.err == nil {
		b.err = errLeadCut
	}
	b.mu.Unlock()
	b.more.Broadcast()
}

func (b *leadBody) delivered() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

// wait waits until there are pieces to send and returns nil, or the error or EOF that ends the
// body. Called with b.mu held.
func (b *leadBody) wait() error {
	for {
		for len(b.queue) > 0 && len(b.queue[0]) == 0 {
			b.queue = b.queue[1:]
		}
		switch {
		case b.err != nil:
			return b.err
		case len(b.queue) > 0:
			return nil
		case b.final:
			if !b.eof {
				b.eof = true
				b.lease.settled()
			}
			return io.EOF
		}
		b.more.Wait()
	}
}

func (b *leadBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.wait(); err != nil {
		return 0, err
	}
	n := copy(p, b.queue[0])
	b.queue[0] = b.queue[0][n:]
	return n, nil
}

// WriteTo writes the pieces as they come, straight from where they are, a batch in one writev
// when w is a TCP connection (upstreamConn calls it, as for a leasedReader).
func (b *leadBody) WriteTo(w io.Writer) (int64, error) {
	var total int64
	var q net.Buffers
	for {
		b.mu.Lock()
		err := b.wait()
		if err == nil {
			q, b.queue = b.queue, q[:0] // swapped: the next pieces go in the last batch's array
		}
		b.mu.Unlock()
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		batch := q // WriteTo consumes its receiver
		n, err := batch.WriteTo(w)
		total += n
		if err != nil {
			return total, fmt.Errorf("write upstream body: %w", err)
		}
	}
}

// Close makes a read the transport may still be waiting in return: the request is over.
func (b *leadBody) Close() error {
	b.cut()
	return nil
}
