package userfile

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// SplitRoot splits a path through a process's root in procfs,
// ".../PID/root/REST", into that root and the rest; ok is false for any
// other path.
func SplitRoot(path string) (root, rest string, ok bool) {
	path = filepath.Clean(path)
	for i := 0; ; {
		j := strings.Index(path[i:], "/root")
		if j < 0 {
			return "", "", false
		}
		j += i
		end := j + len("/root")
		if end == len(path) || path[end] == '/' {
			slash := strings.LastIndexByte(path[:j], '/')
			if pid := path[slash+1 : j]; slash >= 0 && pid != "" && strings.Trim(pid, "0123456789") == "" {
				rest = path[end:]
				if rest == "" {
					rest = "/"
				}
				return path[:end], rest, true
			}
		}
		i = end
	}
}

// OnPID is the name Do's callers use for operations on behalf of process
// pid: its user's, as the owner of procRoot/PID shows it; "" when gone.
func OnPID(procRoot string, pid int) string {
	fi, err := os.Stat(filepath.Join(procRoot, strconv.Itoa(pid)))
	if err != nil {
		return ""
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return OnUID(st.Uid)
	}
	return ""
}

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
