package elfread

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spanwatch/spanwatch/internal/userfile"
)

// Caps on the tables debug/elf reads whole when it opens a file. Real
// executables have a few dozen sections (a few thousand with
// -ffunction-sections kept), a dozen program headers and a section name
// table of a few KiB.
const (
	MaxHeaders   = 1 << 16 // section headers, and program headers
	MaxNameTable = 1 << 20 // bytes of .shstrtab
)

// ErrHeaders is returned by NewFile for a file whose header tables are past
// the caps.
var ErrHeaders = errors.New("ELF header tables past their caps")

// NewFile checks r's ELF header tables against MaxHeaders and MaxNameTable,
// then parses it with debug/elf. A file past a cap is not parsed (its
// headers are what everything else is found by) and counted under
// userfile.ReasonHeaders.
func NewFile(r io.ReaderAt) (*elf.File, error) {
	if err := checkHeaders(r); err != nil {
		if errors.Is(err, ErrHeaders) {
			userfile.Count(userfile.ReasonHeaders)
		}
		return nil, err
	}
	f, err := parse(r)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// parse runs elf.NewFile, turning its panics on malformed input into errors.
func parse(r io.ReaderAt) (f *elf.File, err error) {
	defer func() {
		if p := recover(); p != nil {
			f, err = nil, fmt.Errorf("malformed ELF file: %v", p)
		}
	}()
	return elf.NewFile(r)
}

func checkHeaders(r io.ReaderAt) error {
	var h [64]byte
	if n, _ := r.ReadAt(h[:], 0); n < 52 || !bytes.Equal(h[:4], []byte(elf.ELFMAG)) {
		return errors.New("not an ELF file")
	}
	var bo binary.ByteOrder
	switch elf.Data(h[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		bo = binary.LittleEndian
	case elf.ELFDATA2MSB:
		bo = binary.BigEndian
	default:
		return errors.New("ELF file of unknown byte order")
	}
	var shoff uint64
	var shentsize, shnum, shstrndx, phnum uint64
	is64 := elf.Class(h[elf.EI_CLASS]) == elf.ELFCLASS64
	if is64 {
		shoff = bo.Uint64(h[0x28:])
		phnum = uint64(bo.Uint16(h[0x38:]))
		shentsize = uint64(bo.Uint16(h[0x3a:]))
		shnum = uint64(bo.Uint16(h[0x3c:]))
		shstrndx = uint64(bo.Uint16(h[0x3e:]))
	} else {
		shoff = uint64(bo.Uint32(h[0x20:]))
		phnum = uint64(bo.Uint16(h[0x2c:]))
		shentsize = uint64(bo.Uint16(h[0x2e:]))
		shnum = uint64(bo.Uint16(h[0x30:]))
		shstrndx = uint64(bo.Uint16(h[0x32:]))
	}
	if shoff == 0 {
		return nil // no section headers: debug/elf reads only program headers
	}
	if shentsize == 0 {
		shentsize = 64
		if !is64 {
			shentsize = 40
		}
	}
	// Section header 0 holds the counts that do not fit the header
	// (extended numbering).
	s0, err := sectionHeader(r, bo, is64, shoff)
	if err != nil {
		return err
	}
	if shnum == 0 {
		shnum = s0.size
	}
	if shstrndx == uint64(elf.SHN_XINDEX) {
		shstrndx = uint64(s0.link)
	}
	if phnum == 0xffff {
		phnum = uint64(s0.info)
	}
	if shnum > MaxHeaders || phnum > MaxHeaders {
		return fmt.Errorf("%w: %d section and %d program headers, cap %d", ErrHeaders, shnum, phnum, MaxHeaders)
	}
	if shnum == 0 || shstrndx >= shnum {
		return nil // debug/elf refuses the file itself
	}
	names, err := sectionHeader(r, bo, is64, shoff+shstrndx*shentsize)
	if err != nil {
		return err
	}
	if names.flags&uint64(elf.SHF_COMPRESSED) != 0 {
		return fmt.Errorf("%w: a compressed section name table", ErrHeaders)
	}
	if names.size > MaxNameTable {
		return fmt.Errorf("%w: a section name table of %d bytes, cap %d", ErrHeaders, names.size, MaxNameTable)
	}
	return nil
}

type shdr struct {
	flags, size uint64
	link, info  uint32
}

func sectionHeader(r io.ReaderAt, bo binary.ByteOrder, is64 bool, off uint64) (shdr, error) {
	var b [64]byte
	n := 64
	if !is64 {
		n = 40
	}
	if off > 1<<62 {
		return shdr{}, errors.New("section header offset out of range")
	}
	if k, err := r.ReadAt(b[:n], int64(off)); k < n {
		return shdr{}, fmt.Errorf("read section header at %#x: %w", off, err)
	}
	if is64 {
		return shdr{flags: bo.Uint64(b[0x08:]), size: bo.Uint64(b[0x20:]), link: bo.Uint32(b[0x28:]), info: bo.Uint32(b[0x2c:])}, nil
	}
	return shdr{flags: uint64(bo.Uint32(b[0x08:])), size: uint64(bo.Uint32(b[0x14:])), link: bo.Uint32(b[0x18:]), info: bo.Uint32(b[0x1c:])}, nil
}

// ErrNoRoom is returned by ReadSection when its grant gave nothing.
var ErrNoRoom = errors.New("no room in the memory budget")

// ReadSection returns a section's contents, inflated when compressed, up
// to max bytes; truncated reports it was cut (at max, counted under
// userfile.ReasonSection, or ReasonDecompressed for a compressed one, or
// at what grant allowed). When view is not nil and the section is stored
// as is, its bytes come from view (a mapping of the file) instead of being
// copied. Otherwise the buffer is allocated once, at the size the section
// claims within max and within what grant (when not nil) grants of it: a
// size is never allocated past the cap or the budget (ErrNoRoom when the
// budget has none), and a compressed section that inflates to more than
// it claims is read as far as its claim.
func ReadSection(s *elf.Section, max int64, view func(off, size uint64) ([]byte, error), grant func(int64) int64) (b []byte, truncated bool, err error) {
	if s.Type == elf.SHT_NOBITS {
		return nil, false, fmt.Errorf("section %s has no data in the file", s.Name)
	}
	// Open first: for a .zdebug section it sets Size to the inflated size
	// the section claims.
	r := s.Open()
	compressed := s.Flags&elf.SHF_COMPRESSED != 0 || strings.HasPrefix(s.Name, ".zdebug")
	size := s.Size
	if int64(size) > max {
		size, truncated = uint64(max), true
		if compressed {
			userfile.Count(userfile.ReasonDecompressed)
		} else {
			userfile.Count(userfile.ReasonSection)
		}
	}
	if !compressed && view != nil {
		b, err := view(s.Offset, size)
		return b, truncated, err
	}
	if grant != nil {
		g := grant(int64(size))
		if g <= 0 && size > 0 {
			return nil, truncated, ErrNoRoom
		}
		if uint64(g) < size {
			size, truncated = uint64(g), true
		}
	}
	b = make([]byte, size)
	n, err := io.ReadFull(r, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, false, err
	}
	return b[:n], truncated, nil
}

// GoFuncs reads the function count of a Go 1.2+ pclntab's header and
// checks that the function table it implies fits in data. debug/gosym
// builds a value per function the header claims, so callers check the
// count against their cap before handing the table to it.
func GoFuncs(data []byte, bo binary.ByteOrder) (uint64, bool) {
	if len(data) < 16 {
		return 0, false
	}
	ptr := uint64(data[7])
	if ptr != 4 && ptr != 8 || uint64(len(data)) < 8+ptr {
		return 0, false
	}
	var n uint64
	if ptr == 8 {
		n = bo.Uint64(data[8:])
	} else {
		n = uint64(bo.Uint32(data[8:]))
	}
	// Each function has at least an entry and an offset in the table.
	if n > uint64(len(data))/8 {
		return 0, false
	}
	return n, true
}

// FileOffset maps a virtual address to its offset in the file through the
// loadable segments (the allocated sections of a file without program
// headers).
func FileOffset(f *elf.File, addr uint64) (uint64, error) {
	return segmentOffset(f, addr, 0, "file-backed")
}

// CodeOffset maps a virtual address to its offset in the file through the
// executable loadable segments (where a uprobe may go; the executable
// sections of a file without program headers).
func CodeOffset(f *elf.File, addr uint64) (uint64, error) {
	return segmentOffset(f, addr, elf.PF_X, "executable")
}

func segmentOffset(f *elf.File, addr uint64, want elf.ProgFlag, what string) (uint64, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&want != want {
			continue
		}
		if addr >= p.Vaddr && addr-p.Vaddr < p.Filesz {
			return addr - p.Vaddr + p.Off, nil
		}
	}
	if len(f.Progs) == 0 {
		for _, s := range f.Sections {
			if s.Flags&elf.SHF_ALLOC == 0 || s.Type == elf.SHT_NOBITS {
				continue
			}
			if want&elf.PF_X != 0 && s.Flags&elf.SHF_EXECINSTR == 0 {
				continue
			}
			if addr >= s.Addr && addr-s.Addr < s.Size {
				return addr - s.Addr + s.Offset, nil
			}
		}
	}
	return 0, fmt.Errorf("address %#x is in no %s segment of the file", addr, what)
}

// GoTextStart returns the text start a Go 1.18+ pclntab's header records
// (runtime.text, which the table's function entries are relative to), or
// 0 when the header has none (an older table, or a position-independent
// binary, where the field is filled in by a relocation at load). It is
// not the start of .text in an externally linked binary, where the C
// start files come first (Debian's prometheus: .text at 0x402340,
// runtime.text at 0x402440); debug/gosym takes the text start from its
// caller, not from the header.
func GoTextStart(data []byte, bo binary.ByteOrder) uint64 {
	if len(data) < 8 {
		return 0
	}
	if magic := bo.Uint32(data); magic != 0xfffffff0 && magic != 0xfffffff1 {
		return 0
	}
	ptr := int(data[7])
	off := 8 + 2*ptr
	switch {
	case ptr == 8 && len(data) >= off+8:
		return bo.Uint64(data[off:])
	case ptr == 4 && len(data) >= off+4:
		return uint64(bo.Uint32(data[off:]))
	}
	return 0
}

// GoModuleText returns runtime.text as a Go 1.18+ binary's moduledata
// records it, or 0: the moduledata is found in the writable segments as
// the words pointing at the pclntab (pcHeader) and its funcnametab, and
// its text (word 22) is taken when it is no greater than its etext (word
// 23), as the minpc before them (word 20) is, and lies in an executable
// segment. Newer linkers leave the pclntab header's text start 0 (see
// GoTextStart); the moduledata's words are absolute in a binary that is
// not position-independent. read reads a segment's contents (within the
// caller's caps); pcln is the pclntab at address pclnAddr.
func GoModuleText(f *elf.File, pcln []byte, pclnAddr uint64, read func(off, size uint64) ([]byte, error)) uint64 {
	if len(pcln) < 8 || f.Class != elf.ELFCLASS64 {
		return 0
	}
	bo := f.ByteOrder
	if magic := bo.Uint32(pcln); (magic != 0xfffffff0 && magic != 0xfffffff1) || pcln[7] != 8 || len(pcln) < 8+4*8 {
		return 0
	}
	funcnameOff := bo.Uint64(pcln[8+3*8:])
	var text uint64
	GoModuledata(f, pclnAddr, funcnameOff, 24, read, func(md []byte) bool {
		minpc, t, etext := bo.Uint64(md[20*8:]), bo.Uint64(md[22*8:]), bo.Uint64(md[23*8:])
		if t == 0 || minpc < t || t >= etext {
			return false
		}
		for _, x := range f.Progs {
			if x.Type == elf.PT_LOAD && x.Flags&elf.PF_X != 0 && t >= x.Vaddr && t-x.Vaddr < x.Filesz {
				text = t
				return true
			}
		}
		return false
	})
	return text
}

// GoModuledata offers accept each candidate for a Go 1.18+ binary's
// moduledata, in order, until accept takes one: the places in the writable
// segments holding the two words that point at the pclntab (pcHeader, at
// pclnAddr) and its funcnametab (funcnameOff further), with at least words
// 64-bit words from there on. The words are absolute in a binary that is
// not position-independent; a candidate proves nothing until accept checks
// the words it needs (runtime.text, gofunc, ...). read reads a segment's
// contents within the caller's caps.
func GoModuledata(f *elf.File, pclnAddr, funcnameOff uint64, words int, read func(off, size uint64) ([]byte, error), accept func(md []byte) bool) {
	if f.Class != elf.ELFCLASS64 {
		return
	}
	bo := f.ByteOrder
	var pat [16]byte
	bo.PutUint64(pat[:], pclnAddr)
	bo.PutUint64(pat[8:], pclnAddr+funcnameOff)
	for _, ph := range f.Progs {
		if ph.Type != elf.PT_LOAD || ph.Flags&elf.PF_W == 0 || ph.Filesz == 0 {
			continue
		}
		data, err := read(ph.Off, ph.Filesz)
		if err != nil {
			continue
		}
		for off := 0; ; {
			i := bytes.Index(data[off:], pat[:])
			if i < 0 {
				break
			}
			md := data[off+i:]
			off += i + 8
			if len(md) < words*8 {
				break
			}
			if accept(md[:words*8]) {
				return
			}
		}
	}
}
