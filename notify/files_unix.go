//go:build unix

package notify

import "golang.org/x/sys/unix"

// writable asks the kernel whether this process may read and write path
// (a file) or create files in it (a directory), which accounts for modes,
// ACLs, capabilities and read-only mounts.
func writable(path string, dir bool) error {
	mode := uint32(unix.R_OK | unix.W_OK)
	if dir {
		mode = unix.W_OK | unix.X_OK
	}
	return unix.Access(path, mode)
}
