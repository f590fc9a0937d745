package sockdiag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// Sizes of the kernel's structures (linux/inet_diag.h, linux/netlink.h).
const (
	nlmsgHdrLen   = 16
	sockIDLen     = 48
	reqLen        = 8 + sockIDLen // struct inet_diag_req_v2
	msgLen        = 4 + sockIDLen + 20
	msgUIDOffset  = 4 + sockIDLen + 12 // idiag_uid in struct inet_diag_msg
	noCookie      = ^uint32(0)         // INET_DIAG_NOCOOKIE
	replyTimeout  = time.Second
	maxReplyBytes = 8192
)

// ErrNotFound means no socket of this network namespace has the
// connection's addresses: the client is in another namespace, or closed.
var ErrNotFound = errors.New("no such socket in this network namespace")

// PeerUID returns the owner of the socket at the other end of a TCP
// connection: local and remote are the connection's addresses as this end
// sees them (net.Conn's LocalAddr and RemoteAddr).
func PeerUID(local, remote net.Addr) (uint32, error) {
	l, ok1 := local.(*net.TCPAddr)
	r, ok2 := remote.(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("sock_diag: %T %T: not a TCP connection", local, remote)
	}
	// The peer's socket has the addresses the other way round: its source
	// is our remote end.
	src, dst := r.AddrPort(), l.AddrPort()
	if src.Addr().Unmap().Is4() && dst.Addr().Unmap().Is4() {
		// A client that connected to an IPv4 address made an AF_INET
		// socket, even when this end listens on a dual-stack socket and
		// sees IPv4-mapped addresses.
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	}
	return lookup(src, dst)
}

func lookup(src, dst netip.AddrPort) (uint32, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, fmt.Errorf("sock_diag: open netlink socket: %w", err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(replyTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	req := request(src, dst)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("sock_diag: send: %w", err)
	}
	buf := make([]byte, maxReplyBytes)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, fmt.Errorf("sock_diag: receive: %w", err)
	}
	return parse(buf[:n])
}

// request builds the netlink message of an exact lookup.
func request(src, dst netip.AddrPort) []byte {
	b := make([]byte, nlmsgHdrLen+reqLen)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(b[8:], 1) // sequence
	r := b[nlmsgHdrLen:]
	r[0] = unix.AF_INET
	if !src.Addr().Is4() {
		r[0] = unix.AF_INET6
	}
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], ^uint32(0)) // every state
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], src.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	putAddr(id[4:20], src.Addr())
	putAddr(id[20:36], dst.Addr())
	ne.PutUint32(id[40:], noCookie)
	ne.PutUint32(id[44:], noCookie)
	return b
}

// putAddr writes an address the way inet_diag_sockid holds it: an IPv4
// address in the first four bytes, an IPv6 one in all sixteen.
func putAddr(b []byte, a netip.Addr) {
	if a.Is4() {
		v := a.As4()
		copy(b, v[:])
		return
	}
	v := a.As16()
	copy(b, v[:])
}

// parse reads the kernel's answer: one inet_diag_msg, or an error.
func parse(b []byte) (uint32, error) {
	ne := binary.NativeEndian
	if len(b) < nlmsgHdrLen {
		return 0, fmt.Errorf("sock_diag: short reply (%d bytes)", len(b))
	}
	typ := ne.Uint16(b[4:])
	body := b[nlmsgHdrLen:min(len(b), int(ne.Uint32(b[0:])))]
	switch typ {
	case unix.NLMSG_ERROR:
		if len(body) < 4 {
			return 0, errors.New("sock_diag: short error reply")
		}
		errno := -int32(ne.Uint32(body))
		if errno == int32(unix.ENOENT) {
			return 0, ErrNotFound
		}
		return 0, fmt.Errorf("sock_diag: %w", unix.Errno(errno))
	case unix.SOCK_DIAG_BY_FAMILY:
		if len(body) < msgLen {
			return 0, fmt.Errorf("sock_diag: short inet_diag_msg (%d bytes)", len(body))
		}
		return ne.Uint32(body[msgUIDOffset:]), nil
	}
	return 0, fmt.Errorf("sock_diag: unexpected reply type %d", typ)
}
