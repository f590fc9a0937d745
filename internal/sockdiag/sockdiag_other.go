//go:build !linux

package sockdiag

import (
	"errors"
	"net"
)

// ErrNotFound means no socket of this network namespace has the
// connection's addresses.
var ErrNotFound = errors.New("no such socket in this network namespace")

// PeerUID is Linux-only (NETLINK_SOCK_DIAG).
func PeerUID(local, remote net.Addr) (uint32, error) {
	return 0, errors.New("sock_diag: needs Linux")
}
