package usdt

import (
	"bytes"
	"encoding/binary"
	"testing"
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
