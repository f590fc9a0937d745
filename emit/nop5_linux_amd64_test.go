//go:build linux && amd64

package emit_test

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/markerabi"
	"github.com/spanwatch/spanwatch/source/marker"
)

// haveUprobeSyscall reports whether the kernel optimizes uprobes on
// five-byte nops (x86-64's uprobe syscall, Linux 6.18+: ENXIO when called
// from outside its trampoline, ENOSYS where it does not exist).
func haveUprobeSyscall() bool {
	_, _, errno := unix.Syscall(336, 0, 0, 0)
	return errors.Is(errno, unix.ENXIO)
}

// The words of siteProgram's array map value.
const (
	siteHits    = 0  // times the program ran
	siteWant    = 8  // the pointer the test expects at sp+8
	siteMatches = 16 // runs that read it there
	siteIP      = 24 // the last run's pt_regs->ip
)

// siteProgram loads a uprobe program that counts its runs, reads the word
// at sp+8 (the Go marker's ABI0 argument) and counts the runs that read
// the value the test put in the map, and keeps the probed ip. x86-64's
// struct pt_regs: ip at 128, sp at 152.
func siteProgram(t *testing.T) (*ebpf.Program, *ebpf.Map) {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 32, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe, License: "GPL", Instructions: asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMapValue(asm.R7, m.FD(), 0),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(asm.R7, asm.R1, asm.DWord, siteHits),
		asm.LoadMem(asm.R1, asm.R6, 128, asm.DWord),
		asm.StoreMem(asm.R7, siteIP, asm.R1, asm.DWord),
		asm.LoadMem(asm.R3, asm.R6, 152, asm.DWord),
		asm.Add.Imm(asm.R3, 8),
		asm.Mov.Reg(asm.R1, asm.R10),
		asm.Add.Imm(asm.R1, -8),
		asm.Mov.Imm(asm.R2, 8),
		asm.FnProbeReadUser.Call(),
		asm.JNE.Imm(asm.R0, 0, "out"),
		asm.LoadMem(asm.R1, asm.R10, -8, asm.DWord),
		asm.LoadMapValue(asm.R7, m.FD(), 0),
		asm.LoadMem(asm.R2, asm.R7, siteWant, asm.DWord),
		asm.JNE.Reg(asm.R1, asm.R2, "out"),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(asm.R7, asm.R1, asm.DWord, siteMatches),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	}})
	if err != nil {
		bpftest.SkipUnlessLoaded(t, "uprobe site program", err)
	}
	t.Cleanup(func() { p.Close() })
	return p, m
}

// siteWords reads siteProgram's map value.
func siteWords(t *testing.T, m *ebpf.Map) (hits, want, matches, ip uint64) {
	t.Helper()
	v := make([]byte, 32)
	if err := m.Lookup(uint32(0), &v); err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	return le.Uint64(v[siteHits:]), le.Uint64(v[siteWant:]), le.Uint64(v[siteMatches:]), le.Uint64(v[siteIP:])
}

// symbolOffset returns the file offset of symbol name in the ELF file at path.
func symbolOffset(t *testing.T, path, name string) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name != name {
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Filesz {
				return s.Value - p.Vaddr + p.Off
			}
		}
	}
	t.Fatalf("%s: no symbol %s in an executable segment", path, name)
	return 0
}

// callMarker calls the Go SDK's marker n times, as the SDK does (compiled
// Go code calling the assembly function), and counts the calls after
// which a local of this frame (in registers or on its stack) changed.
//
//go:noinline
func callMarker(ev unsafe.Pointer, n int, seed uint64) (bad int) {
	a, b, c := seed, seed*3+1, seed^0x5a5a
	var frame [16]uint64
	for i := range frame {
		frame[i] = seed + uint64(i)
	}
	for i := 0; i < n; i++ {
		emit.MarkerRaw(ev)
		ok := a == seed && b == seed*3+1 && c == seed^0x5a5a
		for j := range frame {
			ok = ok && frame[j] == seed+uint64(j)
		}
		if !ok {
			bad++
		}
	}
	return bad
}

// TestNop5RedZone answers, on the kernel it runs on, whether a uprobe the
// kernel optimizes on a five-byte nop (Linux 6.18+: the nop becomes a
// call to the uprobe trampoline, which pushes below the stack pointer)
// is safe where the probed code keeps data below the stack pointer (the
// x86-64 red zone of C leaf functions) and at the Go SDK's marker (Go
// code keeps no red zone). The C leaf of testdata/redzone.c keeps four
// locals in its red zone across the nop: there the call must clobber
// them (the reason libspanwatch's marker keeps its one-byte nop; the test
// fails if a kernel stops doing so, for that choice to be revisited). The
// Go marker, attached at its five-byte nop as the collector attaches it,
// must read every argument and leave its caller's frame intact.
func TestNop5RedZone(t *testing.T) {
	bpftest.RequireRoot(t)
	if !haveUprobeSyscall() {
		t.Skip("the kernel does not optimize uprobes on five-byte nops (no uprobe syscall: x86-64 Linux 6.18+)")
	}
	const calls = 20000

	t.Run("C leaf", func(t *testing.T) {
		bin := bpftest.CProgram(t, "redzone")
		run := func() (n, clobbered uint64, site byte) {
			out, err := exec.Command(bin, fmt.Sprint(calls)).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", bin, err, out)
			}
			if _, err := fmt.Sscanf(string(out), "calls %d clobbered %d site %x", &n, &clobbered, &site); err != nil {
				t.Fatalf("%s printed %q: %v", bin, out, err)
			}
			return n, clobbered, site
		}
		// Without a uprobe the leaf finds its locals: the check works.
		if _, clobbered, _ := run(); clobbered != 0 {
			t.Fatalf("without a uprobe, %d of %d calls lost their red zone", clobbered, calls)
		}
		prog, m := siteProgram(t)
		ex, err := link.OpenExecutable(bin)
		if err != nil {
			t.Fatal(err)
		}
		l, err := ex.Uprobe("", prog, &link.UprobeOptions{Address: symbolOffset(t, bin, "redzone_site")})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		n, clobbered, site := run()
		hits, _, _, _ := siteWords(t, m)
		if hits != n {
			t.Fatalf("the uprobe ran %d times for %d calls", hits, n)
		}
		if site != 0xe8 {
			t.Fatalf("the probed nop5 starts %#x after the run, not a call (0xe8): the kernel has the uprobe syscall but did not optimize the uprobe", site)
		}
		t.Logf("C leaf, optimized uprobe: %d of %d calls lost their red zone", clobbered, n)
		if clobbered == 0 {
			t.Errorf("the optimized uprobe left the C leaf's red zone intact in %d calls: this kernel no longer clobbers it, and libspanwatch's marker could use a five-byte nop too", n)
		}
	})

	t.Run("Go marker", func(t *testing.T) {
		exe, found := ownMarker(t)
		prog, m := siteProgram(t)
		ex, err := link.OpenExecutable(exe)
		if err != nil {
			t.Fatal(err)
		}
		site := found.Off + markerabi.GoNop5Offset
		l, err := ex.Uprobe("", prog, &link.UprobeOptions{Address: site})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ev := new([64]byte)
		want := uint64(uintptr(unsafe.Pointer(ev)))
		value := make([]byte, 32)
		binary.LittleEndian.PutUint64(value[siteWant:], want)
		if err := m.Update(uint32(0), value, ebpf.UpdateExist); err != nil {
			t.Fatal(err)
		}
		// Four goroutines at once, on as many threads as Go gives them.
		const workers = 4
		var wg sync.WaitGroup
		bad := make([]int, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				bad[w] = callMarker(unsafe.Pointer(ev), calls/workers, uint64(w)<<32|0xc0ffee)
			}()
		}
		wg.Wait()
		hits, got, matches, ip := siteWords(t, m)
		if got != want {
			t.Fatalf("the map holds %#x, want %#x", got, want)
		}
		if hits != calls || matches != calls {
			t.Errorf("%d calls: the uprobe ran %d times and read the argument at sp+8 in %d", calls, hits, matches)
		}
		for w, b := range bad {
			if b != 0 {
				t.Errorf("goroutine %d: %d calls changed a local of the marker's caller", w, b)
			}
		}
		// The uprobe reports the site as its ip (the stack's first
		// frame, the collector's anchor), and the site is now a call.
		mem, err := os.Open("/proc/self/mem")
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		code := make([]byte, 5)
		if _, err := mem.ReadAt(code, int64(ip)); err != nil {
			t.Fatalf("read the code at the reported ip %#x: %v", ip, err)
		}
		if bias := ip - (found.Addr + markerabi.GoNop5Offset); bias%uint64(os.Getpagesize()) != 0 {
			t.Errorf("the uprobe reported ip %#x, not the five-byte nop (file address %#x)", ip, found.Addr+markerabi.GoNop5Offset)
		}
		if code[0] != 0xe8 {
			t.Fatalf("the marker's nop5 reads % x while probed, not a call: the kernel has the uprobe syscall but did not optimize the uprobe", code)
		}
		t.Logf("Go marker, optimized uprobe (% x): %d calls, %d arguments read, 0 locals changed", code, hits, matches)
	})

	// The collector's marker source attaches at the nop5 on this
	// kernel: after one span the site is the kernel's call.
	t.Run("collector", func(t *testing.T) {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		ef, err := elf.Open(exe)
		if err != nil {
			t.Fatal(err)
		}
		pie := ef.Type != elf.ET_EXEC
		ef.Close()
		if pie {
			t.Skip("a PIE test binary: the marker's run-time address is not its file address")
		}
		f, err := os.Open(exe)
		if err != nil {
			t.Fatal(err)
		}
		found, err := marker.Find(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1, MarkerBinaries: []string{exe}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		emit.Record(&emit.Finished{Name: "nop5.span", Duration: time.Millisecond, Start: time.Now()})
		mem, err := os.Open("/proc/self/mem")
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		code := make([]byte, 6)
		if _, err := mem.ReadAt(code, int64(found.Addr)); err != nil {
			t.Fatal(err)
		}
		if code[0] != 0x90 || code[markerabi.GoNop5Offset] != 0xe8 {
			t.Errorf("with the collector attached the marker reads % x: want the nop, then the kernel's call (e8) at the nop5", code)
		}
	})
}

// ownMarker returns this test binary's path and its Go marker, which must
// have the five-byte nop site (internal/markerabi.GoMarkerCodeAMD64).
func ownMarker(tb testing.TB) (string, marker.Found) {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	f, err := os.Open(exe)
	if err != nil {
		tb.Fatal(err)
	}
	found, err := marker.Find(f)
	f.Close()
	if err != nil {
		tb.Fatal(err)
	}
	if !found.Nop5 {
		tb.Fatal("the marker has no five-byte nop site (want internal/markerabi.GoMarkerCodeAMD64)")
	}
	return exe, found
}
