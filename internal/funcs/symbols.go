package funcs

import (
	"debug/elf"
	"debug/gosym"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/ianlancetaylor/demangle"

	"github.com/spanwatch/spanwatch/internal/elfread"
	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/internal/userfile"
)

// span is an address range a named function covers.
type span struct{ addr, size uint64 }

// functions returns the functions of ef that filter keeps: from its Go
// function table when it has one, else from its symbol tables and then
// its frame descriptions for the ranges no symbol names. A file without
// a .symtab has the .symtab of debug (its separate debug file; nil:
// none) read in its place. capped reports that a table was cut at its
// cap or more functions matched than kept.
func functions(ef *elf.File, r io.ReaderAt, filter *glob.Glob, debug *elf.File) (fns []Func, parts []span, capped, isGo bool, err error) {
	keep := func(fn Func) bool {
		if len(fns) >= maxFuncs {
			capped = true
			return false
		}
		if filter != nil && !matches(filter, &fn) {
			return true
		}
		fns = append(fns, fn)
		return true
	}
	if s := ef.Section(".gopclntab"); s != nil && s.Type != elf.SHT_NOBITS {
		c, err := goFunctions(ef, r, s, keep)
		return fns, nil, capped || c, true, err
	}

	// Symbol tables: one function per address, a global name before a
	// local alias, .symtab's before .dynsym's.
	type named struct {
		Func
		global bool
	}
	byAddr := map[uint64]named{}
	found := false
	for _, t := range []struct {
		typ elf.SectionType
		src Source
	}{{elf.SHT_SYMTAB, SourceSymtab}, {elf.SHT_DYNSYM, SourceDynsym}} {
		ef := ef
		table := elfread.Table(ef, t.typ)
		if table == nil && t.typ == elf.SHT_SYMTAB && debug != nil {
			ef, table, t.src = debug, elfread.Table(debug, t.typ), SourceDebugSymtab
		}
		if table == nil {
			continue
		}
		found = true
		strs := elfread.StringTable(ef, table)
		if strs == nil {
			continue
		}
		strtab, cut, err := elfread.ReadSection(strs, maxTable, nil, nil)
		if err != nil {
			return nil, nil, false, false, fmt.Errorf("read %s: %w", strs.Name, err)
		}
		capped = capped || cut
		cut, err = elfread.Symbols(ef, table, maxTable, func(s elfread.Symbol) bool {
			if s.Type() != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Section >= elf.SHN_LORESERVE || s.Value == 0 {
				return true
			}
			global := elf.ST_BIND(s.Info) != elf.STB_LOCAL
			if old, ok := byAddr[s.Value]; ok && (old.global || !global) {
				return true
			}
			if _, ok := byAddr[s.Value]; !ok && len(byAddr) >= maxFuncs {
				capped = true
				return false
			}
			byAddr[s.Value] = named{Func{Name: elfread.Name(strtab, s.Name), Source: t.src, Addr: s.Value, Size: s.Size}, global}
			return true
		})
		if err != nil {
			return nil, nil, false, false, err
		}
		capped = capped || cut
	}
	spans := make([]span, 0, len(byAddr))
	for _, n := range byAddr {
		spans = append(spans, span{n.Addr, n.Size})
		if strings.Contains(n.Name, ".cold") {
			// gcc's name for the unlikely paths it moved out of a
			// function (NAME.cold, NAME.cold.N): a part, not a function.
			parts = append(parts, span{n.Addr, n.Size})
			continue
		}
		fn := n.Func
		if d := demangle.Filter(fn.Name, demangle.NoParams); d != fn.Name {
			fn.Demangled = d
		}
		keep(fn)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].addr < spans[j].addr })

	// Frame descriptions cover every function the compiler emitted,
	// static ones included, which a stripped binary names nowhere.
	c, ehErr := ehFunctions(ef, func(addr, size uint64, part bool) bool {
		if covered(spans, addr) {
			return true
		}
		found = true
		if part {
			if len(parts) >= maxFuncs {
				capped = true
				return false
			}
			parts = append(parts, span{addr, size})
			return true
		}
		return keep(Func{Source: SourceEHFrame, Addr: addr, Size: size})
	})
	capped = capped || c
	if ehErr != nil && !errors.Is(ehErr, errNoEHFrame) {
		return nil, nil, false, false, ehErr
	}
	if !found {
		return nil, nil, false, false, errNoFunctions
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].addr < parts[j].addr })
	return fns, parts, capped, false, nil
}

// matches says whether filter matches fn's name or demangled name, or,
// for an unnamed function, its address written 0x...
func matches(filter *glob.Glob, fn *Func) bool {
	if fn.Name == "" {
		return filter.Match(fn.DisplayName())
	}
	return filter.Match(fn.Name) || fn.Demangled != "" && filter.Match(fn.Demangled)
}

// covered says whether addr is inside one of spans (sorted by address).
func covered(spans []span, addr uint64) bool {
	i := sort.Search(len(spans), func(i int) bool { return spans[i].addr > addr })
	// Functions do not nest, but a zero-size symbol may sit at the same
	// address as a sized one: look back over a few.
	for j := i - 1; j >= 0 && j >= i-4; j-- {
		s := spans[j]
		if addr == s.addr || addr-s.addr < s.size {
			return true
		}
	}
	return false
}

// goFuncSize is about what debug/gosym keeps per function.
const goFuncSize = 200

// goFunctions passes each function of a Go binary's pclntab to keep until
// it returns false. debug/gosym builds a value per function the table's
// header claims, so the claim is checked against maxFuncs first.
func goFunctions(ef *elf.File, r io.ReaderAt, s *elf.Section, keep func(Func) bool) (capped bool, err error) {
	data, cut, err := elfread.ReadSection(s, maxTable, nil, nil)
	if err != nil {
		return false, fmt.Errorf("read .gopclntab: %w", err)
	}
	if cut {
		return true, fmt.Errorf(".gopclntab is larger than the %d bytes this reader accepts", maxTable)
	}
	n, ok := elfread.GoFuncs(data, ef.ByteOrder)
	if !ok {
		return false, errors.New(".gopclntab: not a Go 1.2+ function table")
	}
	if n > maxFuncs {
		userfile.Count(userfile.ReasonGoFuncs)
		return true, fmt.Errorf(".gopclntab of %d functions, more than the %d this reader accepts", n, maxFuncs)
	}
	text := goText(ef, r, data, s.Addr)
	if text == 0 {
		return false, errors.New(".gopclntab: cannot place the Go text: no runtime.text symbol, text start in the table's header or moduledata")
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text))
	if err != nil {
		return false, fmt.Errorf("read .gopclntab: %w", err)
	}
	for i := range tab.Funcs {
		f := &tab.Funcs[i]
		if f.End < f.Entry {
			continue
		}
		if !keep(Func{Name: f.Name, Source: SourcePclntab, Addr: f.Entry, Size: f.End - f.Entry}) {
			return true, nil
		}
	}
	return false, nil
}

// goText returns runtime.text, which a pclntab's function entries are
// relative to: from .symtab where it is kept, else from the table's
// header (Go 1.18 to about 1.20 fill it in), else from the moduledata
// (elfread.GoModuleText), else the start of .text, which is runtime.text
// in an internally linked binary. An externally linked one (cgo) puts
// the C start files first: Debian's prometheus has .text at 0x402340 and
// runtime.text at 0x402440.
func goText(ef *elf.File, r io.ReaderAt, pcln []byte, pclnAddr uint64) uint64 {
	if table := elfread.Table(ef, elf.SHT_SYMTAB); table != nil {
		if strs := elfread.StringTable(ef, table); strs != nil {
			if strtab, _, err := elfread.ReadSection(strs, maxTable, nil, nil); err == nil {
				var text uint64
				elfread.Symbols(ef, table, maxTable, func(s elfread.Symbol) bool {
					if elfread.NameIs(strtab, s.Name, "runtime.text") {
						text = s.Value
						return false
					}
					return true
				})
				if text != 0 {
					return text
				}
			}
		}
	}
	if text := elfread.GoTextStart(pcln, ef.ByteOrder); text != 0 {
		return text
	}
	read := func(off, size uint64) ([]byte, error) {
		if size > maxTable {
			return nil, fmt.Errorf("a segment of %d bytes, more than the %d read", size, maxTable)
		}
		b := make([]byte, size)
		if _, err := r.ReadAt(b, int64(off)); err != nil {
			return nil, err
		}
		return b, nil
	}
	if text := elfread.GoModuleText(ef, pcln, pclnAddr, read); text != 0 {
		return text
	}
	if t := ef.Section(".text"); t != nil {
		return t.Addr
	}
	return 0
}
