//go:build linux && amd64

package usdtbench

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/spanwatch/spanwatch/bench/internal/loopbench"
	"github.com/spanwatch/spanwatch/internal/usdt"
)

// floorPage is the stride of the page-touching programs: one load per
// 4 KiB page of an array map's value.
const floorPage = 4096

// A floorProg is one hand-written program of BenchmarkUprobeFloor: what
// a piece of a tracer's work costs on its own, where the machine puts it.
type floorProg struct {
	name string
	// loads words are read from the map's value, stride bytes apart from
	// its start (at most floorPages pages of it).
	loads, stride int32
	// calls are helpers called first, in order (no arguments).
	calls []asm.BuiltinFunc
}

// floorProgs are at most nine: the testing package keeps ten lines of a
// benchmark's log.
var floorProgs = []floorProg{
	{name: "empty"},
	{name: "ktime", calls: []asm.BuiltinFunc{asm.FnKtimeGetNs}},
	{name: "jiffies", calls: []asm.BuiltinFunc{asm.FnJiffies64}},
	{name: "boot", calls: []asm.BuiltinFunc{asm.FnKtimeGetBootNs}},
	{name: "pidtgid", calls: []asm.BuiltinFunc{asm.FnGetCurrentPidTgid}},
	{name: "lines-32", loads: 32, stride: 64},
	{name: "pages-1", loads: 1, stride: floorPage},
	{name: "pages-4", loads: 4, stride: floorPage},
	{name: "pages-16", loads: 16, stride: floorPage},
}

// insns builds p's instructions over the array map m (one value of
// floorPages pages).
func (p floorProg) insns(m *ebpf.Map) asm.Instructions {
	var in asm.Instructions
	for _, fn := range p.calls {
		in = append(in, fn.Call())
	}
	if p.loads > 0 {
		in = append(in, asm.LoadMapValue(asm.R1, m.FD(), 0))
		for i := int32(0); i < p.loads; i++ {
			if i > 0 {
				in = append(in, asm.Add.Imm(asm.R1, p.stride))
			}
			in = append(in, asm.LoadMem(asm.R2, asm.R1, 0, asm.DWord))
		}
	}
	return append(in, asm.Mov.Imm(asm.R0, 0), asm.Return())
}

const floorPages = 16

// clockProgram loads a kprobe-type program that calls bpf_ktime_get_ns and
// returns: the least a tracer that times spans runs at each probe.
func clockProgram() (*ebpf.Program, error) {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe, License: "GPL", Instructions: asm.Instructions{
		asm.FnKtimeGetNs.Call(), asm.Mov.Imm(asm.R0, 0), asm.Return(),
	}})
	if err != nil {
		return nil, fmt.Errorf("load the clock program: %w", err)
	}
	return p, nil
}

// BenchmarkUprobeFloor measures, on the machine it runs on, what the parts
// of a tracer's per-hit work cost: an empty program, one clock read
// (bpf_ktime_get_ns, or bpf_ktime_get_boot_ns as bpftrace's nsecs), one
// bpf_jiffies64, one helper that reads the task (pid_tgid), loads from 32
// cache lines of one page, and loads from 1, 4 and 16 distinct pages. Each program runs twice: as a uprobe on the loop's
// bench:start (the kernel entered from user space at each hit, as a
// tracer's programs are; cost from the kernel's BPF statistics) and as a
// socket filter run 100,000 times in a row by BPF_PROG_TEST_RUN (no entry
// from user space between runs: caches and TLB warm). The difference
// between the two is what coming from user space costs each part, which
// depends on the CPU, its mitigations and its virtualization (on a PVM
// guest a clock read cost 115-225 ns from a uprobe against 31-41 ns warm,
// a page about 6 ns): run it beside BenchmarkUSDTvsBpftrace to read that
// benchmark's figures.
func BenchmarkUprobeFloor(b *testing.B) {
	dir := requireTools(b)
	defer loopbench.EnableStats(b).Close()
	loop := filepath.Join(dir, "loop")
	f, err := usdt.Open(loop)
	if err != nil {
		b.Fatal(err)
	}
	sites := f.Lookup("bench", "start")
	if len(sites) != 1 {
		b.Fatalf("%d bench:start sites, want 1", len(sites))
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: floorPages * floorPage, MaxEntries: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ex, err := link.OpenExecutable(loop)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		for _, p := range floorProgs {
			up, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe, License: "GPL", Instructions: p.insns(m)})
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			l, err := ex.Uprobe("", up, &link.UprobeOptions{Address: sites[0].Offset})
			if err != nil {
				up.Close()
				b.Fatalf("%s: %v", p.name, err)
			}
			s0 := loopbench.Stats(b, up)
			perPair := runOnce(b, loop)
			s1 := loopbench.Stats(b, up)
			l.Close()
			up.Close()
			if got := s1.Sub(s0).Runs; got != pairsPerRun {
				b.Fatalf("%s: %d runs, want %d", p.name, got, pairsPerRun)
			}
			sf, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL", Instructions: p.insns(m)})
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			_, d, err := sf.Benchmark(make([]byte, 64), 100000, nil)
			if err != nil {
				sf.Close()
				b.Fatalf("%s: test run: %v", p.name, err)
			}
			sf.Close()
			trap := s1.Sub(s0).PerRun()
			warm := float64(d.Nanoseconds())
			b.ReportMetric(trap, p.name+"-uprobe-ns/run")
			b.ReportMetric(warm, p.name+"-testrun-ns/run")
			b.Logf("%-13s uprobe %6.1f ns/run, test run %5.1f ns/run (loop %.0f ns per start/done pair, one probe traced)",
				p.name, trap, warm, perPair)
		}
	}
}
