package userfile

import (
	"errors"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// errLink is a symbolic or magic link on a path that may have none.
var errLink = errors.New("symbolic link")

// noOpenat2 is set once openat2 was found missing (kernels before 5.6) or
// refused (a seccomp profile that answers ENOSYS or EPERM): the walk
// stands in from then on. Tests set it to run the walk.
var noOpenat2 atomic.Bool

// resolve opens name inside the directory rfd as if it were "/", with
// O_PATH: the returned descriptor names the file without opening it.
func resolve(rfd int, name string, symlinks bool) (int, error) {
	if !noOpenat2.Load() {
		fd, err := resolveOpenat2(rfd, name, symlinks)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM), errors.Is(err, unix.E2BIG):
			noOpenat2.Store(true)
		case errors.Is(err, unix.EAGAIN):
			// A rename or mount raced the lookup, more than once: the
			// walk does not need to retry.
		default:
			return -1, err
		}
	}
	return walk(rfd, name, symlinks)
}

// resolveOpenat2 is resolve with openat2 (Linux 5.6+).
func resolveOpenat2(rfd int, name string, symlinks bool) (int, error) {
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	}
	if symlinks {
		how.Flags &^= unix.O_NOFOLLOW
	} else {
		how.Resolve |= unix.RESOLVE_NO_SYMLINKS
	}
	var err error
	for range 4 {
		var fd int
		fd, err = unix.Openat2(rfd, name, &how)
		if err == nil {
			return fd, nil
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if errors.Is(err, unix.ELOOP) {
		// A symbolic link with RESOLVE_NO_SYMLINKS, a magic link, or
		// too many links: all are links this path may not have.
		return -1, errLink
	}
	return -1, err
}

// maxLinks is how many symbolic links one walk follows, as the kernel's
// MAXSYMLINKS.
const maxLinks = 40

// procSuperMagic is procfs's statfs type: its links are magic links.
const procSuperMagic = 0x9fa0

// walk is resolve without openat2: one component at a time, each opened
// with O_PATH|O_NOFOLLOW relative to the directory before it. ".." pops
// the directories walked down, never above rfd; a symbolic link is read
// and its target walked the same way, an absolute one from rfd; a link on
// procfs (a magic link) is refused, as RESOLVE_NO_MAGICLINKS does. The
// kernel never follows a link itself, so nothing a user renames or links
// during the walk can take it out of rfd.
func walk(rfd int, name string, symlinks bool) (int, error) {
	root, err := unix.Dup(rfd)
	if err != nil {
		return -1, err
	}
	stack := []int{root}
	defer func() {
		for _, fd := range stack {
			unix.Close(fd)
		}
	}()
	todo := components(name)
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		if c == ".." {
			if len(stack) > 1 {
				unix.Close(stack[len(stack)-1])
				stack = stack[:len(stack)-1]
			}
			continue
		}
		fd, err := unix.Openat(stack[len(stack)-1], c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			if !symlinks {
				unix.Close(fd)
				return -1, errLink
			}
			var fs unix.Statfs_t
			if err := unix.Fstatfs(fd, &fs); err != nil || fs.Type == procSuperMagic {
				unix.Close(fd)
				return -1, errLink
			}
			if links++; links > maxLinks {
				unix.Close(fd)
				return -1, errLink
			}
			target, err := readlink(fd)
			unix.Close(fd)
			if err != nil {
				return -1, err
			}
			if strings.HasPrefix(target, "/") {
				for _, d := range stack[1:] {
					unix.Close(d)
				}
				stack = stack[:1]
			}
			todo = append(components(target), todo...)
		case unix.S_IFDIR:
			stack = append(stack, fd)
		default:
			if len(todo) > 0 {
				unix.Close(fd)
				return -1, unix.ENOTDIR
			}
			return fd, nil
		}
	}
	// The path ends at a directory: hand it over.
	fd := stack[len(stack)-1]
	stack = stack[:len(stack)-1]
	return fd, nil
}

// components splits a path into its names, dropping empty ones and ".".
func components(p string) []string {
	var out []string
	for c := range strings.SplitSeq(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// readlink reads the target of the link an O_PATH descriptor names.
func readlink(fd int) (string, error) {
	for size := 256; size <= 1<<16; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
	return "", unix.ENAMETOOLONG
}
