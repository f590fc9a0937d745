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
	"sync"

	"github.com/ianlancetaylor/demangle"
	"golang.org/x/sys/unix"
)

// A module is one ELF file mapped by one or more processes, opened once and
// shared. The file stays open while a process that maps it is cached, so a
// process that exits, or a file deleted or renamed over on disk, still
// symbolizes from what was mapped (a file truncated or rewritten in place
// gives unnamed frames). Its tables are parsed on the first lookup.
type module struct {
	name string // base name, for Frame.Module
	path string // as the process saw it
	r    io.ReaderAt
	c    io.Closer // nil for a module read into memory (the vDSO)
	key  fileKey
	refs int
	// debugDirs are where to look for a separate debug file by build id
	// (…/.build-id/ab/cdef….debug): the process's root, then the host's.
	debugDirs []string

	once    sync.Once
	loadErr error
	buildID string
	loads   []elf.ProgHeader // PT_LOAD, to turn file offsets into addresses
	syms    []symbol         // STT_FUNC from .symtab and .dynsym, by address
	names   []string
	gotab   *gosym.Table // Go's pclntab, when present
	inline  *goInline    // Go 1.21+ inline trees, when readable
	lines   *lineTable   // DWARF line table, when present and not Go
	// noSymbols says the file has no .symtab, no Go table and no debug
	// file: only its exported (.dynsym) functions have names.
	noSymbols bool

	demangled map[int32]string
	// cache holds recent lookups: overruns of one span repeat the same
	// stacks, and a Go pclntab lookup decodes a table each time.
	cache map[uint64][]result
	// mapped are the file's regions mapped by read, unmapped by close.
	mapped [][]byte
}

type result struct {
	fn, file string
	line     int
}

// maxCache bounds a module's lookup cache; it is emptied when full.
const maxCache = 1 << 16

type symbol struct {
	addr, size uint64
	name       int32 // index into module.names
}

func newModule(f *os.File, path string) *module {
	return &module{name: filepath.Base(strings.TrimSuffix(path, " (deleted)")), path: path, r: f, c: f}
}

func (m *module) close() error {
	for _, b := range m.mapped {
		unix.Munmap(b)
	}
	m.mapped = nil
	if m.c == nil {
		return nil
	}
	return m.c.Close()
}

// read returns size bytes of the file from off. For a file it maps them
// read-only instead of copying: a Go binary's pclntab is megabytes, and
// mapped it shares the page cache with the processes running the binary.
func (m *module) read(off, size uint64) ([]byte, error) {
	// A corrupt header may claim any size: stay inside the file.
	if end, total := off+size, m.size(); end < off || total < 0 || end > uint64(total) {
		return nil, fmt.Errorf("read %s: %d bytes at %#x run past the end of the file", m.path, size, off)
	}
	if f, ok := m.r.(*os.File); ok {
		page := uint64(os.Getpagesize())
		start := off &^ (page - 1)
		b, err := unix.Mmap(int(f.Fd()), int64(start), int(off-start+size), unix.PROT_READ, unix.MAP_SHARED)
		if err == nil {
			m.mapped = append(m.mapped, b)
			return b[off-start:], nil
		}
	}
	b := make([]byte, size)
	if _, err := m.r.ReadAt(b, int64(off)); err != nil {
		return nil, err
	}
	return b, nil
}

// load parses the ELF file: build id, load segments, symbols, and either
// the Go pclntab or the DWARF line table.
func (m *module) load() error {
	m.once.Do(func() { m.loadErr = guard(m.parse) })
	return m.loadErr
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

func (m *module) parse() error {
	ef, err := elf.NewFile(m.r)
	if err != nil {
		return fmt.Errorf("read elf %s: %w", m.path, err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			m.loads = append(m.loads, p.ProgHeader)
		}
	}
	m.buildID = readBuildID(ef)
	m.readSymbols(ef)
	if gt, err := readGoTable(ef, m.read); err == nil {
		m.gotab = gt.tab
		m.inline = newGoInline(ef, m.r, m.read, gt.data, gt.addr, gt.text)
	} else if !errors.Is(err, errNoPclntab) {
		return fmt.Errorf("read go pclntab %s: %w", m.path, err)
	}
	if m.gotab == nil {
		// DWARF is optional: a binary without it still has symbols.
		if d, err := ef.DWARF(); err == nil {
			m.lines = newLineTable(d)
		} else if ef.Section(".symtab") == nil {
			m.noSymbols = !m.readDebugFile(ef)
		}
	}
	return nil
}

// readDebugFile adds the symbols and lines of a stripped binary's separate
// debug file (Debian's *-dbgsym packages, Fedora's debuginfo), found by GNU
// build id under /usr/lib/debug/.build-id in the process's root or the
// host's. Its addresses are the binary's own.
func (m *module) readDebugFile(ef *elf.File) bool {
	if _, err := hex.DecodeString(m.buildID); err != nil || len(m.buildID) < 4 {
		return false // no GNU build id
	}
	rel := filepath.Join(".build-id", m.buildID[:2], m.buildID[2:]+".debug")
	for _, dir := range m.debugDirs {
		df, err := elf.Open(filepath.Join(dir, rel))
		if err != nil {
			continue
		}
		m.readSymbols(df)
		if d, err := df.DWARF(); err == nil {
			m.lines = newLineTable(d)
			// The line table is built lazily from df, which stays open
			// until then; the module keeps it to close.
			m.c = multiCloser{m.c, df}
		} else {
			df.Close()
		}
		return true
	}
	return false
}

type multiCloser []io.Closer

func (mc multiCloser) Close() error {
	var errs []error
	for _, c := range mc {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// fileOffsetToAddr turns a file offset into the address the ELF file's own
// tools (symbols, DWARF, addr2line) use.
func (m *module) fileOffsetToAddr(off uint64) (uint64, bool) {
	for _, p := range m.loads {
		if off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}

// size returns the file's size, or -1.
func (m *module) size() int64 {
	switch r := m.r.(type) {
	case *os.File:
		if st, err := r.Stat(); err == nil {
			return st.Size()
		}
	case interface{ Size() int64 }:
		return r.Size()
	}
	return -1
}

// lookup symbolizes one address of the module (an ELF virtual address):
// the calls inlined there, innermost first, then the function the address
// is in. It never returns an empty slice; callers must not modify it.
func (m *module) lookup(addr uint64) []result {
	if r, ok := m.cache[addr]; ok {
		return r
	}
	var res []result
	if err := guard(func() error { res = m.resolve(addr); return nil }); err != nil || len(res) == 0 {
		res = []result{{}}
	}
	if m.cache == nil || len(m.cache) >= maxCache {
		m.cache = make(map[uint64][]result)
	}
	m.cache[addr] = res
	return res
}

func (m *module) resolve(addr uint64) []result {
	if m.gotab != nil {
		if _, _, f := m.gotab.PCToLine(addr); f != nil {
			var res []result
			names, pcs := []string(nil), []uint64{addr}
			if m.inline != nil {
				if n, p := m.inline.chain(addr); n != nil {
					names, pcs = append(n, f.Name), p
				}
			}
			if names == nil {
				names = []string{f.Name}
			}
			for i, name := range names {
				file, line, _ := m.gotab.PCToLine(pcs[i])
				if line <= 0 || file == "" {
					// gosym recovers from an unreadable table with -1 and "".
					file, line = "", 0
				}
				res = append(res, result{name, file, line})
			}
			return res
		}
	}
	r := result{fn: m.symbolAt(addr)}
	if m.lines != nil && r.fn != "" {
		r.file, r.line = m.lines.lookup(addr)
	}
	return []result{r}
}

// symbolAt returns the name of the function symbol holding addr, demangled.
func (m *module) symbolAt(addr uint64) string {
	i := sort.Search(len(m.syms), func(i int) bool { return m.syms[i].addr > addr }) - 1
	if i < 0 {
		return ""
	}
	s := m.syms[i]
	if s.size != 0 && addr >= s.addr+s.size {
		return ""
	}
	name := m.names[s.name]
	if !strings.HasPrefix(name, "_Z") {
		return name
	}
	if d, ok := m.demangled[s.name]; ok {
		return d
	}
	d := demangle.Filter(name, demangle.NoParams)
	if m.demangled == nil {
		m.demangled = map[int32]string{}
	}
	m.demangled[s.name] = d
	return d
}

func (m *module) readSymbols(ef *elf.File) {
	index := map[string]int32{}
	add := func(syms []elf.Symbol) {
		for _, s := range syms {
			t := elf.ST_TYPE(s.Info)
			if (t != elf.STT_FUNC && t != elf.STT_GNU_IFUNC) || s.Value == 0 || s.Section == elf.SHN_UNDEF {
				continue
			}
			n, ok := index[s.Name]
			if !ok {
				n = int32(len(m.names))
				m.names = append(m.names, s.Name)
				index[s.Name] = n
			}
			m.syms = append(m.syms, symbol{addr: s.Value, size: s.Size, name: n})
		}
	}
	if syms, err := ef.Symbols(); err == nil {
		add(syms)
	}
	if syms, err := ef.DynamicSymbols(); err == nil {
		add(syms)
	}
	// Sort by address; among aliases at one address prefer the sized one
	// with the shortest name (e.g. "read" over "__libc_read").
	sort.SliceStable(m.syms, func(i, j int) bool {
		a, b := m.syms[i], m.syms[j]
		if a.addr != b.addr {
			return a.addr < b.addr
		}
		if (a.size == 0) != (b.size == 0) {
			return a.size != 0
		}
		return len(m.names[a.name]) < len(m.names[b.name])
	})
	out := m.syms[:0]
	for i, s := range m.syms {
		if i > 0 && s.addr == out[len(out)-1].addr {
			continue
		}
		out = append(out, s)
	}
	m.syms = out
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

// readGoTable reads a Go binary's pclntab: from the .gopclntab section, or,
// when the section headers are stripped, by finding the table's header in
// the read-only segments. The table survives "go build -ldflags=-s -w",
// which drops only .symtab and DWARF.
// A goTab is a Go binary's pclntab: the parsed table, its bytes, the
// address they are mapped at and the text start it is relative to.
type goTab struct {
	tab        *gosym.Table
	data       []byte
	addr, text uint64
}

func readGoTable(ef *elf.File, read func(off, size uint64) ([]byte, error)) (goTab, error) {
	if s := ef.Section(".gopclntab"); s != nil && s.Type != elf.SHT_NOBITS {
		data, err := read(s.Offset, s.Size)
		if err != nil {
			return goTab{}, err
		}
		var text uint64
		if t := ef.Section(".text"); t != nil {
			text = t.Addr
		}
		tab, text, err := goTable(ef, data, text)
		return goTab{tab, data, s.Addr, text}, err
	}
	if len(ef.Sections) > 0 && ef.Section(".go.buildinfo") == nil && ef.Section(".note.go.buildid") == nil {
		return goTab{}, errNoPclntab
	}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X != 0 || p.Filesz == 0 {
			continue
		}
		data, err := read(p.Off, p.Filesz)
		if err != nil {
			return goTab{}, err
		}
		for off := 0; ; {
			i := findPclntab(data[off:], ef.ByteOrder)
			if i < 0 {
				break
			}
			if tab, text, err := goTable(ef, data[off+i:], 0); err == nil {
				return goTab{tab, data[off+i:], p.Vaddr + uint64(off+i), text}, nil
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

func goTable(ef *elf.File, data []byte, text uint64) (*gosym.Table, uint64, error) {
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
	once  sync.Once
	d     *dwarf.Data
	rows  []lineRow
	files []string
}

type lineRow struct {
	addr uint64
	file int32 // index into files; -1 ends a sequence
	line int32
}

func newLineTable(d *dwarf.Data) *lineTable { return &lineTable{d: d} }

func (t *lineTable) build() {
	index := map[string]int32{}
	r := t.d.Reader()
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag != dwarf.TagCompileUnit {
			r.SkipChildren()
			continue
		}
		compDir, _ := e.Val(dwarf.AttrCompDir).(string)
		lr, err := t.d.LineReader(e)
		r.SkipChildren()
		if err != nil || lr == nil {
			continue
		}
		var le dwarf.LineEntry
		for lr.Next(&le) == nil {
			if le.EndSequence {
				t.rows = append(t.rows, lineRow{addr: le.Address, file: -1})
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
				n = int32(len(t.files))
				t.files = append(t.files, name)
				index[name] = n
			}
			t.rows = append(t.rows, lineRow{addr: le.Address, file: n, line: int32(le.Line)})
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
	t.d = nil
}

func (t *lineTable) lookup(addr uint64) (string, int) {
	t.once.Do(t.build)
	i := sort.Search(len(t.rows), func(i int) bool { return t.rows[i].addr > addr }) - 1
	if i < 0 || t.rows[i].file < 0 {
		return "", 0
	}
	return t.files[t.rows[i].file], int(t.rows[i].line)
}
