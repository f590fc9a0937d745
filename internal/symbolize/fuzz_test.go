package symbolize

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/internal/elfbuild"
)

// FuzzParsers feeds the /proc and perf map parsers arbitrary bytes: they
// read files other processes control (a JIT's perf map) and must never
// panic.
func FuzzParsers(f *testing.F) {
	f.Add([]byte("4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200 18446744073709551615 94000000000000 94000000100000 140700000000000 0 0"))
	f.Add([]byte("55ff155d4000-55ff155d9000 r-xp 00002000 fe:00 247026                     /usr/bin/cat\n"))
	f.Add([]byte("7f0000001000 40 jit_alpha\n0x10 0x20 LazyCompile:*beta foo.js:12\n"))
	f.Add([]byte("ffffffff81000000 T _text\nffffffffc0001000 t ext4_thing\t[ext4]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseStat(b)
		parseMaps(b)
		parseKallsyms(b)
		for line := range bytes.SplitSeq(b, []byte{'\n'}) {
			if e, _, ok := parsePerfMapLine(line); ok && e.end <= e.start {
				t.Errorf("perf map entry %+v from %q is empty", e, line)
			}
		}
		var total atomic.Int64
		pm := parsePerfMap(b, false, newBudget(1<<20, &total, 1<<20))
		for _, e := range pm.entries {
			if e.end <= e.start || uint64(e.name)+uint64(e.len) > uint64(len(pm.names)) {
				t.Errorf("perf map entry %+v out of its names (%d bytes)", e, len(pm.names))
			}
		}
		pm.free()
		if total.Load() != 0 {
			t.Errorf("%d bytes still taken after free", total.Load())
		}
	})
}

// fuzzLimits are small caps, so that the fuzz targets check them quickly.
var fuzzLimits = Limits{Section: 1 << 20, Mapped: 4 << 20, Symbols: 1 << 14, LineRows: 1 << 14, Module: 4 << 20, Memory: 8 << 20, PerfMap: 1 << 20}

// loadMem loads r as a module of s and looks addrs up in it; it reports
// the lookups, or nil when the module did not load.
func loadMem(t testing.TB, s *Symbolizer, r io.ReaderAt, addrs ...uint64) [][]result {
	t.Helper()
	m := newMemModule(s, "fuzz", r, fileKey{})
	defer m.close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out [][]result
	err := m.with(ctx, func(*tables) {
		for _, a := range addrs {
			out = append(out, m.lookupLocked(a))
		}
	})
	if err != nil {
		return nil
	}
	return out
}

// FuzzModule loads arbitrary bytes as an ELF file and looks addresses up
// in it: a corrupt or hostile binary must give errors or unnamed frames,
// never a panic.
func FuzzModule(f *testing.F) {
	if exe, err := os.ReadFile("/proc/self/exe"); err == nil && len(exe) > 0 {
		// The head of a real Go binary: headers and the start of its
		// tables, truncated.
		f.Add(exe[:min(len(exe), 1<<16)])
	}
	f.Add([]byte("\x7fELF\x02\x01\x01\x00"))
	s := New(Config{Limits: fuzzLimits})
	defer s.Close()
	f.Fuzz(func(t *testing.T, b []byte) {
		for i, res := range loadMem(t, s, bytes.NewReader(b), 0, 0x401000, 0x1000, ^uint64(0)) {
			if len(res) == 0 {
				t.Errorf("lookup %d returned no result", i)
			}
		}
		if n := s.Memory(); n != 0 {
			t.Errorf("%d bytes still taken after the module closed", n)
		}
	})
}

// FuzzModuleSizes builds ELF files whose sizes the fuzzer chooses, as
// holes of a sparse file of up to 16 GiB: a symbol table, its string
// table, a compressed .debug_info that inflates to any size while its
// header claims another, a Go pclntab claiming any number of functions,
// and the section header count. Loading one must stay within the caps: the
// module's budget never past Limits.Module, and what the load allocates in
// all within a bound set by the caps, not by the sizes.
func FuzzModuleSizes(f *testing.F) {
	f.Add(uint32(128<<20), uint32(0), uint32(0), uint32(0), uint64(0), uint16(0))     // the sparse .symtab
	f.Add(uint32(256<<20), uint32(1<<30), uint32(0), uint32(0), uint64(0), uint16(0)) // and a huge string table
	f.Add(uint32(0), uint32(0), uint32(64<<20), uint32(1<<31), uint64(0), uint16(0))  // a zlib bomb as .debug_info
	f.Add(uint32(0), uint32(0), uint32(1<<20), uint32(16), uint64(0), uint16(0))      // one that claims little
	f.Add(uint32(0), uint32(0), uint32(0), uint32(0), uint64(1<<32), uint16(0))       // a pclntab of 4G functions
	f.Add(uint32(24*1000), uint32(4096), uint32(0), uint32(0), uint64(1000), uint16(3))
	s := New(Config{Limits: fuzzLimits})
	defer s.Close()
	f.Fuzz(func(t *testing.T, symtab, strtab, inflate, claim uint32, funcs uint64, shnum uint16) {
		inflate %= 256 << 20 // what a fuzz run can inflate quickly
		file := sizedELF(symtab, strtab, inflate, claim, funcs, shnum)
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		loadMem(t, s, file, 0x401000, 0x401010)
		runtime.ReadMemStats(&b)
		// Each section read is at most Section bytes, grown by doubling
		// (twice that in all), and a few are read: 64 Sections bounds it
		// with room; what the sizes claim is up to 16 GiB.
		if n := b.TotalAlloc - a.TotalAlloc; n > 64*uint64(fuzzLimits.Section) {
			t.Errorf("loading allocated %d bytes (symtab %d, strtab %d, inflate %d claim %d, funcs %d)", n, symtab, strtab, inflate, claim, funcs)
		}
		if n := s.Memory(); n != 0 {
			t.Errorf("%d bytes still taken after the module closed", n)
		}
	})
}

// sizedELF builds FuzzModuleSizes' file.
func sizedELF(symtab, strtab, inflate, claim uint32, funcs uint64, shnum uint16) *elfbuild.Sparse {
	sym, str := elfbuild.Symbols(0x401000, "alpha", "_ZN3foo3barEv", "gamma")
	var secs []elfbuild.Section
	secs = append(secs,
		elfbuild.Section{Name: ".symtab", Type: elf.SHT_SYMTAB, Data: sym, Size: uint64(symtab), Link: 2, Entsize: 24},
		elfbuild.Section{Name: ".strtab", Type: elf.SHT_STRTAB, Data: str, Size: uint64(strtab)},
	)
	if inflate > 0 {
		secs = append(secs, elfbuild.Section{Name: ".debug_info", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Data: elfbuild.Zlib(uint64(claim), uint64(inflate))})
	}
	if funcs > 0 {
		// A Go 1.20 pclntab header: magic, pad, quantum 1, pointer size
		// 8, then the function count; the table a hole.
		h := make([]byte, 72)
		binary.LittleEndian.PutUint32(h, 0xfffffff1)
		h[6], h[7] = 1, 8
		binary.LittleEndian.PutUint64(h[8:], funcs)
		secs = append(secs, elfbuild.Section{Name: ".gopclntab", Type: elf.SHT_PROGBITS, Data: h, Size: min(funcs*8+72, 16<<30)})
	}
	for i := 0; i < int(shnum%8); i++ {
		secs = append(secs, elfbuild.Section{Name: ".pad", Type: elf.SHT_PROGBITS, Size: uint64(i) << 20})
	}
	return elfbuild.Build(secs...)
}
