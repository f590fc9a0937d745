package funcs

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
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
// its frame descriptions for the ranges no symbol names. capped reports
// that a table was cut at its cap or more functions matched than kept.
func functions(ef *elf.File, filter *glob.Glob) (fns []Func, parts []span, capped, isGo bool, err error) {
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
		c, err := goFunctions(ef, s, keep)
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
		table := elfread.Table(ef, t.typ)
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
func goFunctions(ef *elf.File, s *elf.Section, keep func(Func) bool) (capped bool, err error) {
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
	text := goTextStart(data, ef.ByteOrder)
	if t := ef.Section(".text"); text == 0 && t != nil {
		text = t.Addr
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

// goTextStart returns the text start a Go 1.18+ pclntab's header records
// (runtime.text, which function entries are relative to), or 0. It is not
// the start of .text in an externally linked binary, where the C start
// files come first (Debian's prometheus: .text at 0x402340, runtime.text
// at 0x402440); debug/gosym takes it from its caller, not the header.
func goTextStart(data []byte, bo binary.ByteOrder) uint64 {
	if len(data) < 8 {
		return 0
	}
	magic := bo.Uint32(data)
	if magic != 0xfffffff0 && magic != 0xfffffff1 {
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
