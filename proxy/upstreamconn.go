package proxy

import (
	"context"
	"io"
	"net"
)

// upstreamConn is an upstream connection that writes a request body the
// proxy holds in memory (a leasedReader) straight from its buffers, in one
// writev. net/http sends a body of known length through an io.LimitedReader,
// which hides every fast path: without this, a plain-TCP upstream copies the
// body through a 32 KiB buffer, which on a 1 MiB transcript was a fifth of
// the proxy's CPU. Over TLS the record layer copies anyway and this is not
// reached (tls.Conn has no ReadFrom).
type upstreamConn struct{ net.Conn }

// dialUpstream dials with d and wraps the connection in an upstreamConn.
func dialUpstream(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tc, ok := c.(*net.TCPConn); ok && sameHost(tc.RemoteAddr()) {
			// Best effort: the connection works the same with the kernel's own size.
			_ = tc.SetWriteBuffer(sameHostSendBuffer)
		}
		return upstreamConn{c}, nil
	}
}

// sameHostSendBuffer bounds the send buffer of an upstream connection on the same host (a
// sidecar, a local gateway). There the kernel hands what the proxy writes straight to the
// reader's queue, so a body written in one writev sits there whole, in pages that have left the
// cache by the time the reader copies them out; with the buffer bounded, the write waits for the
// reader and the pages it reuses are still warm. On 1 MiB bodies this took about 0.1 ms (a
// seventh) off the proxy's CPU per request and a few percent off the upstream's (bench/RESULTS.md,
// session 8). Linux doubles it (1 MiB).
// A remote upstream keeps the kernel's autotuning: there the buffer holds what is in flight, and
// a bound would cap each round trip.
const sameHostSendBuffer = 512 << 10

// sameHost reports whether a is a loopback address.
func sameHost(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// ReadFrom is what net/http's io.Copy of a request body calls.
func (c upstreamConn) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		var wt io.WriterTo
		switch br := lr.R.(type) {
		case *leasedReader:
			if br.len() <= lr.N {
				wt = br
			}
		case *leadBody:
			wt = br // its length is the request's: readLeading finishes it only then
		}
		if wt != nil {
			n, err := wt.WriteTo(c.Conn)
			lr.N -= n
			return n, err
		}
	}
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}
