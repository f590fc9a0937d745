package elfread

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"

	"github.com/spanwatch/spanwatch/internal/userfile"
)

// A Symbol is one entry of a symbol table. Name is an offset into the
// table's string table (StringTable): read it with Name.
type Symbol struct {
	Name    uint32
	Info    byte
	Other   byte
	Section elf.SectionIndex
	Value   uint64
	Size    uint64
}

// Type returns the symbol's type (STT_FUNC, ...).
func (s Symbol) Type() elf.SymType { return elf.ST_TYPE(s.Info) }

// Table returns the first section of type typ (elf.SHT_SYMTAB or
// elf.SHT_DYNSYM), or nil.
func Table(f *elf.File, typ elf.SectionType) *elf.Section {
	for _, s := range f.Sections {
		if s.Type == typ {
			return s
		}
	}
	return nil
}

// StringTable returns the string table a symbol table links, or nil.
func StringTable(f *elf.File, table *elf.Section) *elf.Section {
	if table == nil || table.Link == 0 || int(table.Link) >= len(f.Sections) {
		return nil
	}
	if s := f.Sections[table.Link]; s.Type == elf.SHT_STRTAB {
		return s
	}
	return nil
}

// Name returns the NUL-terminated string at off in strtab; "" past its end
// (a string table read only up to its cap).
func Name(strtab []byte, off uint32) string {
	if uint64(off) >= uint64(len(strtab)) {
		return ""
	}
	b := strtab[off:]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// NameIs reports whether the string at off in strtab is name, without
// allocating.
func NameIs(strtab []byte, off uint32, name string) bool {
	if uint64(off)+uint64(len(name)) >= uint64(len(strtab)) {
		return false
	}
	b := strtab[off:]
	return string(b[:len(name)]) == name && b[len(name)] == 0
}

// symbolChunk is how many entries Symbols reads at a time.
const symbolChunk = 4096

// Symbols calls fn with each entry of table (a SHT_SYMTAB or SHT_DYNSYM
// section), in order, without the null entry, until fn returns false. It
// reads the table a chunk at a time, so memory stays one chunk whatever
// the table's size, and stops after maxBytes of it: capped reports that
// it stopped there (counted under userfile.ReasonSymbols).
func Symbols(f *elf.File, table *elf.Section, maxBytes int64, fn func(Symbol) bool) (capped bool, err error) {
	if table == nil {
		return false, elf.ErrNoSymbols
	}
	if table.Type == elf.SHT_NOBITS {
		return false, fmt.Errorf("symbol table %s has no data in the file", table.Name)
	}
	size := 24
	if f.Class == elf.ELFCLASS32 {
		size = 16
	}
	limit := maxBytes - maxBytes%int64(size)
	capped = table.Size > uint64(limit)
	r := io.LimitReader(table.Open(), limit)
	buf := make([]byte, size*symbolChunk)
	first := true
	for {
		n, err := io.ReadFull(r, buf)
		n -= n % size
		for off := 0; off < n; off += size {
			if first {
				first = false
				continue
			}
			if !fn(decode(f, buf[off:off+size])) {
				return false, nil
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			if capped {
				userfile.Count(userfile.ReasonSymbols)
			}
			return capped, nil
		}
		if err != nil {
			return false, fmt.Errorf("read symbol table %s: %w", table.Name, err)
		}
	}
}

func decode(f *elf.File, b []byte) Symbol {
	bo := f.ByteOrder
	if f.Class == elf.ELFCLASS32 {
		return Symbol{
			Name:    bo.Uint32(b[0:]),
			Value:   uint64(bo.Uint32(b[4:])),
			Size:    uint64(bo.Uint32(b[8:])),
			Info:    b[12],
			Other:   b[13],
			Section: elf.SectionIndex(bo.Uint16(b[14:])),
		}
	}
	return Symbol{
		Name:    bo.Uint32(b[0:]),
		Info:    b[4],
		Other:   b[5],
		Section: elf.SectionIndex(bo.Uint16(b[6:])),
		Value:   bo.Uint64(b[8:]),
		Size:    bo.Uint64(b[16:]),
	}
}
