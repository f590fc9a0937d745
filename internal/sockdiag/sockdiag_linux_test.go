package sockdiag

import (
	"errors"
	"net"
	"os"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// accept connects client to ln and returns the accepted end.
func accept(t *testing.T, ln net.Listener, dial func() net.Conn) (server, client net.Conn) {
	t.Helper()
	done := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	client = dial()
	server = <-done
	if server == nil {
		t.FailNow()
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// TestPeerUID connects to a listener and asks for the owner of the
// client's socket, for IPv4, IPv6, and an IPv4 client of a dual-stack
// listener (which sees IPv4-mapped addresses).
func TestPeerUID(t *testing.T) {
	for _, tc := range []struct{ listen, dial string }{
		{"127.0.0.1:0", "127.0.0.1"},
		{"[::1]:0", "::1"},
		{"[::]:0", "127.0.0.1"},
	} {
		t.Run(tc.listen+"<-"+tc.dial, func(t *testing.T) {
			ln, err := net.Listen("tcp", tc.listen)
			if err != nil {
				t.Skipf("cannot listen on %s here: %v", tc.listen, err)
			}
			defer ln.Close()
			port := ln.Addr().(*net.TCPAddr).Port
			srv, _ := accept(t, ln, func() net.Conn {
				c, err := net.Dial("tcp", net.JoinHostPort(tc.dial, itoa(port)))
				if err != nil {
					t.Fatal(err)
				}
				return c
			})
			uid, err := PeerUID(srv.LocalAddr(), srv.RemoteAddr())
			if err != nil {
				t.Fatal(err)
			}
			if want := uint32(os.Geteuid()); uid != want {
				t.Errorf("peer uid %d, want %d (this process)", uid, want)
			}
		})
	}
}

// TestPeerUIDOtherUser checks that a socket created by another user is
// reported as that user's: the client socket is made on a thread whose
// fsuid is nobody's (what the kernel stamps a new socket with).
func TestPeerUIDOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a socket as another user")
	}
	const nobody = 65534
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv, _ := accept(t, ln, func() net.Conn {
		fd := socketAs(t, nobody)
		sa := &unix.SockaddrInet4{Port: ln.Addr().(*net.TCPAddr).Port, Addr: [4]byte{127, 0, 0, 1}}
		if err := unix.Connect(fd, sa); err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), "client")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
	uid, err := PeerUID(srv.LocalAddr(), srv.RemoteAddr())
	if err != nil {
		t.Fatal(err)
	}
	if uid != nobody {
		t.Errorf("peer uid %d, want %d", uid, nobody)
	}
}

// socketAs creates a TCP socket owned by uid, on a thread whose fsuid is
// set for the call and restored before the thread is released.
func socketAs(t *testing.T, uid int) int {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := unix.SetfsuidRetUid(uid)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.SetfsuidRetUid(prev)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestPeerUIDNotFound asks about a connection that no longer exists.
func TestPeerUIDNotFound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	local := ln.Addr()
	ln.Close()
	_, err = PeerUID(local, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1})
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("err = %v, want ErrNotFound", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
