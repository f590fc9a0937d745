package usdt

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// crossARM64 is the cross compiler TestOpenARM64Program builds with
// (Debian's gcc-aarch64-linux-gnu).
const crossARM64 = "aarch64-linux-gnu-gcc"

// buildARM64 cross-compiles testdata/sdtarm64.c for aarch64 with flags,
// against the host's sys/sdt.h (it is the same for every architecture:
// the argument strings are what the compiler writes), copied into the
// test's directory: a cross compiler does not search the host's
// multiarch include directory. It skips the test without the compiler
// or the header.
func buildARM64(t *testing.T, name string, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath(crossARM64); err != nil {
		t.Skipf("no %s on PATH: install gcc-aarch64-linux-gnu to parse arm64 USDT notes as GCC writes them", crossARM64)
	}
	var hdr string
	for _, p := range []string{"/usr/include/x86_64-linux-gnu/sys/sdt.h", "/usr/include/aarch64-linux-gnu/sys/sdt.h", "/usr/include/sys/sdt.h"} {
		if _, err := os.Stat(p); err == nil {
			hdr = p
			break
		}
	}
	if hdr == "" {
		t.Skip("no sys/sdt.h: install systemtap-sdt-dev")
	}
	dir := t.TempDir()
	inc := filepath.Join(dir, "include", "sys")
	if err := os.MkdirAll(inc, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"sdt.h", "sdt-config.h"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(hdr), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(inc, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, name)
	args := append([]string{"-I", filepath.Join(dir, "include")}, flags...)
	args = append(args, "-o", out, filepath.Join("testdata", "sdtarm64.c"))
	if b, err := exec.Command(crossARM64, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", crossARM64, strings.Join(args, " "), err, b)
	}
	return out
}

// TestOpenARM64Program parses the notes of a program GCC built for
// aarch64: every call site is a nop, and every argument of every probe
// parses, into pt_regs offsets of struct user_pt_regs, except the one
// GCC names by a section anchor (-fsection-anchors, its default at -O2),
// which is refused with an error that says what to do.
func TestOpenARM64Program(t *testing.T) {
	wantArgs := map[string]int{"a0": 0, "a1": 1, "a2": 2, "a3": 3, "a4": 4, "a5": 5, "a6": 6, "a12": 12}
	for _, tt := range []struct {
		name    string
		flags   []string
		anchors bool // g_ev is addressed through .LANCHOR0
		lo12    bool // g_ev is addressed as [xN, #:lo12:g_ev]
	}{
		{"O0", []string{"-O0"}, false, false},
		{"O2", []string{"-O2"}, true, false},
		{"O2-no-anchors", []string{"-O2", "-fno-section-anchors"}, false, true},
		{"O2-nopie", []string{"-O2", "-fno-section-anchors", "-no-pie"}, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := buildARM64(t, "sdtarm64-"+tt.name, tt.flags...)
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if f.Arch != ArchARM64 || f.Machine != elf.EM_AARCH64 {
				t.Fatalf("arch %s machine %s, want arm64 EM_AARCH64", f.Arch, f.Machine)
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ef, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ef.Close()
			syms, err := ef.Symbols()
			if err != nil {
				t.Fatal(err)
			}
			var gev uint64
			for _, s := range syms {
				if s.Name == "g_ev" {
					gev = s.Value
				}
			}
			seen := map[string]bool{}
			lo12 := 0
			for _, p := range f.Probes {
				if p.Provider != "sw" {
					continue
				}
				seen[p.Name] = true
				// sys/sdt.h's call site on aarch64 is a nop (0xd503201f).
				if p.Offset+4 > uint64(len(raw)) || binary.LittleEndian.Uint32(raw[p.Offset:]) != 0xd503201f {
					t.Errorf("%s: no nop at file offset %#x", p.FullName(), p.Offset)
				}
				if p.Nop5 {
					t.Errorf("%s: marked Nop5 on arm64", p.FullName())
				}
				if p.ArgErr != nil {
					if tt.anchors && p.Name == "a5" && strings.Contains(p.ArgErr.Error(), ".LANCHOR") &&
						strings.Contains(p.ArgErr.Error(), "-fno-section-anchors") {
						continue
					}
					t.Errorf("%s %q: %v", p.FullName(), p.ArgString, p.ArgErr)
					continue
				}
				if want, ok := wantArgs[p.Name]; !ok || len(p.Args) != want {
					t.Errorf("%s %q: %d args, want %d", p.FullName(), p.ArgString, len(p.Args), want)
				}
				for i, a := range p.Args {
					checkARM64Arg(t, p, i, a, gev)
					if strings.Contains(a.Text, ":lo12:") {
						lo12++
					}
				}
			}
			if tt.lo12 && lo12 == 0 {
				t.Errorf("no argument addressed by :lo12:, which GCC writes for g_ev here")
			}
			for name := range wantArgs {
				if !seen[name] {
					t.Errorf("probe sw:%s not found", name)
				}
			}
		})
	}
}

// checkARM64Arg checks one parsed argument against what the string says
// and struct user_pt_regs: x<n> and w<n> at n*8, sp at 248; a ":lo12:"
// offset is the low 12 bits of the symbol's address.
func checkARM64Arg(t *testing.T, p Probe, i int, a Arg, gev uint64) {
	t.Helper()
	switch a.Size {
	case 1, 2, 4, 8:
	default:
		t.Errorf("%s arg %d %q: size %d", p.FullName(), i, a.Text, a.Size)
	}
	if a.Signed != strings.HasPrefix(a.Text, "-") {
		t.Errorf("%s arg %d %q: signed %v", p.FullName(), i, a.Text, a.Signed)
	}
	if a.Kind == ArgConst {
		return
	}
	var n int
	switch {
	case a.Reg == "sp":
		n = 31
	case len(a.Reg) > 1 && (a.Reg[0] == 'x' || a.Reg[0] == 'w'):
		var err error
		if n, err = strconv.Atoi(a.Reg[1:]); err != nil {
			t.Errorf("%s arg %d %q: register %q", p.FullName(), i, a.Text, a.Reg)
			return
		}
	default:
		t.Errorf("%s arg %d %q: register %q", p.FullName(), i, a.Text, a.Reg)
		return
	}
	if a.RegOffset != uint16(n*8) {
		t.Errorf("%s arg %d %q: pt_regs offset %d, want %d", p.FullName(), i, a.Text, a.RegOffset, n*8)
	}
	if strings.Contains(a.Text, ":lo12:g_ev") && (gev == 0 || uint64(a.Offset) != gev&0xfff) {
		t.Errorf("%s arg %d %q: offset %#x, want the low 12 bits of g_ev (%#x)", p.FullName(), i, a.Text, a.Offset, gev)
	}
}
