//go:build linux && amd64

package emit_test

import (
	"context"
	"debug/elf"
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/internal/markerabi"
)

// BenchmarkMarkerNop5 measures, in one run, what a span costs the
// emitting thread when the collector's marker program is attached at the
// Go marker's one-byte nop (a trap per span: every kernel, and every
// kernel before 6.18) against its five-byte nop (Linux 6.18+ optimizes
// that uprobe into a call and a syscall, no trap), and the same two sites
// with an empty program (what the mechanism alone costs). The collector
// loads and attaches its program (at the five-byte nop), then is closed;
// the benchmark holds the program and attaches it itself, at each site in
// turn, rounds times, through the link the collector uses (uprobe_multi
// where the kernel has it), with the enable word counted as the
// collector's link counts it. Each phase records n spans with emit.Record.
// The figures are the emitting thread's CPU time per span (user and
// kernel: the trap, or the call and syscall, and the program; medians of
// the rounds; CPU time rather than wall time, which a loaded machine
// inflates with waits for a CPU) and the program's own time per run
// (kernel BPF stats).
func BenchmarkMarkerNop5(b *testing.B) {
	if os.Geteuid() != 0 || emit.Mode() != "marker" {
		b.Skip("needs root and the marker mode")
	}
	if !haveUprobeSyscall() {
		b.Skip("the kernel does not optimize uprobes on five-byte nops (no uprobe syscall: x86-64 Linux 6.18+)")
	}
	exe, found := ownMarker(b)
	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1, MarkerBinaries: []string{exe}})
	if err != nil {
		b.Fatal(err)
	}
	prog := markerProgram(b)
	defer prog.Close()
	c.Close()
	ex, err := link.OpenExecutable(exe)
	if err != nil {
		b.Fatal(err)
	}
	// The program was loaded for the link the collector uses: an
	// uprobe_multi link where the kernel has them (6.6+).
	multi := true
	if l, err := ex.UprobeMulti(nil, prog, &link.UprobeMultiOptions{Addresses: []uint64{found.Off}}); err != nil {
		multi = false
	} else {
		l.Close()
	}
	emptySpec := &ebpf.ProgramSpec{Type: ebpf.Kprobe, License: "GPL", Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}}
	if multi {
		emptySpec.AttachType = ebpf.AttachTraceUprobeMulti
	}
	empty, err := ebpf.NewProgram(emptySpec)
	if err != nil {
		b.Fatal(err)
	}
	defer empty.Close()
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enable bpf stats: %v", err)
	}
	defer stats.Close()
	attach := func(p *ebpf.Program, off uint64) link.Link {
		var l link.Link
		if multi {
			l, err = ex.UprobeMulti(nil, p, &link.UprobeMultiOptions{Addresses: []uint64{off}, RefCtrOffsets: []uint64{found.Sem}})
		} else {
			l, err = ex.Uprobe("", p, &link.UprobeOptions{Address: off, RefCtrOffset: found.Sem})
		}
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	// In a non-PIE binary (go test's), the site's address is its
	// run-time address: check that the kernel did optimize it.
	var optimized func(string)
	if ef, err := elf.Open(exe); err == nil {
		if ef.Type == elf.ET_EXEC {
			optimized = func(name string) {
				mem, err := os.Open("/proc/self/mem")
				if err != nil {
					b.Fatal(err)
				}
				defer mem.Close()
				code := make([]byte, 1)
				if _, err := mem.ReadAt(code, int64(found.Addr+markerabi.GoNop5Offset)); err != nil {
					b.Fatal(err)
				}
				if code[0] != 0xe8 {
					b.Fatalf("%s: the nop5 reads %#x, not a call: the kernel did not optimize the uprobe", name, code[0])
				}
			}
		}
		ef.Close()
	}
	n := max(b.N, 20000)
	const rounds = 7
	span := &emit.Finished{Name: "bench.span", Duration: time.Millisecond, Start: time.Now()}
	type phase struct {
		name string
		prog *ebpf.Program
		off  uint64
		cpu  []time.Duration // the thread's CPU time per span, one a round
		bpf  []time.Duration // the program's run time per run, one a round
	}
	phases := []*phase{
		{name: "marker-nop", prog: prog, off: found.Off},
		{name: "marker-nop5", prog: prog, off: found.Off + markerabi.GoNop5Offset},
		{name: "empty-nop", prog: empty, off: found.Off},
		{name: "empty-nop5", prog: empty, off: found.Off + markerabi.GoNop5Offset},
	}
	b.ResetTimer()
	for range rounds {
		for _, p := range phases {
			l := attach(p.prog, p.off)
			s0, err := p.prog.Stats()
			if err != nil {
				b.Fatal(err)
			}
			runtime.LockOSThread()
			start := threadCPU(b)
			for range n {
				emit.Record(span)
			}
			cpu := threadCPU(b) - start
			runtime.UnlockOSThread()
			if p.off != found.Off && optimized != nil {
				optimized(p.name)
			}
			s1, err := p.prog.Stats()
			if err != nil {
				b.Fatal(err)
			}
			l.Close()
			runs := s1.RunCount - s0.RunCount
			if runs != uint64(n) {
				b.Fatal(errors.New(p.name + ": the program did not run once a span"))
			}
			p.cpu = append(p.cpu, cpu/time.Duration(n))
			p.bpf = append(p.bpf, (s1.Runtime-s0.Runtime)/time.Duration(runs))
		}
	}
	b.StopTimer()
	median := func(ds []time.Duration) time.Duration {
		s := append([]time.Duration(nil), ds...)
		for i := range s {
			for j := i + 1; j < len(s); j++ {
				if s[j] < s[i] {
					s[i], s[j] = s[j], s[i]
				}
			}
		}
		return s[len(s)/2]
	}
	for _, p := range phases {
		b.ReportMetric(float64(median(p.cpu).Nanoseconds()), p.name+"-ns/span")
		b.ReportMetric(float64(median(p.bpf).Nanoseconds()), p.name+"-bpf-ns/run")
		b.Logf("%-12s per span %v (rounds %v), program %v per run", p.name, median(p.cpu), p.cpu, median(p.bpf))
	}
	ratio := float64(median(phases[1].cpu)) / float64(median(phases[0].cpu))
	floor := float64(median(phases[3].cpu)) / float64(median(phases[2].cpu))
	b.ReportMetric(ratio, "nop5/nop")
	b.ReportMetric(floor, "empty-nop5/nop")
	b.Logf("per span, the marker program at the nop5 against the nop: %.2fx (goal 0.6x); empty program: %.2fx", ratio, floor)
}
