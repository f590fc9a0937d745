package funcs

import (
	"context"
	"encoding/binary"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// a64 lays A64 words out as code.
func a64(words ...uint32) []byte {
	b := make([]byte, 4*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

// TestScanARM64 finds the returns of A64 code built of the words gcc -O2
// and Go write, and refuses what a probe on each return would miss. Each
// case can fail: an atomic (which arm64asm does not decode) or Go's zero
// padding taken for an undecodable instruction, a literal pool's word
// taken for a RET, a RET through x16 taken for a return, a branch out
// not seen.
func TestScanARM64(t *testing.T) {
	const (
		ret    = 0xd65f03c0 // ret
		retaa  = 0xd65f0bff // retaa
		nop    = 0xd503201f
		stp    = 0xa9bf7bfd // stp x29, x30, [sp, #-16]!
		ldp    = 0xa8c17bfd // ldp x29, x30, [sp], #16
		ldadd  = 0xf8e10064 // ldaddal x1, x4, [x3]: unknown to arm64asm
		bl     = 0x94000010 // bl +0x40: a call
		brx1   = 0xd61f0020 // br x1
		retx16 = 0xd65f0200 // ret x16
		pacias = 0xd503233f // paciasp
	)
	for _, tc := range []struct {
		name     string
		code     []byte
		rets     []uint64
		indirect int
		exits    int
		refused  Reason
	}{
		{"gcc leaf", a64(0x11000400, ret, nop), []uint64{0x1004}, 0, 0, ""},
		{"atomic and padding", a64(stp, ldadd, bl, ldp, ret, 0, 0), []uint64{0x1010}, 0, 0, ""},
		// ldr x0, +12 (the literal at 0x100c, a RET's bits); ret; b .; literal
		{"literal pool", a64(0x58000060, ret, 0x14000000, ret, 0), []uint64{0x1004}, 0, 0, ""},
		{"retaa", a64(pacias, stp, ldp, retaa), []uint64{0x100c}, 0, 0, ""},
		{"switch through a register", a64(brx1, ret), []uint64{0x1004}, 1, 0, ""},
		// cbz x0, +8 (inside); ret; b -0x100 (out)
		{"branch inside, b out", a64(0xb4000040, ret, 0x17ffffc0), []uint64{0x1004}, 0, 1, ""},
		// b.ne -0x40 (out)
		{"b.cond out", a64(0x54fffe01, ret), []uint64{0x1004}, 0, 1, ""},
		// tbnz w0, #31, +0x40 (out)
		{"tbnz out", a64(0x37f80200, ret), []uint64{0x1004}, 0, 1, ""},
		{"ret x16", a64(stp, ldp, retx16), nil, 0, 0, ReasonTailCall},
		{"eret", a64(0xd69f03e0), nil, 0, 0, ReasonUndecodable},
		// retaasppc (FEAT_PAuth_LR): a branch-group word this does not know
		{"unknown branch", a64(0x5500001f), nil, 0, 0, ReasonUndecodable},
	} {
		rets, indirect, exits, ref := scanARM64(tc.code, 0x1000)
		if ref.reason != tc.refused || fmt.Sprint(rets) != fmt.Sprint(tc.rets) || indirect != tc.indirect || len(exits) != tc.exits {
			t.Errorf("%s: returns %#x, %d indirect, exits %+v, refused %q (%s); want returns %#x, %d indirect, %d exits, refused %q",
				tc.name, rets, indirect, exits, ref.reason, ref.detail, tc.rets, tc.indirect, tc.exits, tc.refused)
		}
	}
}

// TestGoStackCheckARM64 finds the stack check of Go 1.26's arm64
// compiler in its three forms (the words of gostress's panicker, rec and
// grow), and no check where the code is something else.
func TestGoStackCheckARM64(t *testing.T) {
	const (
		ldrGuard = 0xf9400b90 // MOVD 16(R28), R16
		cmpSP    = 0xeb3063ff // CMP R16, RSP
		bls      = 0x54000a09 // BLS +0x140
		stpW     = 0xf81e0ffe // MOVD.W R30, -32(RSP)
	)
	pad := func(w ...uint32) []byte { return append(a64(w...), make([]byte, 0x200)...) }
	for _, tc := range []struct {
		name string
		code []byte
		want int
	}{
		{"small frame", pad(ldrGuard, cmpSP, bls, stpW), 12},
		// SUB $1456, RSP, R17; CMP R16, R17; BLS
		{"larger frame", pad(ldrGuard, 0xd116c3f1, 0xeb10023f, 0x540009a9, 0xd118c3f4), 16},
		// MOVD $16272, R27; SUBS R27, RSP, R17; BCC; CMP R16, R17; BLS
		{"past StackBig", pad(ldrGuard, 0xd287f21b, 0xeb3b63f1, 0x54000a23, 0xeb10023f, 0x540009e9, 0xd288021b), 24},
		{"no check", pad(stpW, ldrGuard, cmpSP, bls), 0},
		// MOVD 32(R28), R16: not a stack guard
		{"other field", pad(0xf9401390, cmpSP, bls), 0},
		// SUB $1456, RSP, R0: writes an argument register
		{"writes x0", pad(ldrGuard, 0xd116c3e0, 0xeb10001f, 0x540009a9), 0},
		// BLS -0x100: out of the function
		{"jump out", pad(ldrGuard, cmpSP, 0x54fff809), 0},
	} {
		if got := goStackCheckARM64(tc.code, 0x1000); got != tc.want {
			t.Errorf("%s: %d bytes of stack check, want %d", tc.name, got, tc.want)
		}
	}
}

// TestGoTextARM64 lists a Go program built for arm64 by the test: every
// traceable function's return sites are objdump's (aarch64), and main's
// functions, which check their stacks, are entered after the check.
func TestGoTextARM64(t *testing.T) {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Skip("no go tool on PATH")
		}
	}
	objdump, err := exec.LookPath("aarch64-linux-gnu-objdump")
	if err != nil {
		t.Skip("no aarch64-linux-gnu-objdump: install binutils-aarch64-linux-gnu")
	}
	bin := filepath.Join(t.TempDir(), "goprog")
	cmd := exec.Command(gobin, "build", "-o", bin, "./testdata/goprog")
	cmd.Env = append(cmd.Environ(), "GOARCH=arm64", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	f, err := Open(context.Background(), bin, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f.Arch != ArchARM64 || !f.Go {
		t.Fatalf("arch %s, go %v", f.Arch, f.Go)
	}
	agreed := checkAgainstObjdump(t, f, objdump, bin)
	fns := byName(f)
	if m := fns["main.main"]; m == nil || m.Refused != "" || m.EntryAfter != EntryAfterStackCheck || m.Entry <= m.Offset {
		t.Errorf("main.main: %+v, want it traceable, entered after the stack check", m)
	}
	if w := fns["main.work"]; w == nil || w.Refused != "" || w.EntryAfter != "" {
		t.Errorf("main.work: %+v, want it traceable from its first instruction (a leaf: no check)", w)
	}
	if a := fns["runtime.asyncPreempt"]; a == nil || a.Refused != ReasonTailCall || !strings.Contains(a.Detail, "ret x27") {
		t.Errorf("runtime.asyncPreempt: %+v, want refused for its ret x27", a)
	}
	checks := 0
	for _, fn := range f.Funcs {
		if fn.EntryAfter == EntryAfterStackCheck {
			checks++
		}
	}
	t.Logf("%d functions, %d traceable with objdump's return sites, %d entered after a stack check, refused %v", len(f.Funcs), agreed, checks, tally(f))
	if agreed < 1000 || checks < 500 {
		t.Errorf("%d functions agreed, %d stack checks: want the thousand or so of a Go program, most checking their stacks", agreed, checks)
	}
}
