package inflight

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// The FUSE opcodes the test's file system answers (linux/fuse.h).
const (
	fuseLookup      = 1
	fuseForget      = 2
	fuseGetattr     = 3
	fuseOpen        = 14
	fuseRead        = 15
	fuseRelease     = 18
	fuseFlush       = 25
	fuseInit        = 26
	fuseInterrupt   = 36
	fuseBatchForget = 42
)

// stallingFUSE mounts a FUSE file system with one 1 MiB file, "file",
// whose daemon answers everything but reads: a page of the file that is
// not in the page cache never arrives, and whoever faults on it waits
// until the connection is aborted, which abort does, and the test's
// cleanup (so a read stuck there returns). It returns the file's path,
// or skips where FUSE cannot be mounted.
func stallingFUSE(t *testing.T) (path string, abort func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: mounting FUSE needs root")
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Skipf("skipping: no /dev/fuse: %v", err)
	}
	dir := t.TempDir()
	opts := "fd=" + strconv.Itoa(fd) + ",rootmode=40000,user_id=0,group_id=0"
	if err := unix.Mount("spanwatch-test", dir, "fuse.spanwatch-test", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		t.Skipf("skipping: mount fuse: %v", err)
	}
	// Non-blocking, so that Close interrupts the daemon's read; the
	// descriptor's release then aborts the connection: requests left
	// unanswered fail with ENOTCONN and whoever waits on them returns.
	dev := os.NewFile(uintptr(fd), "/dev/fuse")
	done := make(chan struct{})
	go func() {
		defer close(done)
		serveStallingFUSE(dev)
	}()
	var once sync.Once
	abort = func() {
		once.Do(func() {
			dev.Close()
			<-done
			unix.Unmount(dir, unix.MNT_DETACH)
		})
	}
	t.Cleanup(abort)
	return filepath.Join(dir, "file"), abort
}

// fuseAttr fills a struct fuse_attr (88 bytes) for node 1 (the root) or 2
// (the file).
func fuseAttr(b []byte, node uint64) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], node) // ino
	mode := uint32(unix.S_IFDIR | 0o755)
	if node == 2 {
		le.PutUint64(b[8:], 1<<20) // size
		le.PutUint64(b[16:], 2048) // blocks
		mode = unix.S_IFREG | 0o444
	}
	le.PutUint32(b[60:], mode)
	le.PutUint32(b[64:], 1)    // nlink
	le.PutUint32(b[80:], 4096) // blksize
}

func serveStallingFUSE(dev *os.File) {
	le := binary.LittleEndian
	buf := make([]byte, 1<<17)
	for {
		n, err := dev.Read(buf)
		if errors.Is(err, os.ErrClosed) {
			return
		}
		if err != nil || n < 40 {
			continue // EINTR, ENOENT of an interrupted request, EAGAIN
		}
		op, unique, node := le.Uint32(buf[4:]), le.Uint64(buf[8:]), le.Uint64(buf[16:])
		var out []byte
		errno := int32(0)
		switch op {
		case fuseForget, fuseBatchForget, fuseInterrupt:
			continue // no answer expected
		case fuseRead:
			continue // the stall
		case fuseInit:
			out = make([]byte, 64)
			le.PutUint32(out[0:], 7)     // major
			le.PutUint32(out[4:], 31)    // minor
			le.PutUint32(out[8:], 0)     // max_readahead
			le.PutUint32(out[20:], 4096) // max_write
		case fuseLookup:
			if string(buf[40:n]) != "file\x00" {
				errno = -int32(unix.ENOENT)
				break
			}
			out = make([]byte, 40+88)
			le.PutUint64(out[0:], 2)   // nodeid
			le.PutUint64(out[16:], 60) // entry_valid
			le.PutUint64(out[24:], 60) // attr_valid
			fuseAttr(out[40:], 2)
		case fuseGetattr:
			out = make([]byte, 16+88)
			le.PutUint64(out[0:], 60) // attr_valid
			fuseAttr(out[16:], node)
		case fuseOpen:
			out = make([]byte, 16)
		case fuseFlush, fuseRelease:
		default:
			errno = -int32(unix.ENOSYS)
		}
		if errno != 0 {
			out = nil
		}
		reply := make([]byte, 16+len(out))
		le.PutUint32(reply[0:], uint32(len(reply)))
		le.PutUint32(reply[4:], uint32(errno))
		le.PutUint64(reply[8:], unique)
		copy(reply[16:], out)
		dev.Write(reply)
	}
}
