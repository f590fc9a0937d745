//go:build unix

package notify

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

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

// lockFile takes flock(2) on f, exclusive or shared, as bbolt does on its
// file, trying for up to timeout: false when another process holds it.
func lockFile(f *os.File, exclusive bool, timeout time.Duration) (bool, error) {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, unix.EWOULDBLOCK):
			return false, err
		case time.Now().After(deadline):
			return false, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unlockFile releases flock(2) on f.
func unlockFile(f *os.File) { unix.Flock(int(f.Fd()), unix.LOCK_UN) }
