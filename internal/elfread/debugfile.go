package elfread

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/spanwatch/spanwatch/internal/userfile"
)

// DebugDir is where distributions install separate debug files (Debian's
// -dbgsym packages, Fedora's -debuginfo), as gdb and elfutils look for
// them.
const DebugDir = "/usr/lib/debug"

// MaxDebugLink caps a debug file found by .gnu_debuglink: its CRC32 is
// computed over the whole file before anything of it is trusted. A debug
// file found by build id is not read whole (its sections are read within
// the callers' caps) and has no cap of its own.
const MaxDebugLink = 1 << 30

// maxNotes bounds the bytes of note sections or segments read for a
// build id.
const maxNotes = 1 << 16

// ntGNUBuildID is NT_GNU_BUILD_ID, a note of owner "GNU".
const ntGNUBuildID = 3

// BuildID returns the GNU build id (NT_GNU_BUILD_ID) of ef in hex, from
// its note sections, or its note segments when it has no section
// headers; "" when it has none.
func BuildID(ef *elf.File) string {
	var readers []io.Reader
	for _, s := range ef.Sections {
		if s.Type == elf.SHT_NOTE {
			readers = append(readers, s.Open())
		}
	}
	if len(ef.Sections) == 0 {
		for _, p := range ef.Progs {
			if p.Type == elf.PT_NOTE {
				readers = append(readers, p.Open())
			}
		}
	}
	for _, r := range readers {
		b, err := io.ReadAll(io.LimitReader(r, maxNotes))
		if err != nil {
			continue
		}
		for len(b) >= 12 {
			namesz := uint64(ef.ByteOrder.Uint32(b[0:]))
			descsz := uint64(ef.ByteOrder.Uint32(b[4:]))
			typ := ef.ByteOrder.Uint32(b[8:])
			nameEnd := 12 + (namesz+3)&^3
			descEnd := nameEnd + (descsz+3)&^3
			if namesz > uint64(len(b)) || descsz > uint64(len(b)) || descEnd > uint64(len(b)) {
				break
			}
			if typ == ntGNUBuildID && string(bytes.TrimRight(b[12:12+namesz], "\x00")) == "GNU" && descsz > 0 {
				return hex.EncodeToString(b[nameEnd : nameEnd+descsz])
			}
			b = b[descEnd:]
		}
	}
	return ""
}

// DebugLink reads ef's .gnu_debuglink: the debug file's base name and the
// CRC32 of its contents. A name with a '/' (or "." or "..") is not taken.
func DebugLink(ef *elf.File) (name string, crc uint32, ok bool) {
	s := ef.Section(".gnu_debuglink")
	if s == nil || s.Type == elf.SHT_NOBITS || s.Size > 4096 {
		return "", 0, false
	}
	b, err := s.Data()
	if err != nil {
		return "", 0, false
	}
	i := bytes.IndexByte(b, 0)
	if i <= 0 {
		return "", 0, false
	}
	name = string(b[:i])
	off := (i + 4) &^ 3
	if off+4 > len(b) || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return "", 0, false
	}
	return name, ef.ByteOrder.Uint32(b[off:]), true
}

// A DebugPlace says where a binary's separate debug file may be, and how
// to open it.
type DebugPlace struct {
	// Ctx bounds each open and read (userfile.Do).
	Ctx context.Context
	// Roots are the directories taken as "/" for the lookup, in order:
	// the target's root first (a process's /proc/PID/root, as the process
	// sees its files), "/" for the host's.
	Roots []string
	// Path is the binary's path as Roots[0] has it; its directory is
	// where .gnu_debuglink's file is looked for first. "" looks only
	// under DebugDir.
	Path string
	// Reader, when set, must be able to read the debug file by its mode
	// bits (userfile.Options.Reader); On names whom the reads are for.
	Reader *userfile.Cred
	On     string
	// MaxSize, when not 0, refuses a larger debug file wherever it is
	// found (a reader that maps it whole); MaxDebugLink caps one found
	// by .gnu_debuglink in any case.
	MaxSize int64
}

// A DebugFile is a binary's separate debug file, open, and how it was
// found. Its addresses are the binary's own. Close closes it.
type DebugFile struct {
	File *userfile.File
	ELF  *elf.File
	// Path is where it was found: inside Roots[0] as its process sees
	// it, prefixed with the root when that is not "/".
	Path string
	// By is "build id" or ".gnu_debuglink".
	By string
}

// Close closes the file; nil is allowed.
func (d *DebugFile) Close() {
	if d != nil && d.File != nil {
		d.File.Close()
	}
}

// FindDebugFile looks for ef's separate debug file as gdb, elfutils and
// debuginfod clients do: by GNU build id, ROOT/usr/lib/debug/.build-id/
// ab/cdef....debug (links followed inside the root), in each root; then
// by .gnu_debuglink, its file name in the binary's directory, in its
// .debug directory, and under ROOT/usr/lib/debug/DIR, checked by the
// CRC32 the link gives (a file found so is read whole, up to
// MaxDebugLink). A file whose build id is not the binary's (when both
// have one) is refused, and so is one by debuglink whose CRC differs:
// refused says which and why, for the messages that say where a
// binary's symbols and parameters came from. nil when none is found.
func FindDebugFile(ef *elf.File, p DebugPlace) (df *DebugFile, refused []string) {
	ctx := p.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	roots := p.Roots
	if len(roots) == 0 {
		roots = []string{"/"}
	}
	shown := func(root, name string) string {
		if root == "/" {
			return name
		}
		return filepath.Join(root, name)
	}
	open := func(root, name string, max int64) *userfile.File {
		f, err := userfile.Open(ctx, root, name, userfile.Options{Symlinks: true, Reader: p.Reader, On: p.On, MaxSize: max})
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, userfile.ErrNotRegular) {
				refused = append(refused, fmt.Sprintf("%s: %v", shown(root, name), unwrapPath(err)))
			}
			return nil
		}
		return f
	}
	id := BuildID(ef)
	if len(id) >= 4 {
		rel := filepath.Join(DebugDir, ".build-id", id[:2], id[2:]+".debug")
		for _, root := range roots {
			f := open(root, rel, p.MaxSize)
			if f == nil {
				continue
			}
			d, err := NewFile(f)
			if err == nil {
				got := BuildID(d)
				if got == id {
					return &DebugFile{File: f, ELF: d, Path: shown(root, rel), By: "build id"}, refused
				}
				userfile.Count(userfile.ReasonBuildID)
				refused = append(refused, fmt.Sprintf("%s: refused: its build id %s is not the binary's %s", shown(root, rel), orNone(got), id))
			} else {
				refused = append(refused, fmt.Sprintf("%s: refused: %v", shown(root, rel), err))
			}
			f.Close()
		}
	}
	name, crc, ok := DebugLink(ef)
	if !ok {
		return nil, refused
	}
	type place struct{ root, name string }
	var places []place
	if p.Path != "" {
		dir := filepath.Dir(strings.TrimSuffix(p.Path, " (deleted)"))
		places = append(places, place{roots[0], filepath.Join(dir, name)}, place{roots[0], filepath.Join(dir, ".debug", name)})
		for _, root := range roots {
			places = append(places, place{root, filepath.Join(DebugDir, dir, name)})
		}
	}
	for _, c := range places {
		max := int64(MaxDebugLink)
		if p.MaxSize > 0 {
			max = min(max, p.MaxSize)
		}
		f := open(c.root, c.name, max)
		if f == nil {
			continue
		}
		where := shown(c.root, c.name)
		sum, err := crcOf(f)
		switch {
		case err != nil:
			refused = append(refused, fmt.Sprintf("%s: %v", where, err))
		case sum != crc:
			refused = append(refused, fmt.Sprintf("%s: refused: its CRC32 %#08x is not the %#08x .gnu_debuglink gives (a debug file of another build)", where, sum, crc))
		default:
			d, err := NewFile(f)
			if err != nil {
				refused = append(refused, fmt.Sprintf("%s: refused: %v", where, err))
				break
			}
			if got := BuildID(d); id != "" && got != "" && got != id {
				userfile.Count(userfile.ReasonBuildID)
				refused = append(refused, fmt.Sprintf("%s: refused: its build id %s is not the binary's %s", where, got, id))
				break
			}
			return &DebugFile{File: f, ELF: d, Path: where, By: ".gnu_debuglink"}, refused
		}
		f.Close()
	}
	return nil, refused
}

func orNone(id string) string {
	if id == "" {
		return "(none)"
	}
	return id
}

// unwrapPath drops the path an *fs.PathError repeats.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// crcOf returns the CRC32 (IEEE, as gdb computes it) of a file.
func crcOf(r io.ReaderAt) (uint32, error) {
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, io.NewSectionReader(r, 0, MaxDebugLink+1)); err != nil {
		return 0, err
	}
	return h.Sum32(), nil
}
