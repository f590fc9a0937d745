//go:build linux

package symbolize

import (
	"bytes"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/spanwatch/spanwatch/internal/bpftest"
)

// Each record the test program writes: pid_tgid, the byte count
// bpf_get_stack returned, then the stack.
const (
	stackBytes = MaxStackDepth * 8
	recordSize = 16 + stackBytes
)

// stackProbe is a uprobe program that writes the user stack of the thread
// that hit it into a ring buffer, the way the collector's BPF core does.
type stackProbe struct {
	events *ebpf.Map
	prog   *ebpf.Program
	rd     *ringbuf.Reader
}

func newStackProbe(t *testing.T) *stackProbe {
	t.Helper()
	events, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 1 << 16})
	if err != nil {
		bpftest.SkipUnlessLoaded(t, "create a BPF ring buffer (kernel 5.8+)", err)
	}
	t.Cleanup(func() { events.Close() })
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMapPtr(asm.R1, events.FD()),
		asm.Mov.Imm(asm.R2, recordSize),
		asm.Mov.Imm(asm.R3, 0),
		asm.FnRingbufReserve.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.FnGetCurrentPidTgid.Call(),
		asm.StoreMem(asm.R7, 0, asm.R0, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R7),
		asm.Add.Imm(asm.R2, 16),
		asm.Mov.Imm(asm.R3, stackBytes),
		asm.Mov.Imm(asm.R4, 1<<8), // BPF_F_USER_STACK
		asm.FnGetStack.Call(),
		asm.StoreMem(asm.R7, 8, asm.R0, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R7),
		asm.Mov.Imm(asm.R2, 0),
		asm.FnRingbufSubmit.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe, Instructions: insns, License: "GPL"})
	if err != nil {
		bpftest.SkipUnlessLoaded(t, "load a uprobe program with bpf_get_stack", err)
	}
	t.Cleanup(func() { prog.Close() })
	rd, err := ringbuf.NewReader(events)
	if err != nil {
		t.Fatalf("ring buffer reader: %v", err)
	}
	t.Cleanup(func() { rd.Close() })
	return &stackProbe{events: events, prog: prog, rd: rd}
}

// attach puts the probe on fn in bin, just after fn's frame-pointer
// prologue: at the function's first instruction the caller's return
// address is not yet linked into the frame chain, and the frame-pointer
// walk would skip the caller.
func (p *stackProbe) attach(t *testing.T, bin string, entryOff uint64) {
	t.Helper()
	off := afterPrologue(t, bin, entryOff)
	ex, err := link.OpenExecutable(bin)
	if err != nil {
		t.Fatalf("open executable: %v", err)
	}
	l, err := ex.Uprobe("", p.prog, &link.UprobeOptions{Address: off})
	if err != nil {
		bpftest.SkipUnlessLoaded(t, "attach a uprobe (CONFIG_UPROBE_EVENTS)", err)
	}
	t.Cleanup(func() { l.Close() })
}

// read waits for one record from pid.
func (p *stackProbe) read(t *testing.T, pid int) []uint64 {
	t.Helper()
	p.rd.SetDeadline(time.Now().Add(30 * time.Second))
	for {
		rec, err := p.rd.Read()
		if err != nil {
			t.Fatalf("read stack record: %v", err)
		}
		s := rec.RawSample
		if int(binary.NativeEndian.Uint64(s)>>32) != pid {
			continue
		}
		n := int64(binary.NativeEndian.Uint64(s[8:]))
		if n < 0 {
			t.Fatalf("bpf_get_stack: error %d", n)
		}
		addrs := make([]uint64, n/8)
		for i := range addrs {
			addrs[i] = binary.NativeEndian.Uint64(s[16+8*i:])
		}
		return addrs
	}
}

// afterPrologue returns the file offset of the instruction after the
// function's "mov %rsp,%rbp" (48 89 e5), searched in its first 64 bytes,
// or the entry when the function sets up no frame pointer.
func afterPrologue(t *testing.T, bin string, entryOff uint64) uint64 {
	t.Helper()
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code := make([]byte, 64)
	if _, err := f.ReadAt(code, int64(entryOff)); err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(code, []byte{0x48, 0x89, 0xe5})
	if i < 0 {
		// Built without frame pointers: there is no chain to complete.
		return entryOff
	}
	return entryOff + uint64(i) + 3
}

// funcFileOffset finds fn's entry in bin with the standard library alone
// (symbol table, else Go's pclntab section), independent of the code under
// test, and returns its file offset.
func funcFileOffset(t *testing.T, bin, fn string) uint64 {
	t.Helper()
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	var addr uint64
	if syms, err := ef.Symbols(); err == nil {
		for _, s := range syms {
			if s.Name == fn && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
				addr = s.Value
			}
		}
	}
	if addr == 0 {
		pcln := ef.Section(".gopclntab")
		if pcln == nil {
			t.Fatalf("%s: no symbol %s and no .gopclntab", bin, fn)
		}
		data, err := pcln.Data()
		if err != nil {
			t.Fatal(err)
		}
		tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, ef.Section(".text").Addr))
		if err != nil {
			t.Fatal(err)
		}
		f := tab.LookupFunc(fn)
		if f == nil {
			t.Fatalf("%s: no function %s in pclntab", bin, fn)
		}
		addr = f.Entry
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			return addr - p.Vaddr + p.Off
		}
	}
	t.Fatalf("%s: %s at %#x is in no load segment", bin, fn, addr)
	return 0
}

// TestUserStacks captures real stacks of test programs with a known call
// chain through a uprobe and bpf_get_stack, lets each program exit, and
// only then symbolizes the stack from what Capture kept.
func TestUserStacks(t *testing.T) {
	dir := t.TempDir()
	goSrc := filepath.Join("testdata", "goprog", "main.go")
	cSrc := filepath.Join("testdata", "cprog.c")
	goLines, cLines := markerLines(t, goSrc), markerLines(t, cSrc)

	type variant struct {
		name  string
		build func(t *testing.T) (bin string, entry uint64)
		slow  string   // the probed function's name in the binary
		want  []string // functions, innermost first
		file  string   // base name of the source file, "" when not expected
		lines map[string]int
		named bool // frames are expected to carry names
		// inlined says, for the first frames, which are inlined calls.
		inlined []bool
		short   bool // built without frame pointers: a short stack and a hint
	}
	goWant := []string{"main.slow", "main.d", "main.c", "main.b", "main.a", "main.main"}
	goInlined := []bool{false, true, false, false, false, false}
	cWant := []string{"slow", "c", "b", "a", "main"}
	goBuild := func(name string, args ...string) func(t *testing.T) (string, uint64) {
		return func(t *testing.T) (string, uint64) {
			bin := filepath.Join(dir, name)
			buildGo(t, bin, goSrc, args...)
			return bin, funcFileOffset(t, bin, "main.slow")
		}
	}
	variants := []variant{
		{name: "go", build: goBuild("goprog"), want: goWant, file: "main.go", lines: goLines, named: true, inlined: goInlined},
		{name: "go-stripped", build: goBuild("goprog-stripped", "-ldflags=-s -w"), want: goWant, file: "main.go", lines: goLines, named: true, inlined: goInlined},
		{name: "go-stripped-pie", build: goBuild("goprog-stripped-pie", "-ldflags=-s -w", "-buildmode=pie"), want: goWant, file: "main.go", lines: goLines, named: true, inlined: goInlined},
		{name: "go-no-section-headers", build: func(t *testing.T) (string, uint64) {
			src := filepath.Join(dir, "goprog-stripped-2")
			buildGo(t, src, goSrc, "-ldflags=-s -w")
			entry := funcFileOffset(t, src, "main.slow")
			bin := filepath.Join(dir, "goprog-noshdr")
			dropSectionHeaders(t, src, bin)
			return bin, entry
		}, want: goWant, file: "main.go", lines: goLines, named: true, inlined: goInlined},
		// Externally linked (as cgo programs are, Debian's prometheus
		// among them): the C start files come before the Go text, whose
		// start only the pclntab's header records.
		{name: "go-external-stripped", build: func(t *testing.T) (string, uint64) {
			src := filepath.Join(dir, "goprog-external")
			buildGo(t, src, goSrc, "-ldflags=-linkmode=external")
			entry := funcFileOffset(t, src, "main.slow")
			bin := filepath.Join(dir, "goprog-external-stripped")
			run(t, "strip", "--strip-all", "-o", bin, src)
			return bin, entry
		}, want: goWant, file: "main.go", lines: goLines, named: true, inlined: goInlined},
		{name: "c", build: func(t *testing.T) (string, uint64) {
			bin := filepath.Join(dir, "cprog")
			buildC(t, bin, cSrc)
			return bin, funcFileOffset(t, bin, "slow")
		}, want: cWant, file: "cprog.c", lines: cLines, named: true},
		{name: "c-stripped", build: func(t *testing.T) (string, uint64) {
			src := filepath.Join(dir, "cprog-2")
			buildC(t, src, cSrc)
			entry := funcFileOffset(t, src, "slow")
			bin := filepath.Join(dir, "cprog-stripped")
			run(t, "strip", "--strip-all", "-o", bin, src)
			return bin, entry
		}, want: cWant},
		{name: "c-no-frame-pointers", build: func(t *testing.T) (string, uint64) {
			bin := filepath.Join(dir, "cprog-nofp")
			// No sibling calls, so that a, b and c still call rather than
			// jump, and only the missing frame pointers cut the stack.
			run(t, "cc", "-O2", "-g", "-fomit-frame-pointer", "-fno-optimize-sibling-calls", "-o", bin, cSrc)
			return bin, funcFileOffset(t, bin, "slow")
		}, short: true},
	}
	probe := newStackProbe(t)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			bin, entry := v.build(t)
			probe.attach(t, bin, entry)
			cmd, stdin := startBlocked(t, bin)
			pid := cmd.Process.Pid
			addrs := probe.read(t, pid)

			s := New(Config{})
			defer s.Close()
			if err := s.Capture(uint32(pid)); err != nil {
				t.Fatalf("capture: %v", err)
			}
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Fatalf("wait: %v", err)
			}
			if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
				t.Fatalf("process %d still exists", pid)
			}
			frames, err := s.User(uint32(pid), addrs)
			if err != nil {
				t.Fatalf("symbolize: %v", err)
			}
			for i, f := range frames {
				t.Logf("#%d %#x %s [%s+%#x %s]", i, f.Addr, f, f.Module, f.Offset, f.BuildID)
			}
			if v.short {
				// The walk finds slow from the registers, then reads
				// whatever %rbp holds as a frame: the chain c, b, a is lost.
				if len(frames) == 0 || frames[0].Function != "slow" {
					t.Fatalf("frame 0 = %+v, want slow", frames)
				}
				for i := 1; i+2 < len(frames); i++ {
					if frames[i].Function == "c" && frames[i+1].Function == "b" && frames[i+2].Function == "a" {
						t.Errorf("stack without frame pointers still has c, b, a at %d", i)
					}
				}
				if h := Hint(frames); h == "" {
					t.Errorf("no hint for a stack without frame pointers: %v", frames)
				} else {
					t.Logf("hint: %s", h)
				}
				return
			}
			inlined := 0
			for _, f := range frames {
				if f.Inlined {
					inlined++
				}
			}
			if len(frames) != len(addrs)+inlined || len(frames) < len(v.want) {
				t.Fatalf("got %d frames (%d inlined) for %d addresses, want at least %d", len(frames), inlined, len(addrs), len(v.want))
			}
			for i, want := range v.inlined {
				if frames[i].Inlined != want || i > 0 && frames[i].Addr != frames[i-1].Addr && frames[i-1].Inlined {
					t.Errorf("frame %d inlined %v, want %v (same address as the frame it is inlined into)", i, frames[i].Inlined, want)
				}
			}
			for i, want := range v.want {
				f := frames[i]
				if f.Module != filepath.Base(bin) {
					t.Errorf("frame %d module %q, want %q", i, f.Module, filepath.Base(bin))
				}
				if !v.named {
					if f.Function != "" || f.Offset == 0 {
						t.Errorf("frame %d of a stripped binary: got %q offset %#x, want module+offset", i, f.Function, f.Offset)
					}
					continue
				}
				if f.Function != want {
					t.Errorf("frame %d function %q, want %q", i, f.Function, want)
				}
				if filepath.Base(f.File) != v.file {
					t.Errorf("frame %d file %q, want %s", i, f.File, v.file)
				}
				short := want[strings.LastIndexByte(want, '.')+1:]
				if i == 0 {
					// The probe sits in slow's prologue, which the line
					// tables give the function's own line or its first.
					if f.Line <= 0 || f.Line > v.lines["line:slow"] {
						t.Errorf("frame 0 line %d, want in slow before line %d", f.Line, v.lines["line:slow"])
					}
					continue
				}
				if wantLine := v.lines["call:"+short]; f.Line != wantLine {
					t.Errorf("frame %d (%s) line %d, want %d (the call)", i, want, f.Line, wantLine)
				}
			}
			if v.named && frames[0].BuildID == "" {
				t.Errorf("no build id on frame 0")
			}
			if strings.HasPrefix(v.name, "go") {
				if h := Hint(frames); h != "" {
					t.Errorf("Hint on a complete Go stack: %q", h)
				}
			}
		})
	}
}

// dropSectionHeaders copies an ELF executable without its section header
// table, as sstrip and some packers leave binaries: the kernel runs it,
// and only program headers remain to find the Go pclntab.
func dropSectionHeaders(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte(elf.ELFMAG)) || b[elf.EI_CLASS] != byte(elf.ELFCLASS64) {
		t.Fatalf("%s: not a 64-bit ELF file", src)
	}
	binary.LittleEndian.PutUint64(b[0x28:], 0) // e_shoff
	binary.LittleEndian.PutUint16(b[0x3c:], 0) // e_shnum
	binary.LittleEndian.PutUint16(b[0x3e:], 0) // e_shstrndx
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	if len(ef.Sections) != 0 {
		t.Fatalf("%s still has %d sections", dst, len(ef.Sections))
	}
}
