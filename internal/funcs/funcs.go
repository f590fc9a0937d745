package funcs

import (
	"context"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/spanwatch/spanwatch/internal/elfread"
	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/internal/userfile"
)

// Caps against malformed or hostile files. The largest real programs have
// a few hundred thousand functions, a Go pclntab of tens of MiB and
// functions of at most a few hundred KiB of code.
const (
	maxTable       = 64 << 20 // bytes of a symbol or string table, a pclntab or .eh_frame read
	maxFuncs       = 1 << 20  // functions listed of one file
	maxFuncSize    = 1 << 20  // bytes of one function disassembled
	DefaultMaxRets = 64       // return sites of one function (Options.MaxReturns)
)

// A Source says where a function was found.
type Source string

// Where functions are found.
const (
	SourceSymtab Source = "symtab" // .symtab
	SourceDynsym Source = "dynsym" // .dynsym
	// SourceDebugSymtab: the .symtab of the separate debug file
	// (Options.Debug) of a file stripped of its own.
	SourceDebugSymtab Source = "debug_symtab"
	SourcePclntab     Source = "pclntab"  // a Go binary's function table
	SourceEHFrame     Source = "eh_frame" // a frame description only: no name
)

// A Reason says why a function cannot be traced by uprobes on its entry
// and its return instructions.
type Reason string

// Why a function is refused.
const (
	// ReasonZeroSize: the table gives the function no size, so where it
	// ends, and its returns, are unknown.
	ReasonZeroSize Reason = "zero_size"
	// ReasonTooLarge: the function is larger than the disassembler's cap.
	ReasonTooLarge Reason = "too_large"
	// ReasonNoReturn: no return instruction at all; the function ends in
	// a jump elsewhere (a tail call) or never returns.
	ReasonNoReturn Reason = "no_ret"
	// ReasonTailCall: a jump leaves the function's range, so a call can
	// return through another function's return instruction unseen.
	ReasonTailCall Reason = "tail_call"
	// ReasonTooManyReturns: more return sites than Options.MaxReturns,
	// each of which would be a uprobe.
	ReasonTooManyReturns Reason = "too_many_rets"
	// ReasonUndecodable: an instruction could not be decoded (data in the
	// code, or an instruction the disassembler does not know).
	ReasonUndecodable Reason = "undecodable"
	// ReasonNotInFile: the function's code is in no executable segment
	// of the file.
	ReasonNotInFile Reason = "not_in_file"
)

// A Func is one function and where it enters and returns.
type Func struct {
	// Name is the symbol's name as the file spells it; "" for a function
	// known only by its frame description (SourceEHFrame).
	Name string
	// Demangled is the demangled C++ or Rust name, without parameters,
	// when it differs from Name.
	Demangled string
	Source    Source
	// Addr and Size are the function's virtual address and size in bytes.
	Addr, Size uint64
	// Offset is the file offset of the function's first instruction.
	Offset uint64
	// Entry is the file offset the entry uprobe attaches at: Offset,
	// except for a Go function that checks its stack (EntryAfter says so).
	Entry uint64
	// EntryAfter says why Entry is not Offset: "" or EntryAfterStackCheck.
	EntryAfter string
	// Returns are the file offsets of the function's return instructions,
	// in address order, those of its parts placed elsewhere (.cold)
	// included; nil when the function is refused.
	Returns []uint64
	// IndirectJumps counts jumps through a register or memory (a switch's
	// jump table, or a tail call through a pointer: the two cannot be told
	// apart without running the code). They are not refused.
	IndirectJumps int
	// Refused says why the function cannot be traced; "" when it can.
	Refused Reason
	// Detail says where, for a refusal: the instruction that jumps out,
	// the one that could not be decoded, the count of return sites.
	Detail string
}

// DisplayName is the demangled name, else the name, else the address
// (0x...), which is also what a filter matches for an unnamed function.
func (f *Func) DisplayName() string {
	switch {
	case f.Demangled != "":
		return f.Demangled
	case f.Name != "":
		return f.Name
	}
	return fmt.Sprintf("%#x", f.Addr)
}

// EntryAfterStackCheck: a Go function begins by comparing its stack
// pointer with its goroutine's stack guard (CMPQ SP, 16(R14), or through
// R12 for a larger frame) and jumps, when the stack is short, to a block
// that calls runtime.morestack and jumps back to the first instruction.
// An entry probe on the first instruction would see a call that grows its
// stack twice; on the instruction after the check's jump it sees it once,
// with the arguments still in their registers and the stack pointer
// unchanged.
const EntryAfterStackCheck = "stack_check"

// Arch is the instruction set of a file's code.
type Arch string

// The architectures whose code is disassembled.
const (
	ArchAMD64 Arch = "amd64"
	ArchARM64 Arch = "arm64"
)

// A File is the functions of one ELF file.
type File struct {
	Path string
	Arch Arch
	// Go is set when the functions come from a Go function table.
	Go bool
	// GoVersion is the Go toolchain that built a Go binary ("go1.19.8"),
	// from its build information; "" when it has none that reads.
	GoVersion string
	// Funcs are the functions that matched Options.Filter, by address.
	Funcs []Func
	// Capped is set when a table was read only up to its cap, or more
	// functions matched than the cap kept: the list is incomplete.
	Capped bool
}

// Options say which functions to list.
type Options struct {
	// Filter keeps the functions whose name or demangled name it matches
	// (an unnamed one by its address written 0x...); nil keeps all.
	Filter *glob.Glob
	// MaxReturns refuses a function with more return sites;
	// DefaultMaxRets when zero.
	MaxReturns int
	// Debug is the file's separate debug file (elfread.FindDebugFile),
	// or nil: its .symtab, whose addresses are the file's, is read when
	// the file has none of its own (a stripped binary).
	Debug *elf.File
}

// openTimeout bounds opening and reading one file: a file on a file
// system that stopped answering (a FUSE daemon) is given up on.
const openTimeout = 30 * time.Second

// Open lists the functions of the ELF file at path. A path through a
// process's root in procfs (/proc/PID/root/...) is resolved inside that
// root as the process sees it; the file must be a regular file, and
// opening and reading it are bounded in time (internal/userfile).
func Open(ctx context.Context, path string, o Options) (*File, error) {
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	fh, err := userfile.OpenRooted(ctx, path, userfile.Options{Symlinks: true})
	if err != nil {
		return nil, err // *PathError: "open PATH: ..."
	}
	defer fh.Close()
	f, err := userfile.Do(ctx, fmt.Sprintf("device %d", fh.Info.Dev), func() (*File, error) { return Parse(fh, o) }, nil)
	if err != nil {
		return nil, fmt.Errorf("list functions of %s: %w", path, err)
	}
	f.Path = path
	return f, nil
}

// Parse lists the functions of an ELF file read from r. It never panics
// on malformed input: debug/elf's and debug/gosym's panics become errors.
func Parse(r io.ReaderAt, o Options) (f *File, err error) {
	defer func() {
		if p := recover(); p != nil {
			f, err = nil, fmt.Errorf("malformed ELF file: %v", p)
		}
	}()
	if o.MaxReturns <= 0 {
		o.MaxReturns = DefaultMaxRets
	}
	ef, err := elfread.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("parse ELF: %w", err)
	}
	if ef.Type != elf.ET_EXEC && ef.Type != elf.ET_DYN {
		return nil, fmt.Errorf("ELF type %s: not an executable or shared library", ef.Type)
	}
	f = &File{}
	switch ef.Machine {
	case elf.EM_X86_64:
		f.Arch = ArchAMD64
	case elf.EM_AARCH64:
		f.Arch = ArchARM64
	default:
		return nil, fmt.Errorf("machine %s: only x86-64 and arm64 code is disassembled", ef.Machine)
	}
	fns, parts, capped, isGo, err := functions(ef, r, o.Filter, o.Debug)
	if err != nil {
		return nil, err
	}
	f.Go, f.Capped = isGo, capped
	if isGo {
		// debug/buildinfo reads the .go.buildinfo section, at most 64 KiB,
		// and strings whose lengths it bounds by what it read.
		if bi, err := buildinfo.Read(r); err == nil {
			f.GoVersion = bi.GoVersion
		}
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].Addr < fns[j].Addr })
	var buf []byte
	for i := range fns {
		buf = returns(ef, r, f.Arch, isGo, &fns[i], parts, o.MaxReturns, buf)
	}
	f.Funcs = fns
	return f, nil
}

// maxParts bounds the parts placed elsewhere (.cold) followed from one
// function.
const maxParts = 8

// returns reads fn's code, and that of the parts it jumps to (parts: split
// off functions, by address), and fills in fn's entry offsets and return
// sites, or why it is refused. isGo says fn is Go code (its stack check
// moves the entry probe). buf is reused across functions and returned.
func returns(ef *elf.File, r io.ReaderAt, arch Arch, isGo bool, fn *Func, parts []span, maxRets int, buf []byte) []byte {
	off, err := elfread.CodeOffset(ef, fn.Addr)
	if err != nil {
		fn.Refused, fn.Detail = ReasonNotInFile, err.Error()
		return buf
	}
	fn.Offset, fn.Entry = off, off
	if fn.Size == 0 {
		fn.Refused = ReasonZeroSize
		return buf
	}
	regions := []span{{fn.Addr, fn.Size}}
	inside := func(a uint64) bool {
		for _, s := range regions {
			if a >= s.addr && a-s.addr < s.size {
				return true
			}
		}
		return false
	}
	var rets []uint64
	for i := 0; i < len(regions); i++ {
		var code []byte
		code, buf, fn.Refused, fn.Detail = read(ef, r, regions[i], buf)
		if fn.Refused != "" {
			return buf
		}
		var rs []uint64
		var indirect int
		var exits []exit
		var ref refusal
		switch arch {
		case ArchAMD64:
			rs, indirect, exits, ref = scanAMD64(code, regions[i].addr)
			if i == 0 && isGo {
				if n := goStackCheckAMD64(code, fn.Addr); n > 0 {
					fn.Entry, fn.EntryAfter = off+uint64(n), EntryAfterStackCheck
				}
			}
		case ArchARM64:
			rs, indirect, exits, ref = scanARM64(code, regions[i].addr)
			if i == 0 && isGo {
				if n := goStackCheckARM64(code, fn.Addr); n > 0 {
					fn.Entry, fn.EntryAfter = off+uint64(n), EntryAfterStackCheck
				}
			}
		}
		fn.IndirectJumps += indirect
		if ref.reason != "" {
			fn.Refused, fn.Detail = ref.reason, ref.detail
			return buf
		}
		rets = append(rets, rs...)
		for _, e := range exits {
			if inside(e.target) {
				continue
			}
			if p, ok := partAt(parts, e.target); ok && len(regions) <= maxParts {
				regions = append(regions, p)
				continue
			}
			fn.Refused, fn.Detail = ReasonTailCall, fmt.Sprintf("%s at %#x to %#x, outside the function", opName(e.op), e.at, e.target)
			return buf
		}
	}
	switch {
	case len(rets) == 0:
		fn.Refused = ReasonNoReturn
	case len(rets) > maxRets:
		fn.Refused, fn.Detail = ReasonTooManyReturns, fmt.Sprintf("%d return sites, cap %d", len(rets), maxRets)
	default:
		sort.Slice(rets, func(i, j int) bool { return rets[i] < rets[j] })
		fn.Returns = make([]uint64, len(rets))
		for i, a := range rets {
			o, err := elfread.CodeOffset(ef, a)
			if err != nil {
				fn.Returns, fn.Refused, fn.Detail = nil, ReasonNotInFile, err.Error()
				return buf
			}
			fn.Returns[i] = o
		}
	}
	return buf
}

// read reads the code of s into buf (grown as needed), or says why not.
func read(ef *elf.File, r io.ReaderAt, s span, buf []byte) (code, _ []byte, _ Reason, detail string) {
	if s.size > maxFuncSize {
		return nil, buf, ReasonTooLarge, fmt.Sprintf("%d bytes at %#x, cap %d", s.size, s.addr, maxFuncSize)
	}
	off, err := elfread.CodeOffset(ef, s.addr)
	if err != nil {
		return nil, buf, ReasonNotInFile, err.Error()
	}
	if end, err := elfread.CodeOffset(ef, s.addr+s.size-1); err != nil || end != off+s.size-1 {
		return nil, buf, ReasonNotInFile, fmt.Sprintf("the code at %#x runs past its segment's contents", s.addr)
	}
	if uint64(cap(buf)) < s.size {
		buf = make([]byte, s.size)
	}
	code = buf[:s.size]
	if n, err := r.ReadAt(code, int64(off)); n < len(code) {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, buf, ReasonNotInFile, err.Error()
	}
	return code, buf, "", ""
}

// partAt returns the part (sorted by address) that starts at or contains
// a.
func partAt(parts []span, a uint64) (span, bool) {
	i := sort.Search(len(parts), func(i int) bool { return parts[i].addr > a })
	if i > 0 && a-parts[i-1].addr < parts[i-1].size {
		return parts[i-1], true
	}
	return span{}, false
}

// A refusal is a scan's reason to refuse a function, and where.
type refusal struct {
	reason Reason
	detail string
}

// errNoFunctions is returned for a file with no function table at all.
var errNoFunctions = errors.New("no function table: no .symtab, .dynsym, Go pclntab or .eh_frame")
