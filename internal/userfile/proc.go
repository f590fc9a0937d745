package userfile

import (
	"context"
	"io"
	"os"
)

// ReadProc reads a file of the agent's procfs, such as /proc/PID/maps, up
// to max bytes (a longer file is cut there and counted under
// ReasonProcSize), through Do: reading a process's maps or memory waits
// for its mmap lock, which a process stuck on a FUSE page fault holds.
func ReadProc(ctx context.Context, on, path string, max int64) ([]byte, error) {
	return Do(ctx, on, func() ([]byte, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		// procfs files have no size: read until EOF or the cap.
		b, err := io.ReadAll(io.LimitReader(f, max+1))
		if int64(len(b)) > max {
			Count(ReasonProcSize)
			b = b[:max]
		}
		return b, err
	}, nil)
}

// ReadProcAt reads n bytes at off of a procfs file, /proc/PID/mem, through
// Do; it returns what it could read and an error when that is nothing.
func ReadProcAt(ctx context.Context, on, path string, off int64, n int) ([]byte, error) {
	return Do(ctx, on, func() ([]byte, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		buf := make([]byte, n)
		k, err := f.ReadAt(buf, off)
		if k > 0 {
			return buf[:k], nil
		}
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}, nil)
}
