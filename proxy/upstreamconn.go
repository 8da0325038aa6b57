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
		return upstreamConn{c}, nil
	}
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
