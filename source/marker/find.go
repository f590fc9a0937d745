package marker

import (
	"bytes"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/spanwatch/spanwatch/internal/elfread"
	"github.com/spanwatch/spanwatch/internal/markerabi"
	"github.com/spanwatch/spanwatch/internal/userfile"
)

var ErrNoMarker = errors.New("no spanwatch marker")

// nativeMachine is the collector's own machine: libspanwatch's marker is
// attached only in binaries built for it, because uprobe_marker_sysv reads
// the first argument register of this machine's pt_regs (and a binary of
// another machine, run under an emulator, would get this machine's
// breakpoint written into its code).
var nativeMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]

// probeWordOffset and probeMagic are emit/probe.go's, from
// internal/markerabi: the enable word sits probeWordOffset bytes into
// emit.probe and is followed by the magic pair.
const (
	probeWordOffset = markerabi.WordOffset
	probeMagic      = markerabi.Magic
)

// Caps on what Find reads of a binary: the marker's symbols sit in
// the first megabytes of a symbol table, and the span SDK's binaries are
// Go programs with pclntabs of a few MiB.
const (
	markerMaxSection = 64 << 20 // bytes of a symbol table, string table or pclntab read
	markerMaxFuncs   = 1 << 20  // functions of a pclntab handed to debug/gosym
)

// marker is what Find found in a binary.
type Found struct {
	Off, Sem, Addr uint64 // file offsets of the marker and the enable word; the marker's address
	SysV           bool   // libspanwatch's marker (the event in the first argument register), not the Go SDK's
	// Nop5 is set when the Go SDK's marker is x86-64's nop, nop5, ret
	// (markerabi.GoMarkerCodeAMD64): a uprobe at its five-byte nop, at
	// Off+markerabi.GoNop5Offset, is one the kernel may optimize.
	Nop5 bool
	Caps []string // the caps (userfile reasons) a read of the binary met
}

// symbol names the marker found, for messages.
func (mk Found) symbol() string {
	if mk.SysV {
		return markerabi.CMarkerSymbol
	}
	return markerSymbol
}

// Find returns the file offsets of the marker function and of the
// enable word (the uprobe's reference counter) in an ELF file: the Go
// SDK's, or else libspanwatch's (include/spanwatch.h). Binaries without a
// symbol table (go build -ldflags=-s, go test, strip) are searched through
// the Go pclntab and the enable word's magic. Every table is read within a
// cap (a binary any user can run is any file they made). A binary with
// both markers (a Go program that also includes spanwatch.h through cgo)
// is attached at the Go SDK's.
func Find(r io.ReaderAt) (Found, error) {
	f, err := elfread.NewFile(r)
	if err != nil {
		return Found{}, ErrNoMarker // not an ELF file: nothing to attach
	}
	var mk Found
	var probeAddr uint64
	mk.Addr, probeAddr = markerBySymbols(f, &mk.Caps)
	if mk.Addr == 0 {
		mk.Addr = markerByPclntab(f, &mk.Caps)
	}
	if probeAddr == 0 && mk.Addr != 0 {
		probeAddr = probeByMagic(f, probeMagic, &mk.Caps)
	}
	if (mk.Addr == 0 || probeAddr == 0) && f.Machine == nativeMachine {
		mk.Addr, probeAddr = cMarker(f, &mk.Caps)
		mk.SysV = true
	}
	if mk.Addr == 0 || probeAddr == 0 {
		return Found{}, ErrNoMarker
	}
	if !mk.SysV && f.Machine == elf.EM_X86_64 {
		code, ok := readAddr(f, mk.Addr, len(markerabi.GoMarkerCodeAMD64), elf.PF_X)
		mk.Nop5 = ok && string(code) == markerabi.GoMarkerCodeAMD64
	}
	if mk.Off, err = elfread.FileOffset(f, mk.Addr); err != nil {
		return Found{}, fmt.Errorf("%s: %w", mk.symbol(), err)
	}
	if mk.Sem, err = elfread.FileOffset(f, probeAddr); err != nil {
		return Found{}, fmt.Errorf("%s: %w", probeSymbol, err)
	}
	return mk, nil
}

// cMarker finds libspanwatch's probe by its magic and, from the distance
// the probe holds, its marker: the marker must be in an executable segment
// and be what spanwatch.h makes, a nop then a return, so that a file that
// merely contains the magic gets no uprobe. It returns the marker's and
// the enable word's addresses, or zeros.
func cMarker(f *elf.File, caps *[]string) (markerAddr, probeAddr uint64) {
	code, ok := cMarkerCode[f.Machine]
	if !ok {
		return 0, 0 // the BPF objects are built for x86-64 and arm64 only
	}
	probeAddr = probeByMagic(f, markerabi.CMagic, caps)
	if probeAddr == 0 {
		return 0, 0
	}
	rec, ok := readAddr(f, probeAddr, markerabi.CABIOffset+4, 0)
	if !ok || binary.LittleEndian.Uint32(rec[markerabi.CABIOffset:]) != markerabi.CABISysV {
		return 0, 0
	}
	rel := int64(binary.LittleEndian.Uint64(rec[markerabi.CMarkerRelOffset:]))
	markerAddr = probeAddr + markerabi.CMarkerRelOffset + uint64(rel)
	got, ok := readAddr(f, markerAddr, len(code), elf.PF_X)
	if !ok || string(got) != code {
		return 0, 0
	}
	return markerAddr, probeAddr
}

// cMarkerCode is the C marker's code by architecture: a nop then a
// return. uprobe_marker_sysv reads the event's address from the first
// argument register (PT_REGS_PARM1: %rdi, x0).
var cMarkerCode = map[elf.Machine]string{
	elf.EM_X86_64:  "\x90\xc3",                         // nop; ret
	elf.EM_AARCH64: "\x1f\x20\x03\xd5\xc0\x03\x5f\xd6", // nop; ret (little endian)
}

// readAddr reads n bytes at a virtual address from the file-backed part of
// a loadable segment with the flags want.
func readAddr(f *elf.File, addr uint64, n int, want elf.ProgFlag) ([]byte, bool) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&want != want || addr < p.Vaddr || addr-p.Vaddr > p.Filesz || p.Filesz-(addr-p.Vaddr) < uint64(n) {
			continue
		}
		b := make([]byte, n)
		if _, err := p.ReadAt(b, int64(addr-p.Vaddr)); err != nil {
			return nil, false
		}
		return b, true
	}
	return nil, false
}

func markerBySymbols(f *elf.File, caps *[]string) (markerAddr, probeAddr uint64) {
	table := elfread.Table(f, elf.SHT_SYMTAB)
	strs := elfread.StringTable(f, table)
	if table == nil || strs == nil {
		return 0, 0
	}
	strtab, cut, err := elfread.ReadSection(strs, markerMaxSection, nil, nil)
	if err != nil {
		return 0, 0
	}
	if cut {
		*caps = append(*caps, userfile.ReasonSection)
	}
	capped, _ := elfread.Symbols(f, table, markerMaxSection, func(s elfread.Symbol) bool {
		switch {
		case elfread.NameIs(strtab, s.Name, markerSymbol):
			markerAddr = s.Value
		case elfread.NameIs(strtab, s.Name, probeSymbol):
			probeAddr = s.Value + probeWordOffset
		}
		return markerAddr == 0 || probeAddr == 0
	})
	if capped {
		*caps = append(*caps, userfile.ReasonSymbols)
	}
	return markerAddr, probeAddr
}

// markerByPclntab finds the marker through the Go line table, which
// stripped Go binaries keep.
func markerByPclntab(f *elf.File, caps *[]string) uint64 {
	tab := pclnTable(f, caps)
	if tab == nil {
		return 0
	}
	for _, name := range []string{markerSymbol, strings.TrimSuffix(markerSymbol, ".abi0")} {
		if fn := tab.LookupFunc(name); fn != nil {
			return fn.Entry
		}
	}
	return 0
}

// pclnTable reads a Go binary's line table, or returns nil.
func pclnTable(f *elf.File, caps *[]string) *gosym.Table {
	pcln, text := f.Section(".gopclntab"), f.Section(".text")
	if pcln == nil || text == nil {
		return nil
	}
	if pcln.Size > markerMaxSection {
		userfile.Count(userfile.ReasonSection)
		*caps = append(*caps, userfile.ReasonSection)
		return nil
	}
	data, _, err := elfread.ReadSection(pcln, markerMaxSection, nil, nil)
	if err != nil {
		return nil
	}
	if n, ok := elfread.GoFuncs(data, f.ByteOrder); !ok || n > markerMaxFuncs {
		if ok {
			userfile.Count(userfile.ReasonGoFuncs)
			*caps = append(*caps, userfile.ReasonGoFuncs)
		}
		return nil
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return nil
	}
	return tab
}

// probeByMagic finds an enable word by the magic pair that follows it (the
// Go SDK's probeMagic or libspanwatch's), in the writable segments, read a
// chunk at a time up to the cap.
func probeByMagic(f *elf.File, want uint64, caps *[]string) uint64 {
	var magic [16]byte
	binary.LittleEndian.PutUint64(magic[:], want)
	binary.LittleEndian.PutUint64(magic[8:], ^want)
	const chunk = 1 << 20
	buf := make([]byte, chunk+len(magic))
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_W == 0 {
			continue
		}
		size := p.Filesz
		if size > markerMaxSection {
			size = markerMaxSection
			userfile.Count(userfile.ReasonSection)
			*caps = append(*caps, userfile.ReasonSection)
		}
		// Chunks overlap by the magic's length, so a match across two is
		// found; base is the segment offset of buf[0].
		for base := uint64(0); base < size; base += chunk {
			n, err := p.ReadAt(buf[:min(uint64(len(buf)), size-base)], int64(base))
			if n == 0 && err != nil {
				break
			}
			data := buf[:n]
			for off := 0; off+16 <= len(data); {
				i := bytes.Index(data[off:], magic[:])
				if i < 0 {
					break
				}
				at := base + uint64(off+i)
				if (p.Vaddr+at)%8 == 0 && at >= 8 {
					return p.Vaddr + at - 8
				}
				off += i + 1
			}
		}
	}
	return 0
}
