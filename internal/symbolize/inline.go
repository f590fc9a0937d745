package symbolize

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/spanwatch/spanwatch/internal/elfread"
)

// goInline reads the inline trees of a Go 1.21+ binary, which debug/gosym
// does not: at a PC inside inlined code, the function the PC belongs to is
// the outer one, while file and line are the inlined callee's. The runtime
// keeps, per function, a PC table (PCDATA_InlTreeIndex) giving the index
// of the innermost inlined call at each PC, and the tree itself
// (FUNCDATA_InlTree) in the go:func.* data, which the runtime finds through
// moduledata.gofunc. Layouts are those of runtime/runtime2.go (_func),
// runtime/symtabinl.go (inlinedCall) and runtime/symtab.go (pcHeader,
// moduledata) for Go 1.21 to 1.26; anything that does not check out leaves
// the module without inline expansion.
type goInline struct {
	bo          binary.ByteOrder
	quantum     uint64 // instruction size unit of PC deltas
	text        uint64
	funcnametab []byte
	pctab       []byte
	pclntable   []byte // starts with the functab
	nfunc       int
	gofunc      []byte // go:func.*, to the end of its segment
	names       map[int32]string
}

const (
	pcdataInlTreeIndex = 2
	funcdataInlTree    = 3
	funcFixedSize      = 44 // _func up to its pcdata array
	inlinedCallSize    = 16
)

// newGoInline sets up inline expansion for a Go binary whose pclntab is
// pcln, mapped at pclnAddr, with functions relative to text.
func newGoInline(ef *elf.File, p *parser, pcln []byte, pclnAddr, text uint64) *goInline {
	// debug/buildinfo searches the data segment for its blob and reads
	// the strings it points at: a read budget bounds what a crafted file
	// makes it read (the blob is near the segment's start).
	bi, err := buildinfo.Read(&limitedReaderAt{r: p.r, left: maxBuildInfoRead})
	if err != nil || !goAtLeast(bi.GoVersion, 21) {
		return nil
	}
	if len(pcln) < 72 || pcln[7] != 8 || binary.LittleEndian.Uint32(pcln) != 0xfffffff1 || ef.ByteOrder != binary.LittleEndian {
		return nil // 64-bit little-endian Go 1.20+ tables only
	}
	bo := ef.ByteOrder
	word := func(i int) uint64 { return bo.Uint64(pcln[8+8*i:]) }
	nfunc := int(word(0))
	funcnameOff, pctabOff, pclnOff := word(3), word(6), word(7)
	if funcnameOff >= uint64(len(pcln)) || pctabOff >= uint64(len(pcln)) || pclnOff >= uint64(len(pcln)) {
		return nil
	}
	g := &goInline{
		bo: bo, quantum: uint64(pcln[6]), text: text, nfunc: nfunc,
		funcnametab: pcln[funcnameOff:], pctab: pcln[pctabOff:], pclntable: pcln[pclnOff:],
		names: map[int32]string{},
	}
	if len(g.pclntable) < 8*(nfunc+1) {
		return nil
	}
	gofunc := findGofunc(ef, p, pclnAddr, funcnameOff, text)
	if gofunc == 0 {
		return nil
	}
	for _, ph := range ef.Progs {
		if ph.Type == elf.PT_LOAD && gofunc >= ph.Vaddr && gofunc < ph.Vaddr+ph.Filesz {
			b, err := p.read(ph.Off+gofunc-ph.Vaddr, ph.Filesz-(gofunc-ph.Vaddr))
			if err != nil {
				return nil
			}
			g.gofunc = b
			return g
		}
	}
	return nil
}

// maxBuildInfoRead bounds what debug/buildinfo reads of one file.
const maxBuildInfoRead = 16 << 20

// A limitedReaderAt fails reads once left bytes were read.
type limitedReaderAt struct {
	r    io.ReaderAt
	left int64
}

func (l *limitedReaderAt) ReadAt(b []byte, off int64) (int, error) {
	if int64(len(b)) > l.left {
		return 0, fmt.Errorf("read past the %d bytes allowed", maxBuildInfoRead)
	}
	l.left -= int64(len(b))
	return l.r.ReadAt(b, off)
}

// goAtLeast reports whether a version like "go1.26.8" is 1.minor or later.
func goAtLeast(v string, minor int) bool {
	v, ok := strings.CutPrefix(v, "go1.")
	if !ok {
		return false
	}
	end := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if end >= 0 {
		v = v[:end]
	}
	n, err := strconv.Atoi(v)
	return err == nil && n >= minor
}

// findGofunc returns moduledata.gofunc: from the go:func.* symbol when the
// symbol table is there, else from the moduledata itself, found in the
// writable data as the words pointing at the pclntab and its funcnametab
// and checked against runtime.text.
func findGofunc(ef *elf.File, p *parser, pclnAddr, funcnameOff, text uint64) uint64 {
	if table := elfread.Table(ef, elf.SHT_SYMTAB); table != nil {
		var value uint64
		if strs := elfread.StringTable(ef, table); strs != nil {
			if strtab, _, err := elfread.ReadSection(strs, p.lim.Section, p.view(), p.t.budget.grant); err == nil {
				if p.view() == nil {
					// A copy only searched here: its room goes back.
					defer p.t.budget.give(int64(len(strtab)))
				}
				elfread.Symbols(ef, table, p.lim.Section, func(s elfread.Symbol) bool {
					if elfread.NameIs(strtab, s.Name, "go:func.*") {
						value = s.Value
						return false
					}
					return true
				})
			}
		}
		if value != 0 {
			return value
		}
	}
	var gofunc uint64
	// moduledata words: 22 text, 39 rodata, 40 gofunc.
	elfread.GoModuledata(ef, pclnAddr, funcnameOff, 42, p.read, func(md []byte) bool {
		if binary.LittleEndian.Uint64(md[22*8:]) != text {
			return false
		}
		rodata, g := binary.LittleEndian.Uint64(md[39*8:]), binary.LittleEndian.Uint64(md[40*8:])
		if g >= rodata && sameSegment(ef, g, pclnAddr) {
			gofunc = g
			return true
		}
		return false
	})
	return gofunc
}

// sameSegment reports whether two addresses lie in one read-only load
// segment, as go:func.* and the pclntab do.
func sameSegment(ef *elf.File, a, b uint64) bool {
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&(elf.PF_W|elf.PF_X) == 0 &&
			a >= p.Vaddr && a < p.Vaddr+p.Filesz && b >= p.Vaddr && b < p.Vaddr+p.Filesz {
			return true
		}
	}
	return false
}

// funcAt returns the _func of the function holding pc and its entry.
func (g *goInline) funcAt(pc uint64) ([]byte, uint64, bool) {
	if pc < g.text {
		return nil, 0, false
	}
	off := pc - g.text
	ft := g.pclntable
	// The functab has nfunc+1 entries, the last one the end of the text:
	// function i holds pc when entry i+1 is the first one above it.
	i := sort.Search(g.nfunc, func(i int) bool { return uint64(g.bo.Uint32(ft[8*(i+1):])) > off })
	if i >= g.nfunc || uint64(g.bo.Uint32(ft[8*i:])) > off {
		return nil, 0, false
	}
	entry := g.text + uint64(g.bo.Uint32(ft[8*i:]))
	funcOff := g.bo.Uint32(ft[8*i+4:])
	if uint64(funcOff)+funcFixedSize > uint64(len(ft)) {
		return nil, 0, false
	}
	return ft[funcOff:], entry, true
}

// chain returns the inlined calls at pc, innermost first: each callee's
// name and the PC standing for its position (pc itself for the innermost,
// then the call site in its parent). The last PC returned is where the
// outer function's own frame is; with nothing inlined, chain returns nil.
func (g *goInline) chain(pc uint64) (names []string, pcs []uint64) {
	f, entry, ok := g.funcAt(pc)
	if !ok {
		return nil, nil
	}
	npcdata := g.bo.Uint32(f[28:])
	nfuncdata := uint32(f[43])
	if npcdata <= pcdataInlTreeIndex || nfuncdata <= funcdataInlTree {
		return nil, nil
	}
	if uint64(funcFixedSize)+4*uint64(npcdata+nfuncdata) > uint64(len(f)) {
		return nil, nil
	}
	table := g.bo.Uint32(f[funcFixedSize+4*pcdataInlTreeIndex:])
	tree := g.bo.Uint32(f[funcFixedSize+4*npcdata+4*funcdataInlTree:])
	if table == 0 || tree == ^uint32(0) {
		return nil, nil
	}
	for depth := 0; depth < 64; depth++ {
		idx, ok := g.pcvalue(table, entry, pc)
		if !ok || idx < 0 {
			break
		}
		at := uint64(tree) + uint64(idx)*inlinedCallSize
		if at+inlinedCallSize > uint64(len(g.gofunc)) {
			return nil, nil
		}
		ic := g.gofunc[at:]
		names = append(names, g.name(int32(g.bo.Uint32(ic[4:]))))
		pcs = append(pcs, pc)
		pc = entry + uint64(int64(int32(g.bo.Uint32(ic[8:]))))
	}
	if names == nil {
		return nil, nil
	}
	return names, append(pcs, pc)
}

// pcvalue decodes the PC-value table at off for the function at entry
// and returns its value at pc (runtime.pcvalue).
func (g *goInline) pcvalue(off uint32, entry, target uint64) (int32, bool) {
	if uint64(off) >= uint64(len(g.pctab)) {
		return 0, false
	}
	p := g.pctab[off:]
	pc, val := entry, int32(-1)
	for first := true; ; first = false {
		uv, n := binary.Uvarint(p)
		if n <= 0 || uv == 0 && !first {
			return 0, false
		}
		p = p[n:]
		v := uint32(uv)
		val += int32(-(v & 1) ^ (v >> 1))
		pcd, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		pc += pcd * g.quantum
		if target < pc {
			return val, true
		}
	}
}

func (g *goInline) name(off int32) string {
	if s, ok := g.names[off]; ok {
		return s
	}
	var s string
	if off >= 0 && int(off) < len(g.funcnametab) {
		b := g.funcnametab[off:]
		if i := bytes.IndexByte(b, 0); i >= 0 {
			s = string(b[:i])
		}
	}
	if len(g.names) >= maxCache {
		clear(g.names)
	}
	g.names[off] = s
	return s
}
