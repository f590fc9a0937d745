package userfile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Open opens name inside the directory root as if root were "/": a
// process's file through its root, /proc/PID/root. See the package
// documentation for what is checked. It gives up with ErrTimeout when ctx
// ends first.
func Open(ctx context.Context, root, name string, o Options) (*File, error) {
	return Do(ctx, o.On, func() (*File, error) { return openIn(root, name, o) }, closeFile)
}

// ReadFile opens name inside root as Open does and reads it, up to max
// bytes (truncated: there was more), in one operation bounded by ctx.
func ReadFile(ctx context.Context, root, name string, o Options, max int64) (b []byte, truncated bool, err error) {
	type read struct {
		b         []byte
		truncated bool
	}
	r, err := Do(ctx, o.On, func() (read, error) {
		f, err := openIn(root, name, o)
		if err != nil {
			return read{}, err
		}
		defer f.Close()
		b, truncated, err := ReadAll(f, max)
		return read{b, truncated}, err
	}, nil)
	return r.b, r.truncated, err
}

// ReadFileChanged is ReadFile for a file read before: when unchanged
// reports true for what fstat says of it now, the file is not read and b
// is nil. info is what fstat said.
func ReadFileChanged(ctx context.Context, root, name string, o Options, max int64, unchanged func(Info) bool) (b []byte, truncated bool, info Info, err error) {
	type read struct {
		b         []byte
		truncated bool
		info      Info
	}
	r, err := Do(ctx, o.On, func() (read, error) {
		f, err := openIn(root, name, o)
		if err != nil {
			return read{}, err
		}
		defer f.Close()
		if unchanged != nil && unchanged(f.Info) {
			return read{info: f.Info}, nil
		}
		b, truncated, err := ReadAll(f, max)
		return read{b, truncated, f.Info}, err
	}, nil)
	return r.b, r.truncated, r.info, err
}

func openIn(root, name string, o Options) (*File, error) {
	path := filepath.Join(root, name)
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rfd)
	pfd, err := resolve(rfd, name, o.Symlinks)
	if err != nil {
		if errors.Is(err, errLink) {
			return nil, refuse(path, ErrSymlink, ReasonSymlink)
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return check(pfd, path, o)
}

// OpenRooted opens a path as the process it belongs to sees it: a path
// through a process's root in procfs (/proc/PID/root/usr/lib/x.so) is
// resolved inside that root, as Open resolves it; any other path is one
// the agent trusts, opened as OpenPath opens it.
func OpenRooted(ctx context.Context, path string, o Options) (*File, error) {
	if root, name, ok := SplitRoot(path); ok {
		return Open(ctx, root, name, o)
	}
	return OpenPath(ctx, path, o)
}

// OpenPath opens a path the agent trusts, following the links on it:
// procfs's links to what a process runs or mapped (/proc/PID/exe,
// /proc/PID/map_files/START-END), or a path the operator gave. The file
// it ends at is checked as Open checks it.
func OpenPath(ctx context.Context, path string, o Options) (*File, error) {
	return Do(ctx, o.On, func() (*File, error) {
		pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return check(pfd, path, o)
	}, closeFile)
}

// StatPath returns what fstat says of the regular file a trusted path
// names (following links, as OpenPath does) without opening it for
// reading: cheaper, for a caller that only needs to know whether it has
// seen the file.
func StatPath(ctx context.Context, path, on string) (Info, error) {
	return Do(ctx, on, func() (Info, error) {
		pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return Info{}, &os.PathError{Op: "open", Path: path, Err: err}
		}
		defer unix.Close(pfd)
		var st unix.Stat_t
		if err := unix.Fstat(pfd, &st); err != nil {
			return Info{}, &os.PathError{Op: "stat", Path: path, Err: err}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return Info{}, refuse(path, ErrNotRegular, ReasonNotRegular)
		}
		return infoOf(&st), nil
	}, nil)
}

func infoOf(st *unix.Stat_t) Info {
	return Info{
		Dev: st.Dev, Ino: st.Ino, Size: st.Size, Mode: st.Mode, UID: st.Uid, GID: st.Gid,
		ModTime: time.Unix(st.Mtim.Unix()),
	}
}

func closeFile(f *File) { f.Close() }

// check checks the file an O_PATH descriptor names, closes the
// descriptor, and opens the file for reading if it passes.
func check(pfd int, path string, o Options) (*File, error) {
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		return nil, refuse(path, ErrSymlink, ReasonSymlink)
	default:
		return nil, refuse(path, ErrNotRegular, ReasonNotRegular)
	}
	if len(o.Owners) > 0 && !slices.Contains(o.Owners, st.Uid) {
		return nil, refuse(path, ErrOwner, ReasonOwner)
	}
	if o.Reader != nil && !o.Reader.CanRead(st.Uid, st.Gid, st.Mode) {
		return nil, refuse(path, ErrAccess, ReasonAccess)
	}
	if o.MaxSize > 0 && st.Size > o.MaxSize {
		return nil, sizeError(path, st.Size, o.MaxSize)
	}
	// Reopening through procfs opens the very inode the O_PATH
	// descriptor holds: checked above, it cannot have become a FIFO or a
	// device since. O_NONBLOCK still, should anything make it one.
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err != nil || st2.Dev != st.Dev || st2.Ino != st.Ino || st2.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, refuse(path, ErrNotRegular, ReasonNotRegular)
	}
	info := infoOf(&st2)
	var fs unix.Statfs_t
	if unix.Fstatfs(fd, &fs) == nil {
		info.Local = localFS[int64(fs.Type)]
	}
	return &File{File: os.NewFile(uintptr(fd), path), Info: info}, nil
}

// localFS are the file systems whose pages a mapping can fault in without
// waiting on a daemon or a network (statfs f_type, linux/magic.h).
var localFS = map[int64]bool{
	0xef53:     true, // ext2, ext3, ext4
	0x58465342: true, // xfs
	0x9123683e: true, // btrfs
	0x01021994: true, // tmpfs
	0x858458f6: true, // ramfs
	0x794c7630: true, // overlayfs
	0x73717368: true, // squashfs
	0xe0f5e1e2: true, // erofs
	0xf2f52010: true, // f2fs
	0x2fc12fc1: true, // zfs
	0x3153464a: true, // jfs
	0x5346544e: true, // ntfs
	0x4d44:     true, // vfat
	0x2011bab0: true, // exfat
	0x9660:     true, // iso9660
}
