//go:build linux

package symbolize

import (
	"debug/elf"
	"os"
	"testing"
)

// BenchmarkParse measures a file's first symbolization, per MB of what is
// read: opening it, parsing its tables and one lookup, through the public
// API only (an anchor, then a stack of a process that never existed), so
// that the same file of this benchmark runs unchanged against an older
// symbolizer, on the same inputs:
//
//   - go: a Go binary's pclntab and symbol table
//     ($SYMBOLIZE_BENCH_GO, default this test binary);
//   - libc+dbg: /lib/x86_64-linux-gnu/libc.so.6 (stripped: dynamic
//     symbols) with its separate debug file by build id, symbols and DWARF
//     lines, as Debian's libc6-dbg installs it;
//   - bomb: a C program whose .debug_info is a zlib bomb (1 MiB inflating
//     to 1 GiB; $SYMBOLIZE_BENCH_BOMB, built by TestHostileMemoryBombs'
//     recipe when unset).
//
// The figures before and after the caps (BENCHMARKS.md) come from this
// file run in both trees, in turn, with -count.
func BenchmarkParse(b *testing.B) {
	goBin := os.Getenv("SYMBOLIZE_BENCH_GO")
	if goBin == "" {
		goBin, _ = os.Executable()
	}
	inputs := []struct {
		name, path, symbol string
		extra              []string // files read besides path (the debug file)
	}{
		{"go", goBin, "runtime.main", nil},
		{"libc+dbg", "/lib/x86_64-linux-gnu/libc.so.6", "malloc", nil},
	}
	if bomb := os.Getenv("SYMBOLIZE_BENCH_BOMB"); bomb != "" {
		inputs = append(inputs, struct {
			name, path, symbol string
			extra              []string
		}{"bomb", bomb, "slow", nil})
	}
	for _, in := range inputs {
		b.Run(in.name, func(b *testing.B) {
			addr, size := anchorAddr(b, in.path, in.symbol)
			if in.name == "libc+dbg" {
				dbg := debugFileOf(b, in.path)
				st, err := os.Stat(dbg)
				if err != nil {
					b.Skipf("skipping: no debug file for libc (apt install libc6-dbg): %v", err)
				}
				size += st.Size()
			}
			b.SetBytes(size)
			b.ReportAllocs()
			for range b.N {
				s := New(Config{})
				if err := s.AddAnchor(Anchor{Path: in.path, Addr: addr}); err != nil {
					b.Fatal(err)
				}
				frames, _ := s.User(1<<30, []uint64{addr})
				if len(frames) == 0 || frames[0].Function == "" {
					b.Fatalf("%s at %#x: %+v", in.symbol, addr, frames)
				}
				s.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(float64(size)/(1<<20)), "ns/MB")
		})
	}
}

// anchorAddr returns the address of a function symbol of the file at path
// (from .symtab or .dynsym) and the file's size.
func anchorAddr(b *testing.B, path, symbol string) (uint64, int64) {
	b.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		b.Skipf("skipping: %v", err)
	}
	defer ef.Close()
	var addr uint64
	for _, get := range []func() ([]elf.Symbol, error){ef.Symbols, ef.DynamicSymbols} {
		syms, _ := get()
		for _, s := range syms {
			if s.Name == symbol && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
				addr = s.Value
			}
		}
	}
	if addr == 0 {
		if tab := ef.Section(".gopclntab"); tab != nil {
			b.Skipf("skipping: %s has no symbol table (set SYMBOLIZE_BENCH_GO to a Go binary built with one)", path)
		}
		b.Skipf("skipping: no %s in %s", symbol, path)
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return addr, st.Size()
}

// debugFileOf returns where the host's debug file of path would be.
func debugFileOf(b *testing.B, path string) string {
	b.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		b.Skipf("skipping: %v", err)
	}
	defer ef.Close()
	id := readBuildID(ef)
	if len(id) < 4 {
		b.Skipf("skipping: %s has no build id", path)
	}
	return "/usr/lib/debug/.build-id/" + id[:2] + "/" + id[2:] + ".debug"
}
