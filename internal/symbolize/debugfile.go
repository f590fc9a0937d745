package symbolize

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/hex"
	"hash/crc32"
	"io"
	"path/filepath"
	"strings"

	"github.com/spanwatch/spanwatch/internal/elfread"
	"github.com/spanwatch/spanwatch/internal/userfile"
)

// debugDir is where distributions install separate debug files (Debian's
// *-dbgsym packages, Fedora's debuginfo).
const debugDir = "/usr/lib/debug"

// A debugPlace says where a module's separate debug file may be and whom
// it is read for: inside the process's root first, then on the host.
type debugPlace struct {
	ctx    context.Context // bounds each open
	root   string          // the process's root (/proc/PID/root); "" for none
	path   string          // the binary's path as the process sees it
	reader *userfile.Cred  // the process; nil for the agent's own reads
	on     string          // for userfile.Do
}

// readDebugFile adds the symbols and lines of a stripped binary's separate
// debug file. Its addresses are the binary's own.
func (p *parser) readDebugFile(ef *elf.File) bool {
	if p.debug == nil {
		return false
	}
	f, df := p.debug.find(ef, p.t.buildID, p.lim)
	if f == nil {
		return false
	}
	// Everything is read (or mapped) now: the file need not stay open.
	defer f.Close()
	dp := &parser{path: f.Name(), r: f, file: f, lim: p.lim, t: p.t}
	dp.readSymbols(df)
	dp.readLines(df)
	return true
}

// find opens the debug file: by GNU build id under .build-id (links
// followed, inside the root), then by .gnu_debuglink next to the binary,
// in its .debug directory and under /usr/lib/debug, checked by its CRC. A
// file found by build id must carry the binary's build id.
func (d *debugPlace) find(ef *elf.File, id string, lim Limits) (*userfile.File, *elf.File) {
	roots := []string{"/"}
	if d.root != "" {
		roots = []string{d.root, "/"}
	}
	open := func(root, name string) *userfile.File {
		f, err := userfile.Open(d.ctx, root, name, userfile.Options{Symlinks: true, Reader: d.reader, On: d.on, MaxSize: lim.Mapped})
		if err != nil {
			return nil
		}
		return f
	}
	if _, err := hex.DecodeString(id); err == nil && len(id) >= 4 {
		rel := filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
		for _, root := range roots {
			f := open(root, rel)
			if f == nil {
				continue
			}
			df, err := elfread.NewFile(f)
			if err == nil && readBuildID(df) == id {
				return f, df
			}
			if err == nil {
				userfile.Count(userfile.ReasonBuildID)
			}
			f.Close()
		}
	}
	name, crc, ok := debugLink(ef)
	if !ok || d.path == "" {
		return nil, nil
	}
	dir := filepath.Dir(strings.TrimSuffix(d.path, " (deleted)"))
	for _, c := range []struct{ root, name string }{
		{roots[0], filepath.Join(dir, name)},
		{roots[0], filepath.Join(dir, ".debug", name)},
		{roots[0], filepath.Join(debugDir, dir, name)},
		{"/", filepath.Join(debugDir, dir, name)},
	} {
		f := open(c.root, c.name)
		if f == nil {
			continue
		}
		if sum, err := crcOf(f); err == nil && sum == crc {
			if df, err := elfread.NewFile(f); err == nil {
				if got := readBuildID(df); id == "" || got == "" || got == id {
					return f, df
				}
				userfile.Count(userfile.ReasonBuildID)
			}
		}
		f.Close()
	}
	return nil, nil
}

// debugLink reads .gnu_debuglink: a debug file's base name and the CRC32
// of its contents.
func debugLink(ef *elf.File) (string, uint32, bool) {
	s := ef.Section(".gnu_debuglink")
	if s == nil || s.Size > 4096 {
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
	name := string(b[:i])
	off := (i + 4) &^ 3
	if off+4 > len(b) || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return "", 0, false
	}
	return name, ef.ByteOrder.Uint32(b[off:]), true
}

// crcOf returns the CRC32 (IEEE, as gdb computes it) of a file.
func crcOf(r io.ReaderAt) (uint32, error) {
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, io.NewSectionReader(r, 0, 1<<62)); err != nil {
		return 0, err
	}
	return h.Sum32(), nil
}
