package usdt

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spanwatch/spanwatch/internal/elfread"
	"github.com/spanwatch/spanwatch/internal/userfile"
)

// Limits against malformed or hostile files. A real binary has at most a
// few thousand probes (a big database server has a few hundred); the caps
// leave room for that and stop a crafted file from making spanwatch read or
// allocate without bound.
const (
	maxNoteSectionSize = 16 << 20 // bytes of .note.stapsdt read
	maxNotes           = 65536    // notes in one file
	maxNoteNameSize    = 256      // the note owner ("stapsdt")
	maxNoteDescSize    = 8192     // one note's descriptor
	maxStringLen       = 2048     // provider, name, or argument string
)

// noteTypeSDT is the note type of a systemtap SDT probe (version 3, the one
// every sys/sdt.h since 2010 emits).
const noteTypeSDT = 3

// ErrNoProbes means the file has no .note.stapsdt section.
var ErrNoProbes = errors.New("no USDT probes (no .note.stapsdt section)")

// A Probe is one USDT call site. A probe name (provider:name) may have
// several call sites, for example when the function holding it is inlined:
// each has its own address and its own argument locations.
type Probe struct {
	Provider string
	Name     string
	// Address is the call site's virtual address in the file, after the
	// .stapsdt.base adjustment (for prelinked files).
	Address uint64
	// Offset is the call site's file offset: what a uprobe attaches at.
	Offset uint64
	// Semaphore is the virtual address of the probe's semaphore, 0 when the
	// probe has none.
	Semaphore uint64
	// SemaphoreOffset is the semaphore's file offset (the uprobe's
	// reference counter offset), 0 when the probe has none.
	SemaphoreOffset uint64
	// Nop5 is set when the call site is the "nop; nop5" pair newer
	// sys/sdt.h headers emit on x86-64: a uprobe on the nop5, at Offset+1,
	// is optimized by kernels with the uprobe syscall (6.18+) into a call
	// instead of a trap (see TracerConfig.OptimizeNop5 for its hazard).
	Nop5 bool
	// ArgString is the argument description as the compiler wrote it.
	ArgString string
	// Args are the parsed arguments; nil when ArgErr is set.
	Args []Arg
	// ArgErr says why ArgString could not be parsed. The probe can still be
	// attached by a source that reads none of its arguments.
	ArgErr error
}

// FullName returns "provider:name".
func (p Probe) FullName() string { return p.Provider + ":" + p.Name }

// A File is the USDT probes of one ELF file.
type File struct {
	Path    string
	Arch    Arch
	Machine elf.Machine
	// Type is elf.ET_EXEC (non-PIE executable) or elf.ET_DYN (PIE
	// executable or shared library).
	Type elf.Type
	// Executable says the file is a program, not a shared library:
	// ET_EXEC, or ET_DYN marked PIE (DF_1_PIE), or ET_DYN with an
	// interpreter and no soname.
	Executable bool
	// CodeStart is the lowest address of an executable (PF_X) PT_LOAD
	// segment, and CodeLen the distance from it to the end of the file
	// contents of the highest one: what the kernel keeps as
	// mm->start_code (minus the load bias) and end_code - start_code for
	// a process that runs the file (fs/binfmt_elf.c).
	CodeStart, CodeLen uint64
	Probes             []Probe

	dev, ino uint64         // the file's identity, when opened by path
	fd       *userfile.File // kept open by the tracer until it attached
}

// fdPath names the open file for the kernel (/proc/self/fd/N), so that a
// uprobe attaches to the very file whose probes were read, whatever its
// path names meanwhile; Path when the file is not open.
func (f *File) fdPath() string {
	if f.fd == nil {
		return f.Path
	}
	return fmt.Sprintf("/proc/self/fd/%d", f.fd.Fd())
}

// release closes the file the tracer kept open.
func (f *File) release() {
	if f.fd != nil {
		f.fd.Close()
		f.fd = nil
	}
}

// Lookup returns every call site of provider:name.
func (f *File) Lookup(provider, name string) []Probe {
	var out []Probe
	for _, p := range f.Probes {
		if p.Provider == provider && p.Name == name {
			out = append(out, p)
		}
	}
	return out
}

// openTimeout bounds opening and parsing one file: a file on a file
// system that stopped answering (a FUSE daemon) is given up on.
const openTimeout = 5 * time.Second

// Open reads the USDT probes of the ELF file at path. A file without probes
// gives ErrNoProbes. A path through a process's root in procfs
// (/proc/PID/root/...) is resolved inside that root, links included, as
// the process sees it; the file must be a regular file, and opening and
// parsing it are bounded in time (userfile).
func Open(path string) (*File, error) {
	f, err := open(context.Background(), path, "")
	if err != nil {
		return nil, err
	}
	f.release()
	return f, nil
}

// open is Open keeping the file open (File.fd), on behalf of on.
func open(ctx context.Context, path, on string) (*File, error) {
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	fh, err := userfile.OpenRooted(ctx, path, userfile.Options{Symlinks: true, On: on})
	if err != nil {
		return nil, err // *PathError: "open PATH: ..."
	}
	f, err := userfile.Do(ctx, fmt.Sprintf("device %d", fh.Info.Dev), func() (*File, error) { return Parse(fh) }, nil)
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("read probes of %s: %w", path, err)
	}
	f.Path, f.dev, f.ino, f.fd = path, fh.Info.Dev, fh.Info.Ino, fh
	return f, nil
}

// Parse reads the USDT probes of an ELF file. It never panics on malformed
// input: debug/elf's own panics are turned into errors.
func Parse(r io.ReaderAt) (f *File, err error) {
	defer func() {
		if p := recover(); p != nil {
			f, err = nil, fmt.Errorf("malformed ELF file: %v", p)
		}
	}()
	ef, err := elfread.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("parse ELF: %w", err)
	}
	if ef.Type != elf.ET_EXEC && ef.Type != elf.ET_DYN {
		return nil, fmt.Errorf("ELF type %s: not an executable or shared library", ef.Type)
	}
	sec := ef.Section(".note.stapsdt")
	if sec == nil {
		return nil, ErrNoProbes
	}
	if sec.Type != elf.SHT_NOTE {
		return nil, fmt.Errorf(".note.stapsdt has type %s, want SHT_NOTE", sec.Type)
	}
	if sec.Size > maxNoteSectionSize {
		return nil, fmt.Errorf(".note.stapsdt is %d bytes, more than the %d this reader accepts", sec.Size, maxNoteSectionSize)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("read .note.stapsdt: %w", err)
	}
	addrSize := 8
	if ef.Class == elf.ELFCLASS32 {
		addrSize = 4
	}
	notes, err := ParseNotes(data, ef.ByteOrder, addrSize)
	if err != nil {
		return nil, err
	}

	f = &File{Machine: ef.Machine, Type: ef.Type, Executable: isExecutable(ef)}
	start, end := ^uint64(0), uint64(0)
	for _, ph := range ef.Progs {
		if ph.Type != elf.PT_LOAD || ph.Flags&elf.PF_X == 0 {
			continue
		}
		start = min(start, ph.Vaddr)
		end = max(end, ph.Vaddr+ph.Filesz)
	}
	if start < end {
		f.CodeStart, f.CodeLen = start, end-start
	}
	arch, archErr := archOf(ef.Machine)
	f.Arch = arch

	var base uint64
	haveBase := false
	if b := ef.Section(".stapsdt.base"); b != nil {
		base, haveBase = b.Addr, true
	}
	syms := &symbolTable{f: ef, names: map[string]uint64{}}

	for _, n := range notes {
		p := Probe{
			Provider:  n.Provider,
			Name:      n.Name,
			Address:   n.PC,
			Semaphore: n.Semaphore,
			ArgString: n.Args,
		}
		// Prelink moves a library's sections but not its (unallocated)
		// notes: the difference between .stapsdt.base's address now and
		// the one the note recorded moves the call site and semaphore too.
		if haveBase && n.Base != 0 {
			p.Address += base - n.Base
			if p.Semaphore != 0 {
				p.Semaphore += base - n.Base
			}
		}
		off, err := elfread.CodeOffset(ef, p.Address)
		if err != nil {
			return nil, fmt.Errorf("probe %s: call site: %w", p.FullName(), err)
		}
		p.Offset = off
		if ef.Machine == elf.EM_X86_64 {
			var insn [6]byte
			if n, _ := r.ReadAt(insn[:], int64(off)); n == len(insn) && insn == nopCombo {
				p.Nop5 = true
			}
		}
		if p.Semaphore != 0 {
			off, err := elfread.FileOffset(ef, p.Semaphore)
			if err != nil {
				return nil, fmt.Errorf("probe %s: semaphore: %w", p.FullName(), err)
			}
			p.SemaphoreOffset = off
		}
		if archErr != nil {
			p.ArgErr = archErr
		} else {
			p.Args, p.ArgErr = parseProbeArgs(arch, &p, syms)
		}
		f.Probes = append(f.Probes, p)
	}
	return f, nil
}

// nopCombo is "nop; nopl 0x0(%rax,%rax,1)": a one-byte nop followed by the
// five-byte nop that optimized uprobes replace with a call.
var nopCombo = [6]byte{0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00}

func parseProbeArgs(arch Arch, p *Probe, syms *symbolTable) ([]Arg, error) {
	args, err := parseArgs(arch, p.ArgString, p.Address, syms.lookup)
	if err != nil {
		return nil, fmt.Errorf("probe %s at %#x: %w", p.FullName(), p.Address, err)
	}
	return args, nil
}

// A Note is one raw stapsdt note.
type Note struct {
	PC        uint64 // call site's link-time address
	Base      uint64 // .stapsdt.base's link-time address
	Semaphore uint64 // semaphore's link-time address, 0 for none
	Provider  string
	Name      string
	Args      string
}

// ParseNotes decodes the stapsdt notes in the contents of a .note.stapsdt
// section. Notes of other owners or types are skipped. addrSize is 8 for
// ELFCLASS64 and 4 for ELFCLASS32.
func ParseNotes(data []byte, order binary.ByteOrder, addrSize int) ([]Note, error) {
	if addrSize != 4 && addrSize != 8 {
		return nil, fmt.Errorf("address size %d: want 4 or 8", addrSize)
	}
	if len(data) > maxNoteSectionSize {
		return nil, fmt.Errorf("note section of %d bytes: more than the %d this reader accepts", len(data), maxNoteSectionSize)
	}
	var notes []Note
	for off := 0; off < len(data); {
		if len(notes) >= maxNotes {
			return nil, fmt.Errorf("more than %d notes", maxNotes)
		}
		if len(data)-off < 12 {
			return nil, fmt.Errorf("note at %#x: truncated header", off)
		}
		nameSz := order.Uint32(data[off:])
		descSz := order.Uint32(data[off+4:])
		typ := order.Uint32(data[off+8:])
		if nameSz > maxNoteNameSize {
			return nil, fmt.Errorf("note at %#x: owner name of %d bytes", off, nameSz)
		}
		if descSz > maxNoteDescSize {
			return nil, fmt.Errorf("note at %#x: descriptor of %d bytes", off, descSz)
		}
		nameStart := off + 12
		descStart := nameStart + align4(int(nameSz))
		next := descStart + align4(int(descSz))
		if descStart+int(descSz) > len(data) || nameStart+int(nameSz) > len(data) {
			return nil, fmt.Errorf("note at %#x: runs past the end of the section", off)
		}
		owner := string(bytes.TrimRight(data[nameStart:nameStart+int(nameSz)], "\x00"))
		desc := data[descStart : descStart+int(descSz)]
		at := off
		off = next
		if owner != "stapsdt" || typ != noteTypeSDT {
			continue
		}
		n, err := parseSDTDesc(desc, order, addrSize)
		if err != nil {
			return nil, fmt.Errorf("note at %#x: %w", at, err)
		}
		notes = append(notes, n)
	}
	return notes, nil
}

func align4(n int) int { return (n + 3) &^ 3 }

func parseSDTDesc(desc []byte, order binary.ByteOrder, addrSize int) (Note, error) {
	var n Note
	if len(desc) < 3*addrSize {
		return n, fmt.Errorf("descriptor of %d bytes: too short for three addresses", len(desc))
	}
	addr := func(i int) uint64 {
		if addrSize == 4 {
			return uint64(order.Uint32(desc[i*4:]))
		}
		return order.Uint64(desc[i*8:])
	}
	n.PC, n.Base, n.Semaphore = addr(0), addr(1), addr(2)
	rest := desc[3*addrSize:]
	var strs [3]string
	for i := range strs {
		end := bytes.IndexByte(rest, 0)
		if end < 0 {
			if i == 2 && len(rest) == 0 {
				break // no argument string at all: a probe without arguments
			}
			return n, fmt.Errorf("string %d is not NUL-terminated", i+1)
		}
		if end > maxStringLen {
			return n, fmt.Errorf("string %d is %d bytes, more than %d", i+1, end, maxStringLen)
		}
		strs[i] = string(rest[:end])
		rest = rest[end+1:]
	}
	n.Provider, n.Name, n.Args = strs[0], strs[1], strings.TrimSpace(strs[2])
	if n.Provider == "" || n.Name == "" {
		return n, errors.New("empty provider or probe name")
	}
	if !printable(n.Provider) || !printable(n.Name) || !printable(n.Args) {
		return n, errors.New("provider, name or arguments hold non-printable bytes")
	}
	return n, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// symbolTable resolves symbols for RIP-relative arguments ("4@counter(%rip)")
// and arm64 ones ("8@[x1, #:lo12:counter]"), searching the ELF symbol
// tables for each name an argument needs (a few per file), a chunk at a
// time and within a cap, and remembering the answers.
type symbolTable struct {
	f       *elf.File
	strtabs map[*elf.Section][]byte
	names   map[string]uint64
}

// maxSymbolBytes bounds what is read of one symbol or string table.
const maxSymbolBytes = 64 << 20

func (t *symbolTable) lookup(name string) (uint64, bool) {
	if v, ok := t.names[name]; ok {
		return v, v != ambiguous && v != missing
	}
	v := missing
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		table := elfread.Table(t.f, typ)
		strs := elfread.StringTable(t.f, table)
		if table == nil || strs == nil {
			continue
		}
		if t.strtabs == nil {
			t.strtabs = map[*elf.Section][]byte{}
		}
		strtab, ok := t.strtabs[strs]
		if !ok {
			strtab, _, _ = elfread.ReadSection(strs, maxSymbolBytes, nil, nil)
			t.strtabs[strs] = strtab
		}
		elfread.Symbols(t.f, table, maxSymbolBytes, func(s elfread.Symbol) bool {
			if s.Section == elf.SHN_UNDEF || !elfread.NameIs(strtab, s.Name, name) {
				return true
			}
			// Static symbols of different files may share a name: an
			// argument naming one of those cannot be resolved.
			if v != missing && v != s.Value {
				v = ambiguous
				return false
			}
			v = s.Value
			return true
		})
		if v == ambiguous {
			break
		}
	}
	if len(t.names) < 1<<12 {
		t.names[name] = v
	}
	return v, v != ambiguous && v != missing
}

// missing marks a symbol name not found.
const missing = ^uint64(0) - 1

// ambiguous marks a symbol name defined more than once with different values.
const ambiguous = ^uint64(0)

// isExecutable tells a program from a shared library: ET_EXEC, or ET_DYN
// with DF_1_PIE, or, where the linker did not mark it, ET_DYN with an
// interpreter and no soname (glibc's libc.so.6 has an interpreter, and a
// soname). Only the dynamic section is read, within maxDynamicBytes (a
// real one is a few hundred bytes): debug/elf's DynValue and DynString
// would read it and the string table whole, at the sizes a file claims.
func isExecutable(ef *elf.File) bool {
	if ef.Type == elf.ET_EXEC {
		return true
	}
	interp := false
	for _, ph := range ef.Progs {
		if ph.Type == elf.PT_INTERP {
			interp = true
		}
	}
	dyn := ef.SectionByType(elf.SHT_DYNAMIC)
	if dyn == nil {
		return interp
	}
	b, _, err := elfread.ReadSection(dyn, maxDynamicBytes, nil, nil)
	if err != nil {
		return interp
	}
	entry := 16 // Elf64_Dyn: d_tag, d_val
	if ef.Class == elf.ELFCLASS32 {
		entry = 8
	}
	soname := false
	for ; len(b) >= entry; b = b[entry:] {
		var tag, val uint64
		if entry == 16 {
			tag, val = ef.ByteOrder.Uint64(b), ef.ByteOrder.Uint64(b[8:])
		} else {
			tag, val = uint64(ef.ByteOrder.Uint32(b)), uint64(ef.ByteOrder.Uint32(b[4:]))
		}
		switch elf.DynTag(tag) {
		case elf.DT_NULL:
			return interp && !soname
		case elf.DT_FLAGS_1:
			if val&uint64(elf.DF_1_PIE) != 0 {
				return true
			}
		case elf.DT_SONAME:
			soname = true
		}
	}
	return interp && !soname
}

// maxDynamicBytes bounds what is read of a dynamic section.
const maxDynamicBytes = 64 << 10
