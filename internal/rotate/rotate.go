package rotate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
)

// File is a size-rotated file. Each Write goes whole into one file: a
// write is never split across a rotation, so a file holds whole lines
// when each Write is one line (as json.Encoder's are). It is safe for
// concurrent use.
type File struct {
	path    string
	max     int64
	keep    int
	mu      sync.Mutex
	f       *os.File
	size    int64
	rotated int // rotations so far
}

// Open opens (appending to) path. maxBytes > 0 rotates before a write that
// would take the file past it; keep is how many rotated files (path.1 ...
// path.keep) stay, older ones are removed (0 keeps none: the file starts
// over). maxBytes <= 0 never rotates.
func Open(path string, maxBytes int64, keep int) (*File, error) {
	if keep < 0 {
		return nil, fmt.Errorf("rotate %s: keep must not be negative, not %d", path, keep)
	}
	r := &File{path: path, max: maxBytes, keep: keep}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *File) open() error {
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open output: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("open output: %w", err)
	}
	r.f, r.size = f, st.Size()
	return nil
}

// Write writes p to the current file, rotating first when p would take it
// past the limit (a file that is still empty takes p whatever its size).
func (r *File) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return 0, fmt.Errorf("write %s: %w", r.path, fs.ErrClosed)
	}
	if r.max > 0 && r.size > 0 && r.size+int64(len(p)) > r.max {
		if err := r.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

// rotate shifts the rotated files up by one, dropping the oldest, moves
// the current file to path.1 and opens a new one.
func (r *File) rotate() error {
	if err := r.f.Close(); err != nil {
		return fmt.Errorf("rotate %s: %w", r.path, err)
	}
	r.f = nil
	if r.keep == 0 {
		if err := os.Remove(r.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("rotate %s: %w", r.path, err)
		}
	} else {
		if err := os.Remove(r.name(r.keep)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("rotate %s: %w", r.path, err)
		}
		for i := r.keep - 1; i >= 1; i-- {
			if err := os.Rename(r.name(i), r.name(i+1)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("rotate %s: %w", r.path, err)
			}
		}
		if err := os.Rename(r.path, r.name(1)); err != nil {
			return fmt.Errorf("rotate %s: %w", r.path, err)
		}
	}
	r.rotated++
	return r.open()
}

func (r *File) name(i int) string { return r.path + "." + strconv.Itoa(i) }

// Rotations returns how many times the file has rotated.
func (r *File) Rotations() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rotated
}

// Sync commits the current file to stable storage.
func (r *File) Sync() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	return r.f.Sync()
}

// Close closes the current file. It is safe to call more than once.
func (r *File) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// ParseSize reads a size: a whole number of bytes, or one with a unit,
// k/K, M, G (powers of 1024, also written KiB, MiB, GiB) or kB, MB, GB
// (powers of 1000): "100M", "1GiB", "500MB".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if i == 0 || err != nil {
		return 0, fmt.Errorf("bad size %q: want a number of bytes, e.g. 100M or 500MB", s)
	}
	mult := map[string]int64{
		"": 1, "B": 1,
		"k": 1 << 10, "K": 1 << 10, "KiB": 1 << 10, "M": 1 << 20, "MiB": 1 << 20, "G": 1 << 30, "GiB": 1 << 30,
		"kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9,
	}[strings.TrimSpace(t[i:])]
	if mult == 0 {
		return 0, fmt.Errorf("bad size %q: unknown unit %q (want k, M, G, KiB, MiB, GiB, kB, MB or GB)", s, strings.TrimSpace(t[i:]))
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("bad size %q: too large", s)
	}
	return n * mult, nil
}
