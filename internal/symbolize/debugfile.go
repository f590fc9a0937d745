package symbolize

import (
	"context"
	"debug/elf"

	"github.com/spanwatch/spanwatch/internal/elfread"
	"github.com/spanwatch/spanwatch/internal/userfile"
)

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
	f, df := p.debug.find(ef, p.lim)
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

// find opens the debug file (elfread.FindDebugFile): by GNU build id
// under .build-id (links followed, inside the root), then by
// .gnu_debuglink next to the binary, in its .debug directory and under
// /usr/lib/debug, checked by its CRC; in the process's root, then the
// host's. A file found must carry the binary's build id.
func (d *debugPlace) find(ef *elf.File, lim Limits) (*userfile.File, *elf.File) {
	roots := []string{"/"}
	if d.root != "" {
		roots = []string{d.root, "/"}
	}
	df, _ := elfread.FindDebugFile(ef, elfread.DebugPlace{Ctx: d.ctx, Roots: roots, Path: d.path, Reader: d.reader, On: d.on, MaxSize: lim.Mapped})
	if df == nil {
		return nil, nil
	}
	return df.File, df.ELF
}
