package symbolize

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/internal/elfread"
	"github.com/spanwatch/spanwatch/internal/userfile"
)

// tables are what parsing one file produced: everything a lookup reads.
// A parser builds them on a goroutine of its own (see module.load); once
// handed over they are only read, and freed once.
type tables struct {
	buildID string
	loads   []elf.ProgHeader // PT_LOAD, to turn file offsets into addresses
	syms    []symbol         // STT_FUNC from .symtab and .dynsym, by address
	strtabs [][]byte         // the string tables symbols name into
	gotab   *gosym.Table     // Go's pclntab, when present
	inline  *goInline        // Go 1.21+ inline trees, when readable
	lines   *lineTable       // DWARF line table, when present and not Go
	// noSymbols says the file has no .symtab, no Go table and no debug
	// file: only its exported (.dynsym) functions have names.
	noSymbols bool

	budget  *budget
	mapped  [][]byte    // unmapped by free
	closers []io.Closer // debug files, closed by free
}

type symbol struct {
	addr, size uint64
	name       uint32 // offset into strtabs[tab]
	tab        uint8
}

func (t *tables) name(s symbol) string { return elfread.Name(t.strtabs[s.tab], s.name) }

func (t *tables) nameLen(s symbol) int {
	b := t.strtabs[s.tab]
	if uint64(s.name) >= uint64(len(b)) {
		return 0
	}
	if i := bytes.IndexByte(b[s.name:], 0); i >= 0 {
		return i
	}
	return len(b) - int(s.name)
}

// free unmaps, closes and returns the memory the tables took.
func (t *tables) free() {
	for _, b := range t.mapped {
		unix.Munmap(b)
	}
	t.mapped = nil
	for _, c := range t.closers {
		c.Close()
	}
	t.closers = nil
	t.budget.release()
}

// A parser reads one file into tables within its limits.
type parser struct {
	path  string
	r     io.ReaderAt
	file  *userfile.File // nil for memory (the vDSO)
	lim   Limits
	t     *tables
	debug *debugPlace // where to look for a separate debug file; nil: nowhere
}

// guard runs fn, turning a fault on mapped memory into an error: a mapped
// file truncated or rewritten on disk (after the process that ran it
// exited) faults instead of reading stale bytes.
func guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("read mapped file: %v", r)
		}
	}()
	return fn()
}

// read returns size bytes of the file from off: mapped read-only from a
// file on a local file system (a Go binary's pclntab is megabytes, and
// mapped it shares the page cache with the processes running the binary),
// else read into memory within the section cap and the budget.
func (p *parser) read(off, size uint64) ([]byte, error) {
	// A corrupt header may claim any size: stay inside the file.
	if end, total := off+size, p.size(); end < off || total < 0 || end > uint64(total) {
		return nil, fmt.Errorf("read %s: %d bytes at %#x run past the end of the file", p.path, size, off)
	}
	if p.file != nil && p.file.Info.Local {
		if size > uint64(p.lim.Mapped) {
			p.t.budget.hitCount(userfile.ReasonSection)
			return nil, fmt.Errorf("read %s: %d bytes at %#x, more than the %d mapped at once", p.path, size, off, p.lim.Mapped)
		}
		page := uint64(os.Getpagesize())
		start := off &^ (page - 1)
		var b []byte
		var merr error
		if err := controlFd(p.file.File, func(fd int) {
			b, merr = unix.Mmap(fd, int64(start), int(off-start+size), unix.PROT_READ, unix.MAP_SHARED)
		}); err == nil && merr == nil {
			p.t.mapped = append(p.t.mapped, b)
			return b[off-start:], nil
		}
	}
	if size > uint64(p.lim.Section) {
		p.t.budget.hitCount(userfile.ReasonSection)
		return nil, fmt.Errorf("read %s: %d bytes at %#x, more than the %d read at once", p.path, size, off, p.lim.Section)
	}
	if !p.t.budget.take(int64(size)) {
		return nil, fmt.Errorf("read %s: %d bytes: no room left in the symbolizer's memory budget", p.path, size)
	}
	b := make([]byte, size)
	if _, err := p.r.ReadAt(b, int64(off)); err != nil {
		return nil, err
	}
	return b, nil
}

// view is read for elfread: sections stored as they are come mapped where
// the file can be.
func (p *parser) view() func(off, size uint64) ([]byte, error) {
	if p.file == nil || !p.file.Info.Local {
		return nil
	}
	return p.read
}

// controlFd runs fn with the file's descriptor, held open meanwhile.
func controlFd(f *os.File, fn func(fd int)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { fn(int(fd)) })
}

// size returns the file's size, or -1.
func (p *parser) size() int64 {
	if p.file != nil {
		return p.file.Info.Size
	}
	if s, ok := p.r.(interface{ Size() int64 }); ok {
		return s.Size()
	}
	return -1
}

// parse reads the ELF file: build id, load segments, symbols, and either
// the Go pclntab or the DWARF line table, each within its cap.
func (p *parser) parse() (*tables, error) {
	err := guard(func() error {
		ef, err := elfread.NewFile(p.r)
		if err != nil {
			return fmt.Errorf("read elf %s: %w", p.path, err)
		}
		t := p.t
		for _, ph := range ef.Progs {
			if ph.Type == elf.PT_LOAD {
				t.loads = append(t.loads, ph.ProgHeader)
			}
		}
		t.buildID = readBuildID(ef)
		p.readSymbols(ef)
		if gt, err := p.readGoTable(ef); err == nil {
			t.gotab = gt.tab
			t.inline = newGoInline(ef, p, gt.data, gt.addr, gt.text)
		} else if !errors.Is(err, errNoPclntab) {
			return fmt.Errorf("read go pclntab %s: %w", p.path, err)
		}
		if t.gotab == nil {
			// DWARF is optional: a binary without it still has symbols.
			if !p.readLines(ef) && ef.Section(".symtab") == nil {
				t.noSymbols = !p.readDebugFile(ef)
			}
		}
		sortSymbols(t)
		return nil
	})
	if err != nil {
		p.t.free()
		return nil, err
	}
	return p.t, nil
}

// readLines builds the line table from the file's DWARF, when it has some.
func (p *parser) readLines(ef *elf.File) bool {
	d, capped, err := elfread.DWARF(ef, p.lim.Section, p.view(), p.t.budget.grant)
	if capped {
		p.t.budget.hit(userfile.ReasonSection)
	}
	if err != nil {
		return false
	}
	p.t.lines = buildLines(d, p.lim.LineRows, p.t.budget)
	return true
}

// readSymbols adds the function symbols of .symtab and .dynsym, read a
// chunk at a time, up to the symbol cap.
func (p *parser) readSymbols(ef *elf.File) {
	t := p.t
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		table := elfread.Table(ef, typ)
		strs := elfread.StringTable(ef, table)
		if table == nil || strs == nil || len(t.strtabs) >= 255 {
			continue
		}
		strtab, cut, err := elfread.ReadSection(strs, p.lim.Section, p.view(), t.budget.grant)
		if err != nil {
			continue
		}
		if cut {
			t.budget.hit(userfile.ReasonSection)
		}
		tab := uint8(len(t.strtabs))
		t.strtabs = append(t.strtabs, strtab)
		full := false
		capped, _ := elfread.Symbols(ef, table, p.lim.Section, func(s elfread.Symbol) bool {
			typ := s.Type()
			if (typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC) || s.Value == 0 || s.Section == elf.SHN_UNDEF {
				return true
			}
			if len(t.syms) >= p.lim.Symbols {
				full = true
				return false
			}
			if cap(t.syms) == len(t.syms) {
				// Grow by half, within the budget.
				n := max(1024, len(t.syms)/2)
				if !t.budget.take(int64(n) * symbolSize) {
					full = true
					return false
				}
				t.syms = append(make([]symbol, 0, len(t.syms)+n), t.syms...)
			}
			t.syms = append(t.syms, symbol{addr: s.Value, size: s.Size, name: s.Name, tab: tab})
			return true
		})
		if capped {
			t.budget.hit(userfile.ReasonSymbols)
		}
		if full {
			t.budget.hitCount(userfile.ReasonSymbols)
			return
		}
	}
}

const symbolSize = 24 // bytes of one symbol

// sortSymbols sorts by address and keeps one symbol per address: among
// aliases the sized one with the shortest name (e.g. "read" over
// "__libc_read").
func sortSymbols(t *tables) {
	sort.SliceStable(t.syms, func(i, j int) bool {
		a, b := t.syms[i], t.syms[j]
		if a.addr != b.addr {
			return a.addr < b.addr
		}
		if (a.size == 0) != (b.size == 0) {
			return a.size != 0
		}
		return t.nameLen(a) < t.nameLen(b)
	})
	out := t.syms[:0]
	for i, s := range t.syms {
		if i > 0 && s.addr == out[len(out)-1].addr {
			continue
		}
		out = append(out, s)
	}
	t.syms = out
}

// readBuildID returns the GNU build id (NT_GNU_BUILD_ID) in hex, or else
// the Go build id, or "".
func readBuildID(ef *elf.File) string {
	var gnu, goID string
	scan := func(r io.Reader) {
		b, err := io.ReadAll(io.LimitReader(r, 1<<16))
		if err != nil {
			return
		}
		for len(b) >= 12 {
			namesz := ef.ByteOrder.Uint32(b[0:])
			descsz := ef.ByteOrder.Uint32(b[4:])
			typ := ef.ByteOrder.Uint32(b[8:])
			nameEnd := 12 + align4(namesz)
			descEnd := nameEnd + align4(descsz)
			if descEnd > uint64(len(b)) || namesz == 0 {
				return
			}
			name := string(bytes.TrimRight(b[12:12+namesz], "\x00"))
			desc := b[nameEnd : nameEnd+uint64(descsz)]
			switch {
			case name == "GNU" && typ == 3 && gnu == "":
				gnu = hex.EncodeToString(desc)
			case name == "Go" && typ == 4 && goID == "":
				goID = string(desc)
			}
			b = b[descEnd:]
		}
	}
	if len(ef.Sections) > 0 {
		for _, s := range ef.Sections {
			if s.Type == elf.SHT_NOTE {
				scan(s.Open())
			}
		}
	} else {
		for _, p := range ef.Progs {
			if p.Type == elf.PT_NOTE {
				scan(p.Open())
			}
		}
	}
	if gnu != "" {
		return gnu
	}
	return goID
}

func align4(n uint32) uint64 { return (uint64(n) + 3) &^ 3 }

var errNoPclntab = errors.New("no go pclntab")

// A goTab is a Go binary's pclntab: the parsed table, its bytes, the
// address they are mapped at and the text start it is relative to.
type goTab struct {
	tab        *gosym.Table
	data       []byte
	addr, text uint64
}

// readGoTable reads a Go binary's pclntab: from the .gopclntab section, or,
// when the section headers are stripped, by finding the table's header in
// the read-only segments. The table survives "go build -ldflags=-s -w",
// which drops only .symtab and DWARF.
func (p *parser) readGoTable(ef *elf.File) (goTab, error) {
	if s := ef.Section(".gopclntab"); s != nil && s.Type != elf.SHT_NOBITS {
		data, err := p.read(s.Offset, s.Size)
		if err != nil {
			return goTab{}, err
		}
		var text uint64
		if t := ef.Section(".text"); t != nil {
			text = t.Addr
		}
		tab, text, err := p.goTable(ef, data, s.Addr, text)
		return goTab{tab, data, s.Addr, text}, err
	}
	if len(ef.Sections) > 0 && ef.Section(".go.buildinfo") == nil && ef.Section(".note.go.buildid") == nil {
		return goTab{}, errNoPclntab
	}
	for _, ph := range ef.Progs {
		if ph.Type != elf.PT_LOAD || ph.Flags&elf.PF_X != 0 || ph.Filesz == 0 {
			continue
		}
		data, err := p.read(ph.Off, ph.Filesz)
		if err != nil {
			return goTab{}, err
		}
		for off := 0; ; {
			i := findPclntab(data[off:], ef.ByteOrder)
			if i < 0 {
				break
			}
			if tab, text, err := p.goTable(ef, data[off+i:], ph.Vaddr+uint64(off+i), 0); err == nil {
				return goTab{tab, data[off+i:], ph.Vaddr + uint64(off+i), text}, nil
			}
			off += i + 4
		}
	}
	return goTab{}, errNoPclntab
}

// pclntab magics: Go 1.20+, 1.18, 1.16.
var pclnMagics = []uint32{0xfffffff1, 0xfffffff0, 0xfffffffa}

// findPclntab returns the index of the first plausible pclntab header in
// b: a magic, two zero bytes, the instruction quantum and the pointer size.
func findPclntab(b []byte, bo binary.ByteOrder) int {
	best := -1
	for _, magic := range pclnMagics {
		var pat [4]byte
		bo.PutUint32(pat[:], magic)
		for off := 0; off+8 <= len(b); {
			i := bytes.Index(b[off:], pat[:])
			if i < 0 || off+i+8 > len(b) {
				break
			}
			j := off + i
			h := b[j : j+8]
			if h[4] == 0 && h[5] == 0 && (h[6] == 1 || h[6] == 2 || h[6] == 4) && (h[7] == 4 || h[7] == 8) {
				if best < 0 || j < best {
					best = j
				}
				break
			}
			off = j + 1
		}
	}
	return best
}

// goFuncSize is about what debug/gosym keeps per function (a Func and its
// Sym), for the budget.
const goFuncSize = 200

// goTable parses a pclntab, at addr, after checking its function count: debug/gosym
// builds a Func and a Sym for each function the header claims, so a table
// claiming more than the symbol cap is not used, and the rest is taken
// from the budget first.
func (p *parser) goTable(ef *elf.File, data []byte, addr, text uint64) (*gosym.Table, uint64, error) {
	nfunc, ok := elfread.GoFuncs(data, ef.ByteOrder)
	if !ok {
		return nil, 0, errNoPclntab
	}
	if nfunc > uint64(p.lim.Symbols) {
		p.t.budget.hitCount(userfile.ReasonGoFuncs)
		return nil, 0, fmt.Errorf("pclntab of %d functions, more than the %d this reader keeps", nfunc, p.lim.Symbols)
	}
	// runtime.text as the table's header (Go 1.18 to about 1.20) or the
	// moduledata records it is right where .text's start is not: in an
	// externally linked binary (cgo), whose C start files come before the
	// Go text.
	if h := elfread.GoTextStart(data, ef.ByteOrder); h != 0 {
		text = h
	} else if h := elfread.GoModuleText(ef, data, addr, p.read); h != 0 {
		text = h
	}
	// Two tables are built when the text start must be found first.
	need := int64(nfunc) * goFuncSize
	if text == 0 {
		need *= 2
	}
	if !p.t.budget.take(need) {
		return nil, 0, fmt.Errorf("pclntab of %d functions: no room left in the symbolizer's memory budget", nfunc)
	}
	if text == 0 {
		// Without section headers nothing names runtime.text (the Go
		// 1.18+ header's textStart field holds 0 in the file). Function
		// entries are relative to it, and the ELF entry point is the
		// function _rt0_ARCH_linux, so that function's offset gives it.
		tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, 0))
		if err != nil {
			return nil, 0, err
		}
		for _, f := range tab.Funcs {
			if strings.HasPrefix(f.Name, "_rt0_") && strings.HasSuffix(f.Name, "_linux") && ef.Entry >= f.Entry {
				text = ef.Entry - f.Entry
				break
			}
		}
		p.t.budget.give(need / 2)
		if text == 0 {
			return nil, 0, fmt.Errorf("pclntab without section headers: no _rt0_ entry function to place the text segment")
		}
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text))
	if err != nil {
		return nil, 0, err
	}
	if len(tab.Funcs) == 0 {
		return nil, 0, errNoPclntab
	}
	return tab, text, nil
}

// A lineTable is a module's DWARF line rows from all compilation units,
// sorted by address, so one binary search answers a lookup.
type lineTable struct {
	rows  []lineRow
	files []string
}

type lineRow struct {
	addr uint64
	file int32 // index into files; -1 ends a sequence
	line int32
}

const lineRowSize = 16 // bytes of one lineRow

// buildLines reads every unit's line rows, up to maxRows and the budget.
func buildLines(d *dwarf.Data, maxRows int, b *budget) *lineTable {
	t := &lineTable{}
	index := map[string]int32{}
	r := d.Reader()
	full := false
	add := func(row lineRow) bool {
		if len(t.rows) >= maxRows {
			b.hitCount(userfile.ReasonLines)
			return false
		}
		if cap(t.rows) == len(t.rows) {
			n := max(4096, len(t.rows)/2)
			if !b.take(int64(n) * lineRowSize) {
				return false
			}
			t.rows = append(make([]lineRow, 0, len(t.rows)+n), t.rows...)
		}
		t.rows = append(t.rows, row)
		return true
	}
	for !full {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag != dwarf.TagCompileUnit {
			r.SkipChildren()
			continue
		}
		compDir, _ := e.Val(dwarf.AttrCompDir).(string)
		lr, err := d.LineReader(e)
		r.SkipChildren()
		if err != nil || lr == nil {
			continue
		}
		var le dwarf.LineEntry
		for lr.Next(&le) == nil {
			if le.EndSequence {
				if full = !add(lineRow{addr: le.Address, file: -1}); full {
					break
				}
				continue
			}
			if le.File == nil {
				continue
			}
			name := le.File.Name
			if !filepath.IsAbs(name) && compDir != "" {
				name = filepath.Join(compDir, name)
			}
			n, ok := index[name]
			if !ok {
				if !b.take(int64(len(name)) + 32) {
					full = true
					break
				}
				n = int32(len(t.files))
				t.files = append(t.files, name)
				index[name] = n
			}
			if full = !add(lineRow{addr: le.Address, file: n, line: int32(le.Line)}); full {
				break
			}
		}
	}
	// A stable sort keeps a sequence's end marker before the next
	// sequence's first row at the same address; drop such markers so the
	// row that starts code wins.
	sort.SliceStable(t.rows, func(i, j int) bool { return t.rows[i].addr < t.rows[j].addr })
	out := t.rows[:0]
	for _, r := range t.rows {
		if n := len(out); n > 0 && out[n-1].addr == r.addr && out[n-1].file == -1 {
			out[n-1] = r
			continue
		}
		out = append(out, r)
	}
	t.rows = out
	return t
}

func (t *lineTable) lookup(addr uint64) (string, int) {
	i := sort.Search(len(t.rows), func(i int) bool { return t.rows[i].addr > addr }) - 1
	if i < 0 || t.rows[i].file < 0 {
		return "", 0
	}
	return t.files[t.rows[i].file], int(t.rows[i].line)
}
