package usdt

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

func TestParseArgsX86(t *testing.T) {
	tests := []struct {
		in   string
		want []Arg
	}{
		{"", []Arg{}},
		{"-4@%eax", []Arg{{Kind: ArgReg, Size: 4, Signed: true, Reg: "eax", RegOffset: 80}}},
		{"8@%rdi 4@%esi", []Arg{
			{Kind: ArgReg, Size: 8, Reg: "rdi", RegOffset: 112},
			{Kind: ArgReg, Size: 4, Reg: "esi", RegOffset: 104},
		}},
		{"8@-16(%rbp)", []Arg{{Kind: ArgDeref, Size: 8, Reg: "rbp", RegOffset: 32, Offset: -16}}},
		{"-8@$5", []Arg{{Kind: ArgConst, Size: 8, Signed: true, Offset: 5}}},
		{"-1@$-128", []Arg{{Kind: ArgConst, Size: 1, Signed: true, Offset: -128}}},
		{"8@$18446744073709551615", []Arg{{Kind: ArgConst, Size: 8, Offset: -1}}},
		{"4@$0x10", []Arg{{Kind: ArgConst, Size: 4, Offset: 16}}},
		{"-4@%r12d", []Arg{{Kind: ArgReg, Size: 4, Signed: true, Reg: "r12d", RegOffset: 24}}},
		{"2@%r9w", []Arg{{Kind: ArgReg, Size: 2, Reg: "r9w", RegOffset: 64}}},
		{"-1@%r15b", []Arg{{Kind: ArgReg, Size: 1, Signed: true, Reg: "r15b", RegOffset: 0}}},
		{"2@%ax", []Arg{{Kind: ArgReg, Size: 2, Reg: "ax", RegOffset: 80}}},
		{"1@%al", []Arg{{Kind: ArgReg, Size: 1, Reg: "al", RegOffset: 80}}},
		{"-1@%ah", []Arg{{Kind: ArgReg, Size: 1, Signed: true, Reg: "ah", RegOffset: 81}}},
		{"1@%dh", []Arg{{Kind: ArgReg, Size: 1, Reg: "dh", RegOffset: 97}}},
		{"1@%sil", []Arg{{Kind: ArgReg, Size: 1, Reg: "sil", RegOffset: 104}}},
		{"8@(%rax)", []Arg{{Kind: ArgDeref, Size: 8, Reg: "rax", RegOffset: 80}}},
		{"8@(%rax,%rdx,8)", []Arg{{Kind: ArgDeref, Size: 8, Reg: "rax", RegOffset: 80, Index: "rdx", IndexOffset: 96, Scale: 8}}},
		{"-4@16(%rsp,%rcx)", []Arg{{Kind: ArgDeref, Size: 4, Signed: true, Reg: "rsp", RegOffset: 152, Index: "rcx", IndexOffset: 88, Scale: 1, Offset: 16}}},
		{"-2@0x20(%r13,%r14,2)", []Arg{{Kind: ArgDeref, Size: 2, Signed: true, Reg: "r13", RegOffset: 16, Index: "r14", IndexOffset: 8, Scale: 2, Offset: 32}}},
		// Without a size (sys/sdt.h before 2010): the register's width.
		{"%ecx", []Arg{{Kind: ArgReg, Size: 4, Reg: "ecx", RegOffset: 88}}},
		{"  -4@%eax   8@%rbx  ", []Arg{
			{Kind: ArgReg, Size: 4, Signed: true, Reg: "eax", RegOffset: 80},
			{Kind: ArgReg, Size: 8, Reg: "rbx", RegOffset: 40},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseArgs(ArchX86_64, tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d args %+v, want %d", len(got), got, len(tt.want))
			}
			for i := range got {
				g := got[i]
				g.Text = ""
				if g != tt.want[i] {
					t.Errorf("arg %d: got %+v, want %+v", i, g, tt.want[i])
				}
			}
		})
	}
}

func TestParseArgsARM64(t *testing.T) {
	tests := []struct {
		in   string
		want []Arg
	}{
		{"8@x0", []Arg{{Kind: ArgReg, Size: 8, Reg: "x0", RegOffset: 0}}},
		{"-4@w3", []Arg{{Kind: ArgReg, Size: 4, Signed: true, Reg: "w3", RegOffset: 24}}},
		{"4@[sp, 16]", []Arg{{Kind: ArgDeref, Size: 4, Reg: "sp", RegOffset: 248, Offset: 16}}},
		{"-4@[x1]", []Arg{{Kind: ArgDeref, Size: 4, Signed: true, Reg: "x1", RegOffset: 8}}},
		{"-8@[x29, -24]", []Arg{{Kind: ArgDeref, Size: 8, Signed: true, Reg: "x29", RegOffset: 232, Offset: -24}}},
		{"8@5", []Arg{{Kind: ArgConst, Size: 8, Offset: 5}}},
		{"-2@-7", []Arg{{Kind: ArgConst, Size: 2, Signed: true, Offset: -7}}},
		// libbpf's arm64 forms (usdt.c): register, deref with and
		// without an offset, constant.
		{"8@x4", []Arg{{Kind: ArgReg, Size: 8, Reg: "x4", RegOffset: 32}}},
		{"-4@[sp, 96]", []Arg{{Kind: ArgDeref, Size: 4, Signed: true, Reg: "sp", RegOffset: 248, Offset: 96}}},
		{"-4@[sp]", []Arg{{Kind: ArgDeref, Size: 4, Signed: true, Reg: "sp", RegOffset: 248}}},
		{"4@5", []Arg{{Kind: ArgConst, Size: 4, Offset: 5}}},
		// What GCC 12 writes for aarch64 at -O2 (TestOpenARM64Program).
		{"1@x3 8@x4 8@[x5]", []Arg{
			{Kind: ArgReg, Size: 1, Reg: "x3", RegOffset: 24},
			{Kind: ArgReg, Size: 8, Reg: "x4", RegOffset: 32},
			{Kind: ArgDeref, Size: 8, Reg: "x5", RegOffset: 40},
		}},
		{"-4@[x5, 8] 1@[x5, 12] 8@x6 -4@-1", []Arg{
			{Kind: ArgDeref, Size: 4, Signed: true, Reg: "x5", RegOffset: 40, Offset: 8},
			{Kind: ArgDeref, Size: 1, Reg: "x5", RegOffset: 40, Offset: 12},
			{Kind: ArgReg, Size: 8, Reg: "x6", RegOffset: 48},
			{Kind: ArgConst, Size: 4, Signed: true, Offset: -1},
		}},
		{"-8@[sp, 40] 1@[sp, 33]", []Arg{
			{Kind: ArgDeref, Size: 8, Signed: true, Reg: "sp", RegOffset: 248, Offset: 40},
			{Kind: ArgDeref, Size: 1, Reg: "sp", RegOffset: 248, Offset: 33},
		}},
		{"8@lr 8@fp -4@wsp", []Arg{
			{Kind: ArgReg, Size: 8, Reg: "lr", RegOffset: 240},
			{Kind: ArgReg, Size: 8, Reg: "fp", RegOffset: 232},
			{Kind: ArgReg, Size: 4, Signed: true, Reg: "wsp", RegOffset: 248},
		}},
		{"8@x30 1@[x2, #3] 8@sp", []Arg{
			{Kind: ArgReg, Size: 8, Reg: "x30", RegOffset: 240},
			{Kind: ArgDeref, Size: 1, Reg: "x2", RegOffset: 16, Offset: 3},
			{Kind: ArgReg, Size: 8, Reg: "sp", RegOffset: 248},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseArgs(ArchARM64, tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d args %+v, want %d", len(got), got, len(tt.want))
			}
			for i := range got {
				g := got[i]
				g.Text = ""
				if g != tt.want[i] {
					t.Errorf("arg %d: got %+v, want %+v", i, g, tt.want[i])
				}
			}
		})
	}
}

func TestParseArgsErrors(t *testing.T) {
	tests := []struct {
		arch Arch
		in   string
		want string // in the error
	}{
		{ArchX86_64, "3@%eax", "size 3"},
		{ArchX86_64, "-4@%xyz", `unknown x86-64 register "%xyz"`},
		{ArchX86_64, "8@%fs:16", "thread-local"},
		{ArchX86_64, "8@%fs:0x10(%rax)", "thread-local"},
		{ArchX86_64, "8@$sym", "only numeric constants"},
		{ArchX86_64, "4@counter(%rip)", "needs the ELF symbol table"},
		{ArchX86_64, "4@16(%rip)", "numeric %rip displacement"},
		{ArchX86_64, "4@sym(%rax)", "only supported relative to %rip"},
		{ArchX86_64, "4@(%eax)", "not 64-bit"},
		{ArchX86_64, "8@(%rax,%rdx,3)", "scale"},
		{ArchX86_64, "8@(,%rdx,8)", "no base register"},
		{ArchX86_64, "8@(%rax", "unbalanced"},
		{ArchX86_64, "8@", "nothing after"},
		{ArchX86_64, "x@%eax", "not a number"},
		{ArchX86_64, strings.Repeat("8@%rax ", 13), "13 arguments"},
		{ArchARM64, "8@q0", `unknown arm64 register "q0"`},
		{ArchARM64, "8@[x0, x1]", "offset"},
		{ArchARM64, "8@[x0, 1, 2]", "register-offset"},
		{ArchARM64, "4@[w0]", "not 64-bit"},
		{ArchARM64, "8@x31", `unknown arm64 register "x31"`},
		{ArchARM64, "4@w31", `unknown arm64 register "w31"`},
		{ArchARM64, "8@x01", `unknown arm64 register "x01"`},
		{ArchARM64, "8@xzr", `unknown arm64 register "xzr"`},
		{ArchARM64, "8@[x6, #:lo12:counter]", "needs the ELF symbol table"},
		{ArchARM64, "8@[x6, #:lo12:.LANCHOR0]", "-fno-section-anchors"},
		{"mips", "8@$1", "unsupported architecture"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := ParseArgs(tt.arch, tt.in)
			if err == nil {
				t.Fatalf("no error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not mention %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), strings.TrimSpace(tt.in)[:min(len(strings.TrimSpace(tt.in)), 6)]) {
				t.Errorf("error %q does not quote the argument string", err)
			}
		})
	}
}

// TestARM64Registers checks every register name against struct
// user_pt_regs (arch/arm64/include/uapi/asm/ptrace.h): regs[n] at n*8, sp
// at 248, pc at 256; w<n> is the low half of x<n>.
func TestARM64Registers(t *testing.T) {
	for n := 0; n <= 30; n++ {
		for _, r := range []struct {
			prefix string
			size   int
		}{{"x", 8}, {"w", 4}} {
			name := fmt.Sprintf("%s%d", r.prefix, n)
			got, err := ParseArgs(ArchARM64, "8@"+name+" 4@["+"x"+strconv.Itoa(n)+", -8]")
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got[0].Kind != ArgReg || got[0].RegOffset != uint16(n*8) {
				t.Errorf("%s: %+v, want a register at offset %d", name, got[0], n*8)
			}
			if got[1].Kind != ArgDeref || got[1].RegOffset != uint16(n*8) || got[1].Offset != -8 {
				t.Errorf("[x%d, -8]: %+v", n, got[1])
			}
			// Without a size the register's width is the argument's.
			got, err = ParseArgs(ArchARM64, name)
			if err != nil || got[0].Size != r.size {
				t.Errorf("%s without a size: %+v, %v; want size %d", name, got, err, r.size)
			}
		}
	}
	if got := ArchARM64.IPOffset(); got != 256 {
		t.Errorf("arm64 IPOffset %d, want 256 (user_pt_regs.pc)", got)
	}
}

// TestParseArgsARM64Lo12 resolves GCC's "#:lo12:SYM" offsets: the low 12
// bits of the symbol's address, the same whatever the load bias.
func TestParseArgsARM64Lo12(t *testing.T) {
	syms := map[string]uint64{"g_ev": 0x11018, "counter": 0x2ff8}
	lookup := func(s string) (uint64, bool) { v, ok := syms[s]; return v, ok }
	got, err := parseArgs(ArchARM64, "8@[x6, #:lo12:g_ev] -4@[x1, #:lo12:counter+16] 2@[x2, :lo12:g_ev-8]", 0x800, lookup)
	if err != nil {
		t.Fatal(err)
	}
	want := []Arg{
		{Kind: ArgDeref, Size: 8, Reg: "x6", RegOffset: 48, Offset: 0x018},
		{Kind: ArgDeref, Size: 4, Signed: true, Reg: "x1", RegOffset: 8, Offset: 0x008}, // 0x3008 & 0xfff
		{Kind: ArgDeref, Size: 2, Reg: "x2", RegOffset: 16, Offset: 0x010},
	}
	for i := range want {
		g := got[i]
		g.Text = ""
		if g != want[i] {
			t.Errorf("arg %d: got %+v, want %+v", i, g, want[i])
		}
	}
	if _, err := parseArgs(ArchARM64, "8@[x6, #:lo12:missing]", 0, lookup); err == nil || !strings.Contains(err.Error(), "not in the file's symbol tables") {
		t.Errorf("a missing symbol: %v", err)
	}
}

func TestParseArgsRIPSymbol(t *testing.T) {
	syms := map[string]uint64{"counter": 0x4010, "counter.0": 0x4020}
	lookup := func(s string) (uint64, bool) { v, ok := syms[s]; return v, ok }
	got, err := parseArgs(ArchX86_64, "-4@counter(%rip) 8@counter.0+8(%rip) 2@counter-2(%rip)", 0x1000, lookup)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{0x3010, 0x3028, 0x300e}
	for i, a := range got {
		if a.Kind != ArgDeref || a.Reg != "rip" || a.RegOffset != 128 || a.Offset != want[i] {
			t.Errorf("arg %d: got %+v, want deref of rip%+#x", i, a, want[i])
		}
	}
	if _, err := parseArgs(ArchX86_64, "4@missing(%rip)", 0x1000, lookup); err == nil || !strings.Contains(err.Error(), "stripped") {
		t.Errorf("missing symbol: got %v", err)
	}
}
