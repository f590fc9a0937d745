package usdt

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/spanwatch/spanwatch/internal/elfbuild"
)

// FuzzParseNotes feeds arbitrary section contents to the note parser: it
// must return notes or an error, never panic, and never return more than
// the caps allow.
func FuzzParseNotes(f *testing.F) {
	le := binary.LittleEndian
	f.Add(note(le, "stapsdt", 3, sdtDesc(le, 8, 0x1234, 0x2000, 0, "prov", "start", "-4@%eax 8@%rdi")), true)
	f.Add(note(le, "stapsdt", 3, sdtDesc(le, 4, 1, 2, 3, "p", "n", "4@[sp, 8]")), false)
	f.Add([]byte{8, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0}, true)
	f.Fuzz(func(t *testing.T, data []byte, is64 bool) {
		size := 4
		if is64 {
			size = 8
		}
		notes, err := ParseNotes(data, le, size)
		if err == nil && len(notes) > len(data)/12 {
			t.Fatalf("%d notes from %d bytes", len(notes), len(data))
		}
	})
}

// FuzzParse feeds arbitrary files to the ELF reader. The committed corpus
// (testdata/fuzz/FuzzParse) holds a stripped build of testdata/sdtlib.c, a
// real shared library with a probe.
func FuzzParse(f *testing.F) {
	f.Add([]byte("\x7fELF\x02\x01\x01"))

	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, p := range file.Probes {
			if p.ArgErr == nil && len(p.Args) > MaxArgs {
				t.Fatalf("%d args", len(p.Args))
			}
		}
	})
}

// FuzzParseArgs: every argument string parses or fails with an error, for
// both architectures; what parses has valid sizes and register offsets.
func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{
		"-4@%eax 8@-16(%rbp) -8@$5", "1@%ah 2@%r9w", "8@(%rax,%rdx,8)", "-4@16(%rsp,%rcx)",
		"8@x0 4@[sp, 16] -4@[x1] 8@5", "1@g_u8(%rip)", "%ecx", "8@%fs:0x28",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, arm bool) {
		arch := ArchX86_64
		if arm {
			arch = ArchARM64
		}
		lookup := func(string) (uint64, bool) { return 0x4000, true }
		args, err := parseArgs(arch, s, 0x1000, lookup)
		if err != nil {
			return
		}
		if len(args) > MaxArgs {
			t.Fatalf("%d args", len(args))
		}
		for _, a := range args {
			switch a.Size {
			case 1, 2, 4, 8:
			default:
				t.Fatalf("%q: size %d", s, a.Size)
			}
			if a.Kind != ArgConst && a.RegOffset > 264 {
				t.Fatalf("%q: register offset %d outside pt_regs", s, a.RegOffset)
			}
			if a.Kind < ArgConst || a.Kind > ArgDeref {
				t.Fatalf("%q: kind %d", s, a.Kind)
			}
		}
	})
}

// FuzzParseSizes builds ELF files whose sizes the fuzzer chooses, as holes
// of a sparse file: the probe note section (or one claiming any size), a
// symbol table and a string table that an argument naming a symbol
// (RIP-relative, "4@counter(%rip)") makes the parser search. Parsing one
// must allocate within a bound set by the caps, not by the sizes.
func FuzzParseSizes(f *testing.F) {
	f.Add(uint32(0), uint32(256<<20), uint32(0))      // a 256 MiB symbol table to search
	f.Add(uint32(0), uint32(24*4), uint32(1<<30))     // a 1 GiB string table
	f.Add(uint32(32<<20), uint32(24*4), uint32(4096)) // a note section past its cap
	f.Fuzz(func(t *testing.T, noteSize, symtab, strtab uint32) {
		le := binary.LittleEndian
		notes := note(le, "stapsdt", 3, sdtDesc(le, 8, 0x400100, 0, 0, "p", "n", "4@counter(%rip)"))
		sym, str := elfbuild.Symbols(0x401000, "counter", "other")
		file := elfbuild.Build(
			elfbuild.Section{Name: ".note.stapsdt", Type: elf.SHT_NOTE, Data: notes, Size: uint64(noteSize)},
			elfbuild.Section{Name: ".symtab", Type: elf.SHT_SYMTAB, Data: sym, Size: uint64(symtab), Link: 3, Entsize: 24},
			elfbuild.Section{Name: ".strtab", Type: elf.SHT_STRTAB, Data: str, Size: uint64(strtab)},
		)
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		Parse(file)
		runtime.ReadMemStats(&b)
		// The note section is read whole up to 16 MiB, a string table up
		// to 64 MiB (grown by doubling), a symbol table a chunk at a time.
		if n := b.TotalAlloc - a.TotalAlloc; n > 192<<20 {
			t.Errorf("parsing allocated %d MiB (note %d, symtab %d, strtab %d)", n>>20, noteSize, symtab, strtab)
		}
	})
}
