// Package elfbuild writes ELF files for tests of what spanwatch reads from
// files users control: small files whose sections claim any size (the
// bytes past what a section holds are a hole, so a 4 GiB section costs
// nothing on disk or in memory), compressed sections that inflate to any
// size, and patches of real binaries that still run. Tests and fuzz
// targets use it; the agent does not.
package elfbuild

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sort"
)

// A Sparse is a file of Size bytes made of extents of data, zeros between
// them: an in-memory stand-in for a sparse file.
type Sparse struct {
	Extents []Extent // by offset, not overlapping
	Len     int64
}

// An Extent is data at an offset.
type Extent struct {
	Off  int64
	Data []byte
}

// ReadAt reads as a file would: zeros in holes, io.EOF past Len.
func (s *Sparse) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("negative offset")
	}
	if off >= s.Len {
		return 0, io.EOF
	}
	n := len(p)
	if int64(n) > s.Len-off {
		n = int(s.Len - off)
	}
	clear(p[:n])
	i := sort.Search(len(s.Extents), func(i int) bool {
		e := s.Extents[i]
		return e.Off+int64(len(e.Data)) > off
	})
	for ; i < len(s.Extents) && s.Extents[i].Off < off+int64(n); i++ {
		e := s.Extents[i]
		from := max(off, e.Off)
		to := min(off+int64(n), e.Off+int64(len(e.Data)))
		copy(p[from-off:to-off], e.Data[from-e.Off:to-e.Off])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Size returns Len.
func (s *Sparse) Size() int64 { return s.Len }

// WriteFile writes s to path as a sparse file: only its extents take
// disk space.
func (s *Sparse) WriteFile(path string, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	for _, e := range s.Extents {
		if _, err := f.WriteAt(e.Data, e.Off); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Truncate(s.Len); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// A Section is one section of a built file.
type Section struct {
	Name    string
	Type    elf.SectionType
	Flags   elf.SectionFlag
	Addr    uint64
	Data    []byte // what the file holds for it
	Size    uint64 // its size in the file; past len(Data), a hole
	Link    uint32
	Info    uint32
	Entsize uint64
}

// Build lays out a 64-bit little-endian x86-64 executable: the ELF
// header, one PT_LOAD program header covering the first page, the section
// header table and the section name table, then each section's data at
// page-aligned offsets in order, each taking its Size.
func Build(sections ...Section) *Sparse {
	bo := binary.LittleEndian
	all := append([]Section{{}}, sections...)
	var names bytes.Buffer
	names.WriteByte(0)
	nameOff := make([]uint32, len(all)+1)
	for i, s := range all[1:] {
		nameOff[i+1] = uint32(names.Len())
		names.WriteString(s.Name)
		names.WriteByte(0)
	}
	nameOff[len(all)] = uint32(names.Len())
	names.WriteString(".shstrtab\x00")
	shnum := len(all) + 1
	const ehsize, phsize, shsize = 64, 56, 64
	phoff := int64(ehsize)
	shoff := phoff + phsize
	strOff := shoff + int64(shnum)*shsize
	s := &Sparse{}
	off := (strOff + int64(names.Len()) + 4095) &^ 4095
	offs := make([]int64, len(all))
	for i, sec := range all[1:] {
		size := max(sec.Size, uint64(len(sec.Data)))
		offs[i+1] = off
		if len(sec.Data) > 0 {
			s.Extents = append(s.Extents, Extent{Off: off, Data: sec.Data})
		}
		off = (off + int64(size) + 4095) &^ 4095
	}
	s.Len = off

	var h bytes.Buffer
	h.Write([]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)})
	h.Write(make([]byte, 9))
	w := func(v any) { binary.Write(&h, bo, v) }
	w(uint16(elf.ET_EXEC))
	w(uint16(elf.EM_X86_64))
	w(uint32(elf.EV_CURRENT))
	w(uint64(0x401000)) // entry
	w(uint64(phoff))
	w(uint64(shoff))
	w(uint32(0))
	w(uint16(ehsize))
	w(uint16(phsize))
	w(uint16(1))
	w(uint16(shsize))
	w(uint16(shnum))
	w(uint16(shnum - 1))
	// PT_LOAD: the first page, read-execute, at 0x400000.
	w(uint32(elf.PT_LOAD))
	w(uint32(elf.PF_R | elf.PF_X))
	w(uint64(0))
	w(uint64(0x400000))
	w(uint64(0x400000))
	w(uint64(4096))
	w(uint64(4096))
	w(uint64(4096))
	for i, sec := range all {
		if i == 0 {
			h.Write(make([]byte, shsize))
			continue
		}
		w(nameOff[i])
		w(uint32(sec.Type))
		w(uint64(sec.Flags))
		w(sec.Addr)
		w(uint64(offs[i]))
		w(max(sec.Size, uint64(len(sec.Data))))
		w(sec.Link)
		w(sec.Info)
		w(uint64(1))
		w(sec.Entsize)
	}
	w(nameOff[len(all)])
	w(uint32(elf.SHT_STRTAB))
	w(uint64(0))
	w(uint64(0))
	w(uint64(strOff))
	w(uint64(names.Len()))
	w(uint32(0))
	w(uint32(0))
	w(uint64(1))
	w(uint64(0))
	h.Write(names.Bytes())
	s.Extents = append([]Extent{{Off: 0, Data: h.Bytes()}}, s.Extents...)
	return s
}

// Symbols encodes 64-bit symbol table entries (a null entry first) and
// their string table: each name a function of size 16 at addr+16*i, in
// section 1.
func Symbols(addr uint64, names ...string) (symtab, strtab []byte) {
	bo := binary.LittleEndian
	var str bytes.Buffer
	str.WriteByte(0)
	sym := make([]byte, 24, 24*(len(names)+1))
	for i, n := range names {
		e := make([]byte, 24)
		bo.PutUint32(e[0:], uint32(str.Len()))
		e[4] = byte(elf.STB_GLOBAL)<<4 | byte(elf.STT_FUNC)
		bo.PutUint16(e[6:], 1)
		bo.PutUint64(e[8:], addr+16*uint64(i))
		bo.PutUint64(e[16:], 16)
		sym = append(sym, e...)
		str.WriteString(n)
		str.WriteByte(0)
	}
	return sym, str.Bytes()
}

// Zlib returns an SHF_COMPRESSED section's contents: an Elf64_Chdr
// claiming claim bytes, then a zlib stream that inflates to n zero bytes
// (about n/1000 bytes of it).
func Zlib(claim, n uint64) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint32(elf.COMPRESS_ZLIB))
	binary.Write(&b, binary.LittleEndian, uint32(0))
	binary.Write(&b, binary.LittleEndian, claim)
	binary.Write(&b, binary.LittleEndian, uint64(1))
	zw, _ := zlib.NewWriterLevel(&b, zlib.BestCompression)
	zero := make([]byte, 1<<20)
	for left := n; left > 0; {
		k := min(left, uint64(len(zero)))
		zw.Write(zero[:k])
		left -= k
	}
	zw.Close()
	return b.Bytes()
}

// Patch points the section called name of the ELF file at path to data
// appended at the end of the file, page-aligned, taking size bytes there
// (a hole past data), with flags added: a real binary, still runnable,
// whose symbol table or debug info claims what a test needs.
func Patch(path, name string, data []byte, size uint64, flags elf.SectionFlag) error {
	ef, err := elf.Open(path)
	if err != nil {
		return err
	}
	idx := -1
	for i, s := range ef.Sections {
		if s.Name == name {
			idx = i
		}
	}
	ef.Close()
	if idx < 0 {
		return fmt.Errorf("%s has no section %s", path, name)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var eh [64]byte
	if _, err := f.ReadAt(eh[:], 0); err != nil {
		return err
	}
	bo := binary.LittleEndian
	if eh[elf.EI_CLASS] != byte(elf.ELFCLASS64) || eh[elf.EI_DATA] != byte(elf.ELFDATA2LSB) {
		return fmt.Errorf("%s: only 64-bit little-endian files are patched", path)
	}
	shoff := int64(bo.Uint64(eh[0x28:]))
	shentsize := int64(bo.Uint16(eh[0x3a:]))
	st, err := f.Stat()
	if err != nil {
		return err
	}
	off := (st.Size() + 4095) &^ 4095
	if _, err := f.WriteAt(data, off); err != nil {
		return err
	}
	size = max(size, uint64(len(data)))
	if err := f.Truncate(off + int64(size)); err != nil {
		return err
	}
	hdr := shoff + int64(idx)*shentsize
	var sh [64]byte
	if _, err := f.ReadAt(sh[:], hdr); err != nil {
		return err
	}
	bo.PutUint64(sh[0x08:], bo.Uint64(sh[0x08:])|uint64(flags))
	bo.PutUint64(sh[0x18:], uint64(off))
	bo.PutUint64(sh[0x20:], size)
	_, err = f.WriteAt(sh[:], hdr)
	return err
}
