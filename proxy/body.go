package proxy

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// Large request bodies (tool transcripts run to megabytes) are read into
// pooled buffers: a fresh 1 MB slice per request is cleared by make and
// left to the collector, which on a busy proxy is a large share of its CPU.
//
// A buffer goes back to its pool only when nothing can still read it: every
// upstream body reader made over it has reached EOF (the transport copies
// out as it reads, so after EOF it holds no reference), and the request is
// over. A reader left short of EOF (an early reply, a cut connection) keeps
// the buffer out of the pool for good; the collector takes it then.

const (
	minPooledBody = 64 << 10
	bodyClasses   = 10 // 64 KiB .. 32 MiB, by powers of two
)

var bodyPools [bodyClasses]sync.Pool

// A string read from a body through a view (policy.Rewrite's gjson reads)
// points into the buffer; one kept past the request (the ledger's model, a
// span's attribute, a log field, a spend counter's key) would show another
// request's bytes once the buffer is reused. What outlives the request is
// copied. To make a miss plain at once rather than now and then under load,
// PoisonPooledBuffers overwrites every buffer as it goes back to its pool:
// anything still pointing into it reads poisonPattern.
var poisonBuffers atomic.Bool

// poisonPattern fills a released buffer; it is plain text, so a ledger line
// or log field that shows it names the bug.
const poisonPattern = "~POISONED: body buffer back in the pool~"

// PoisonPooledBuffers turns the poisoning of released body buffers on or
// off, for the whole process (the pools are): --debug-poison-buffers, and
// this package's tests. It costs a write of each buffer it releases.
func PoisonPooledBuffers(on bool) { poisonBuffers.Store(on) }

// poison overwrites all of b's array with poisonPattern.
func poison(b []byte) {
	b = b[:cap(b)]
	n := copy(b, poisonPattern)
	for n < len(b) {
		n += copy(b[n:], b[:n])
	}
}

// bodyClass is the pool for a buffer of at least n bytes, or -1.
func bodyClass(n int) int {
	if n < minPooledBody {
		return -1
	}
	c := bits.Len(uint(n-1)) - bits.Len(uint(minPooledBody-1))
	if c >= bodyClasses {
		return -1
	}
	return c
}

// bodyLease is one request's body buffer and the readers over it.
type bodyLease struct {
	buf   []byte // nil when not pooled
	class int
	open  atomic.Int32 // readers made and not yet at EOF
}

// rewriteRoom is the spare capacity of a small body's buffer: what the policy
// adds (edits, the memory tool) fits, so the rewrite needs no second buffer.
const rewriteRoom = 512

// newBodyBuf returns an n-byte buffer, pooled when n is large.
func newBodyBuf(n int) ([]byte, *bodyLease) {
	c := bodyClass(n)
	if c < 0 {
		return make([]byte, n, n+rewriteRoom), nil
	}
	if p, ok := bodyPools[c].Get().(*[]byte); ok {
		return (*p)[:n], &bodyLease{buf: (*p)[:n], class: c}
	}
	b := make([]byte, n, minPooledBody<<c)
	return b, &bodyLease{buf: b, class: c}
}

// release returns the buffer to its pool if no reader can still touch it.
// Called once, when the request is over.
func (l *bodyLease) release() {
	if l == nil || l.buf == nil || l.open.Load() != 0 {
		return
	}
	b := l.buf[:0]
	l.buf = nil
	if poisonBuffers.Load() {
		poison(b)
	}
	bodyPools[l.class].Put(&b)
}

// opened counts a reader made over the buffer; settled must follow once it
// has reached EOF. Both do nothing on a nil lease (a body not pooled).
func (l *bodyLease) opened() {
	if l != nil {
		l.open.Add(1)
	}
}

func (l *bodyLease) settled() {
	if l != nil {
		l.open.Add(-1)
	}
}

// reader is an upstream request body over parts (which may alias the
// leased buffer): net.Buffers without its WriterTo, so every byte leaves
// through Read and EOF is seen here.
func (l *bodyLease) reader(parts [][]byte) io.Reader {
	l.opened()
	return &leasedReader{bufs: append(net.Buffers(nil), parts...), lease: l}
}

type leasedReader struct {
	bufs  net.Buffers
	lease *bodyLease
	done  bool
}

func (r *leasedReader) Read(p []byte) (int, error) {
	n, err := r.bufs.Read(p)
	if err == io.EOF {
		r.eof()
	}
	return n, err
}

// WriteTo writes what is left to w, in one writev when w is a TCP
// connection (upstreamConn calls it: net/http's io.Copy of a body sees a
// LimitedReader, not this). Like Read's EOF, success settles the lease.
func (r *leasedReader) WriteTo(w io.Writer) (int64, error) {
	n, err := r.bufs.WriteTo(w)
	if err == nil {
		r.eof()
	}
	return n, err
}

// Close does nothing: the lease is settled by EOF. Being a ReadCloser keeps
// net/http from wrapping the reader, so upstreamConn can find it.
func (r *leasedReader) Close() error { return nil }

// len is the number of bytes left to read.
func (r *leasedReader) len() int64 {
	var n int64
	for _, b := range r.bufs {
		n += int64(len(b))
	}
	return n
}

func (r *leasedReader) eof() {
	if !r.done {
		r.done = true
		r.lease.settled()
	}
}

// clientBody is the client's body as the body phase read it.
type clientBody struct {
	lease *bodyLease  // the body's buffer, when pooled; released when the request is over
	n     int64       // bytes read
	lead  *leadUpload // the upload that went ahead while it arrived (lead.go); nil when none
}

// readClientBody reads the body within --max-body; past it the 413 names
// the tenant when the key is a tenant's (the operator's first question).
// The clientBody is returned on a failure too: its lease is released once
// the request is over.
func (x *exchange) readClientBody() (clientBody, []byte, bool) {
	s, r := x.s, x.r
	whose := ""
	if x.who.known {
		whose = " for tenant " + x.who.tenant
	}
	if r.ContentLength > s.cfg.MaxBody {
		x.fail(http.StatusRequestEntityTooLarge, "request_too_large",
			fmt.Sprintf("request body is %d bytes; the limit%s is %d bytes", r.ContentLength, whose, s.cfg.MaxBody))
		return clientBody{}, nil, false
	}
	body, lease, err := readBody(r, s.cfg.MaxBody)
	in := clientBody{lease: lease, n: int64(len(body))}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			x.fail(http.StatusRequestEntityTooLarge, "request_too_large",
				fmt.Sprintf("request body is over the limit%s of %d bytes", whose, s.cfg.MaxBody))
			return in, nil, false
		}
		x.fail(http.StatusBadRequest, "invalid_request_error", "could not read request body: "+err.Error())
		return in, nil, false
	}
	return in, body, true
}

// readBody reads at most limit bytes; Content-Length sizes the buffer once
// (a pooled one for large bodies: bodyLease above).
func readBody(r *http.Request, limit int64) ([]byte, *bodyLease, error) {
	rd := http.MaxBytesReader(nil, r.Body, limit)
	if r.ContentLength > 0 {
		buf, lease := newBodyBuf(int(r.ContentLength))
		if _, err := io.ReadFull(rd, buf); err != nil {
			lease.release()
			return nil, nil, err
		}
		if err := pastLength(rd); err != nil {
			lease.release()
			return nil, nil, err
		}
		return buf, lease, nil
	}
	b, err := io.ReadAll(rd)
	return b, nil, err
}

// errPastLength is a body that goes on past its Content-Length: a broken client.
var errPastLength = errors.New("body longer than its content-length")

// pastLength reads rd, a body read up to its declared length, for one byte more: any is
// errPastLength.
func pastLength(rd io.Reader) error {
	var one [1]byte
	if n, _ := rd.Read(one[:]); n > 0 {
		return errPastLength
	}
	return nil
}
