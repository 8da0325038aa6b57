package proxy

import (
	"context"
	"net"
	"runtime"
	"syscall"
	"testing"
)

func TestSameHost(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr net.Addr
		want bool
	}{
		{"IPv4 loopback is the same host", &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 443}, true},
		{"all of 127/8 is the same host", &net.TCPAddr{IP: net.ParseIP("127.3.2.1"), Port: 443}, true},
		{"IPv6 loopback is the same host", &net.TCPAddr{IP: net.IPv6loopback, Port: 443}, true},
		{"a private address is another host", &net.TCPAddr{IP: net.ParseIP("10.0.0.7"), Port: 443}, false},
		{"a public IPv6 address is another host", &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443}, false},
		{"a Unix socket is not a TCP peer", &net.UnixAddr{Name: "/run/x.sock", Net: "unix"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sameHost(tc.addr); got != tc.want {
				t.Fatalf("sameHost(%v) = %v, want %v", tc.addr, got, tc.want)
			}
		})
	}
}

// The upstream dialer bounds the send buffer of a same-host connection (Linux reports twice the
// size set) and leaves the kernel's default otherwise, which the proxy's own client side shows.
func TestUpstreamDialBoundsASameHostSendBuffer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the doubled SO_SNDBUF is Linux's")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	sndbuf := func(t *testing.T, c net.Conn) int {
		t.Helper()
		raw, err := c.(syscall.Conn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var n int
		var serr error
		if err := raw.Control(func(fd uintptr) {
			n, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
		}); err != nil || serr != nil {
			t.Fatal(err, serr)
		}
		return n
	}
	c, err := dialUpstream(&net.Dialer{})(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, want := sndbuf(t, c.(upstreamConn).Conn), 2*sameHostSendBuffer; got != want {
		t.Fatalf("same-host upstream SO_SNDBUF = %d, want %d", got, want)
	}
	plain, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if got := sndbuf(t, plain); got == 2*sameHostSendBuffer {
		t.Fatalf("a connection not dialed by dialUpstream has SO_SNDBUF %d too: the test shows nothing", got)
	}
}
