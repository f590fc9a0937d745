package usdt

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestOpenBuiltProgram(t *testing.T) {
	for opt, b := range requireSDT(t) {
		t.Run(opt, func(t *testing.T) {
			f, err := Open(b.Prog)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(b.Prog)
			if err != nil {
				t.Fatal(err)
			}
			ef, err := elf.Open(b.Prog)
			if err != nil {
				t.Fatal(err)
			}
			defer ef.Close()
			wantType := elf.ET_DYN
			if opt == "O2-nopie" {
				wantType = elf.ET_EXEC
			}
			want := builtProgramArch[runtime.GOARCH]
			if f.Arch != want.arch || f.Type != wantType {
				t.Errorf("arch %s type %s, want %s %s", f.Arch, f.Type, want.arch, wantType)
			}
			count := map[string]int{}
			for _, p := range f.Probes {
				count[p.FullName()]++
				// The call site is sys/sdt.h's nop.
				if p.Offset+uint64(len(want.nop)) > uint64(len(raw)) || !bytes.Equal(raw[p.Offset:p.Offset+uint64(len(want.nop))], want.nop) {
					t.Errorf("%s: bytes at file offset %#x are not a nop", p.FullName(), p.Offset)
				}
				if p.Name == "badarg" {
					// Listed, with an error that names the probe and the string.
					if p.ArgErr == nil || !strings.Contains(p.ArgErr.Error(), "sw:badarg") ||
						!strings.Contains(p.ArgErr.Error(), want.badArg) || !strings.Contains(p.ArgErr.Error(), want.badWhy) {
						t.Errorf("sw:badarg: error %v", p.ArgErr)
					}
				} else if p.ArgErr != nil {
					t.Errorf("%s: %v", p.FullName(), p.ArgErr)
				}
			}
			for n := 0; n <= 12; n++ {
				name := fmt.Sprintf("sw:a%d", n)
				if count[name] != 1 {
					t.Errorf("%s: %d sites, want 1", name, count[name])
					continue
				}
				if got := len(f.Lookup("sw", name[3:])[0].Args); got != n {
					t.Errorf("%s: %d args, want %d", name, got, n)
				}
			}
			for _, p := range f.Probes {
				// "nop; nop5" is x86-64's alone.
				if p.Nop5 != (p.Name == "nop5" && f.Arch == ArchX86_64) {
					t.Errorf("%s: Nop5 = %v", p.FullName(), p.Nop5)
				}
			}
			for name, want := range map[string]int{"sw:consts": 1, "sw:mem": 1, "sw:inl": 3, "sw:sem": 1, "sw:asmargs": 1, "sw:nop5": 1, "sw:badarg": 1} {
				if count[name] != want {
					t.Errorf("%s: %d sites, want %d", name, count[name], want)
				}
			}

			// The semaphore: its address is the symbol sw_sem_semaphore,
			// its file offset is where that address lies in .probes.
			sem := f.Lookup("sw", "sem")[0]
			syms, _ := ef.Symbols()
			var symAddr uint64
			for _, s := range syms {
				if s.Name == "sw_sem_semaphore" {
					symAddr = s.Value
				}
			}
			if sem.Semaphore == 0 || sem.Semaphore != symAddr {
				t.Errorf("semaphore at %#x, symbol sw_sem_semaphore at %#x", sem.Semaphore, symAddr)
			}
			probes := ef.Section(".probes")
			if probes == nil {
				t.Fatal("no .probes section")
			}
			if want := sem.Semaphore - probes.Addr + probes.Offset; sem.SemaphoreOffset != want {
				t.Errorf("semaphore file offset %#x, want %#x", sem.SemaphoreOffset, want)
			}
			for _, p := range f.Probes {
				if p.Name != "sem" && p.Semaphore != 0 {
					t.Errorf("%s has a semaphore", p.FullName())
				}
			}

			// Memory operands at -O2 are RIP-relative globals on x86-64:
			// the offset from the call site to the symbol.
			if opt != "O0" && f.Arch == ArchX86_64 {
				mem := f.Lookup("sw", "mem")[0]
				gu8 := uint64(0)
				for _, s := range syms {
					if s.Name == "g_u8" {
						gu8 = s.Value
					}
				}
				a := mem.Args[0]
				if a.Kind != ArgDeref || a.Reg != "rip" || uint64(int64(mem.Address)+a.Offset) != gu8 {
					t.Errorf("sw:mem arg 0 = %+v: want deref of rip reaching g_u8 at %#x", a, gu8)
				}
			}
		})
	}
}

// builtProgramArch is what TestOpenBuiltProgram expects of sdtprog on each
// architecture: sys/sdt.h's nop, and how sw:badarg is refused.
var builtProgramArch = map[string]struct {
	arch           Arch
	nop            []byte
	badArg, badWhy string
}{
	"amd64": {ArchX86_64, []byte{0x90}, `"8@%fs:0x28"`, "thread-local"},
	"arm64": {ArchARM64, []byte{0x1f, 0x20, 0x03, 0xd5}, `"8@[x1, x2, lsl 3]"`, "register-offset"},
}

// TestStapsdtBaseAdjustment rewrites the .stapsdt.base address recorded in
// every note of a real binary, as prelink would leave it after moving the
// file down, and expects call sites and semaphores to move by the difference.
func TestStapsdtBaseAdjustment(t *testing.T) {
	b := requireSDT(t)["O2"]
	orig, err := Open(b.Prog)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(b.Prog)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	sec := ef.Section(".note.stapsdt")
	data := raw[sec.Offset : sec.Offset+sec.Size]
	const delta = 0x10
	for off := 0; off+12 <= len(data); {
		nameSz := int(binary.LittleEndian.Uint32(data[off:]))
		descSz := int(binary.LittleEndian.Uint32(data[off+4:]))
		desc := off + 12 + align4(nameSz)
		base := binary.LittleEndian.Uint64(data[desc+8:])
		binary.LittleEndian.PutUint64(data[desc+8:], base+delta)
		off = desc + align4(descSz)
	}
	moved, err := Parse(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range moved.Probes {
		o := orig.Probes[i]
		if p.Address != o.Address-delta || p.Offset != o.Offset-delta {
			t.Errorf("%s: address %#x offset %#x, want %#x %#x", p.FullName(), p.Address, p.Offset, o.Address-delta, o.Offset-delta)
		}
		if o.Semaphore != 0 && p.Semaphore != o.Semaphore-delta {
			t.Errorf("%s: semaphore %#x, want %#x", p.FullName(), p.Semaphore, o.Semaphore-delta)
		}
	}
}

func TestOpenSharedLibrary(t *testing.T) {
	b := requireSDT(t)["O2"]
	f, err := Open(b.Lib)
	if err != nil {
		t.Fatal(err)
	}
	ps := f.Lookup("swlib", "fire")
	if len(ps) != 1 {
		t.Fatalf("swlib:fire: %d sites, want 1", len(ps))
	}
	if got := len(ps[0].Args); got != 3 {
		t.Errorf("swlib:fire has %d args, want 3", got)
	}
}

func TestOpenWithoutProbes(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(exe); !errors.Is(err, ErrNoProbes) {
		t.Errorf("Open(test binary) = %v, want ErrNoProbes", err)
	}
	if _, err := Open("testdata/sdtprog.c"); err == nil || !strings.Contains(err.Error(), "parse ELF") {
		t.Errorf("Open(C source) = %v, want an ELF parse error", err)
	}
}

// note builds one raw ELF note.
func note(order binary.ByteOrder, owner string, typ uint32, desc []byte) []byte {
	var b bytes.Buffer
	name := append([]byte(owner), 0)
	binary.Write(&b, order, uint32(len(name)))
	binary.Write(&b, order, uint32(len(desc)))
	binary.Write(&b, order, typ)
	b.Write(name)
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	b.Write(desc)
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	return b.Bytes()
}

func sdtDesc(order binary.ByteOrder, addrSize int, pc, base, sem uint64, strs ...string) []byte {
	var b bytes.Buffer
	for _, a := range []uint64{pc, base, sem} {
		if addrSize == 4 {
			binary.Write(&b, order, uint32(a))
		} else {
			binary.Write(&b, order, a)
		}
	}
	for _, s := range strs {
		b.WriteString(s)
		b.WriteByte(0)
	}
	return b.Bytes()
}

func TestParseNotes(t *testing.T) {
	le, be := binary.LittleEndian, binary.BigEndian
	tests := []struct {
		name     string
		data     []byte
		order    binary.ByteOrder
		addrSize int
		want     []Note
		err      string
	}{
		{
			name:     "two notes and a foreign one",
			order:    le,
			addrSize: 8,
			data: append(append(
				note(le, "stapsdt", 3, sdtDesc(le, 8, 0x1234, 0x2000, 0, "prov", "start", "-4@%eax 8@%rdi")),
				note(le, "GNU", 3, []byte{1, 2, 3, 4})...),
				note(le, "stapsdt", 3, sdtDesc(le, 8, 0x1300, 0x2000, 0x4010, "prov", "done", ""))...),
			want: []Note{
				{PC: 0x1234, Base: 0x2000, Provider: "prov", Name: "start", Args: "-4@%eax 8@%rdi"},
				{PC: 0x1300, Base: 0x2000, Semaphore: 0x4010, Provider: "prov", Name: "done"},
			},
		},
		{
			name: "32-bit big-endian", order: be, addrSize: 4,
			data: note(be, "stapsdt", 3, sdtDesc(be, 4, 0x8000, 0x9000, 0x9100, "p", "n", "4@%r3")),
			want: []Note{{PC: 0x8000, Base: 0x9000, Semaphore: 0x9100, Provider: "p", Name: "n", Args: "4@%r3"}},
		},
		{
			name: "no argument string at all", order: le, addrSize: 8,
			data: note(le, "stapsdt", 3, sdtDesc(le, 8, 1, 2, 0, "p", "n")),
			want: []Note{{PC: 1, Base: 2, Provider: "p", Name: "n"}},
		},
		{name: "truncated header", order: le, addrSize: 8, data: []byte{7, 0, 0, 0, 1}, err: "truncated header"},
		{
			name: "descriptor past the end", order: le, addrSize: 8,
			data: note(le, "stapsdt", 3, sdtDesc(le, 8, 1, 2, 0, "p", "n", ""))[:30], err: "past the end",
		},
		{
			name: "huge descriptor size", order: le, addrSize: 8,
			data: append([]byte{8, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, 3, 0, 0, 0}, "stapsdt\x00"...), err: "descriptor of",
		},
		{
			name: "short descriptor", order: le, addrSize: 8,
			data: note(le, "stapsdt", 3, []byte{1, 2, 3}), err: "too short",
		},
		{
			name: "unterminated name", order: le, addrSize: 8,
			data: note(le, "stapsdt", 3, append(sdtDesc(le, 8, 1, 2, 0, "p"), 'x')), err: "not NUL-terminated",
		},
		{
			name: "empty provider", order: le, addrSize: 8,
			data: note(le, "stapsdt", 3, sdtDesc(le, 8, 1, 2, 0, "", "n", "")), err: "empty provider",
		},
		{
			name: "control bytes", order: le, addrSize: 8,
			data: note(le, "stapsdt", 3, sdtDesc(le, 8, 1, 2, 0, "p\x01", "n", "")), err: "non-printable",
		},
		{
			name: "overlong string", order: le, addrSize: 8,
			data: note(le, "stapsdt", 3, sdtDesc(le, 8, 1, 2, 0, "p", "n", strings.Repeat("8@%rax ", 400))), err: "more than 2048",
		},
		{name: "bad address size", order: le, addrSize: 2, err: "address size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseNotes(tt.data, tt.order, tt.addrSize)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d notes %+v, want %d", len(got), got, len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("note %d: got %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// The FuzzParse seed is a real library: it must parse to its one probe.
func TestFuzzSeedLibrary(t *testing.T) {
	raw, err := os.ReadFile("testdata/fuzz/FuzzParse/seed-libsdtlib")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(raw), "\n", 3)
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Probes) != 1 || f.Probes[0].FullName() != "swlib:fire" || len(f.Probes[0].Args) != 3 {
		t.Fatalf("probes %+v, want swlib:fire with 3 args", f.Probes)
	}
}
