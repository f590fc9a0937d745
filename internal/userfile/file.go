package userfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Refusals Open returns, each wrapped with the file's path; errors.Is
// tells them apart. Each is counted under its Reason.
var (
	ErrSymlink    = errors.New("refused: a symbolic link (only the file itself is read, never where a link points)")
	ErrNotRegular = errors.New("refused: not a regular file")
	ErrOwner      = errors.New("refused: owned by neither the process's user nor root")
	ErrAccess     = errors.New("refused: the process itself could not read it")
	ErrTooLarge   = errors.New("refused: larger than the cap")
)

// Options say what a file must be to be read.
type Options struct {
	// Symlinks follows symbolic links inside the root (never magic
	// links, never out of the root). Without it a symbolic link anywhere
	// on the path refuses the file (ErrSymlink).
	Symlinks bool
	// Owners, when not empty, are the users the file may belong to
	// (ErrOwner otherwise): perf(1) reads a perf map only when it
	// belongs to the process's user or root (Cred.Owners).
	Owners []uint32
	// Reader, when set, is the process the file is read for: its
	// credentials must let it read the file by its mode bits (ErrAccess).
	Reader *Cred
	// MaxSize refuses a larger file (ErrTooLarge); 0 takes any size.
	// Readers that can use part of a file read up to their cap instead.
	MaxSize int64
	// On names whom the open is for, as in Do; "" is the agent itself.
	On string
}

// A File is an open regular file with what fstat said of it.
type File struct {
	*os.File
	Info Info
}

// Close closes the file. A file on a file system that is not local (FUSE,
// a network) is closed on a goroutine of its own: close sends FUSE_FLUSH
// and waits for the answer, which a daemon that stopped answering never
// gives, and the caller may hold a lock. Close then returns nil.
func (f *File) Close() error {
	if !f.Info.Local {
		go f.File.Close()
		return nil
	}
	return f.File.Close()
}

// Info is what fstat said of a file when it was opened.
type Info struct {
	Dev, Ino uint64
	Size     int64
	Mode     uint32 // permission bits and type, as st_mode
	UID, GID uint32
	ModTime  time.Time
	// Local is set when the file is on a local disk or memory file
	// system (ext4, xfs, btrfs, tmpfs, overlayfs, ...), where mapping it
	// and touching the pages cannot hang on a daemon or a network: a
	// file elsewhere (FUSE, NFS, CIFS, 9p) is read, not mapped.
	Local bool
}

// ReadAll reads r from its start, up to max bytes; truncated reports that
// there was more. A *File's buffer is allocated at its size (within max),
// and grows only for what arrives past it (a file still being written).
func ReadAll(r io.ReaderAt, max int64) (b []byte, truncated bool, err error) {
	hint := int64(64 << 10)
	if f, ok := r.(*File); ok {
		hint = f.Info.Size
	}
	buf := make([]byte, 0, min(hint, max)+1)
	for off := int64(0); ; {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > max {
				return buf[:max], true, nil
			}
			grown := make([]byte, len(buf), min(2*int64(cap(buf)), max+1))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.ReadAt(buf[len(buf):cap(buf)], off)
		buf = buf[:len(buf)+n]
		off += int64(n)
		if err == io.EOF {
			if int64(len(buf)) > max {
				return buf[:max], true, nil
			}
			return buf, false, nil
		}
		if err != nil {
			return buf, false, err
		}
	}
}

// refuse counts a refusal and wraps it with the path.
func refuse(path string, err error, reason string) error {
	Count(reason)
	return &os.PathError{Op: "open", Path: path, Err: err}
}

func sizeError(path string, size, max int64) error {
	Count(ReasonTooLarge)
	return &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: %d bytes, cap %d", ErrTooLarge, size, max)}
}
