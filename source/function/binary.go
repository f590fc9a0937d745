package function

import (
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spanwatch/spanwatch/internal/elfread"
	"github.com/spanwatch/spanwatch/internal/funcs"
	"github.com/spanwatch/spanwatch/internal/userfile"
)

// A Binary is the functions of one ELF file and, when the file is
// stripped (no .symtab, or no DWARF), its separate debug file: whose
// .symtab names the functions the file's own tables do not, and whose
// DWARF places parameters by name. Close closes the debug file.
type Binary struct {
	Funcs *funcs.File
	// Debug is the separate debug file found (nil: none, or the file
	// needs none).
	Debug *elfread.DebugFile
	// DebugRefused are the debug files found and refused, each with why
	// (a build id not the binary's, a CRC not its debuglink's).
	DebugRefused []string
	// DebugLooked says a debug file was looked for.
	DebugLooked bool
}

// Close closes the debug file; nil is allowed.
func (b *Binary) Close() {
	if b != nil {
		b.Debug.Close()
	}
}

// ParseBinary lists the functions of the ELF file read from r that o
// keeps, as funcs.Parse does; when the file has no .symtab or no DWARF
// it first looks for its separate debug file at place
// (elfread.FindDebugFile), whose .symtab is read when the file has none.
func ParseBinary(r io.ReaderAt, o funcs.Options, place elfread.DebugPlace) (*Binary, error) {
	b := &Binary{}
	if ef, err := elfread.NewFile(r); err == nil && stripped(ef) {
		b.DebugLooked = true
		b.Debug, b.DebugRefused = elfread.FindDebugFile(ef, place)
	}
	if b.Debug != nil {
		o.Debug = b.Debug.ELF
	}
	f, err := funcs.Parse(r, o)
	if err != nil {
		b.Close()
		return nil, err
	}
	b.Funcs = f
	return b, nil
}

// stripped says ef lacks a .symtab or DWARF (.debug_info) of its own.
func stripped(ef *elf.File) bool {
	if elfread.Table(ef, elf.SHT_SYMTAB) == nil {
		return true
	}
	return !hasDWARF(ef)
}

func hasDWARF(ef *elf.File) bool {
	for _, name := range []string{".debug_info", ".zdebug_info"} {
		if s := ef.Section(name); s != nil && s.Type != elf.SHT_NOBITS {
			return true
		}
	}
	return false
}

// OpenBinary opens the binary at path as the agent does for a binary:
// target (a path through /proc/PID/root resolved inside that root) and
// parses it with ParseBinary, its debug file looked for in the same
// root, beside the file. The caller closes the returned file and binary.
func OpenBinary(ctx context.Context, path string, o funcs.Options) (*userfile.File, *Binary, error) {
	fh, err := userfile.OpenRooted(ctx, path, userfile.Options{Symlinks: true})
	if err != nil {
		return nil, nil, err
	}
	place := binaryPlace(ctx, path, fh)
	b, err := userfile.Do(ctx, fmt.Sprintf("device %d", fh.Info.Dev), func() (*Binary, error) { return ParseBinary(fh, o, place) }, (*Binary).Close)
	if err != nil {
		fh.Close()
		return nil, nil, fmt.Errorf("list functions of %s: %w", path, err)
	}
	b.Funcs.Path = path
	return fh, b, nil
}

// binaryPlace is where a binary: target's debug file is looked for: in
// the process root its path goes through (/proc/PID/root/...), beside
// the file as that root has it; else on the host, beside the file fh
// names (its path with links resolved, as gdb takes it).
func binaryPlace(ctx context.Context, path string, fh *userfile.File) elfread.DebugPlace {
	if root, name, ok := userfile.SplitRoot(path); ok {
		return elfread.DebugPlace{Ctx: ctx, Roots: []string{root}, Path: name}
	}
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(fh.Fd())))
	if err != nil || !filepath.IsAbs(real) {
		real = path
	}
	return elfread.DebugPlace{Ctx: ctx, Roots: []string{"/"}, Path: real}
}

// processPlace is where the debug file of the executable process pid
// runs (exe, as /proc/PID/exe names it) is looked for: in that
// process's root, as the process sees its files. The kernel writes
// /proc/PID/exe's path from the reader's root: for a chrooted process
// it starts with the process's root as the agent sees it (what
// /proc/PID/root names), which is cut off.
func processPlace(ctx context.Context, procRoot string, pid int, exe string) elfread.DebugPlace {
	root := filepath.Join(procRoot, strconv.Itoa(pid), "root")
	if r, err := os.Readlink(root); err == nil && r != "/" && strings.HasPrefix(exe, r+"/") {
		exe = exe[len(r):]
	}
	return elfread.DebugPlace{
		Ctx:   ctx,
		Roots: []string{root},
		Path:  exe,
		On:    userfile.OnPID(procRoot, pid),
	}
}
