//go:build linux && amd64

package collector

import (
	"context"
	"os/exec"
	"strconv"
	"testing"

	usdtsource "github.com/spanwatch/spanwatch/source/usdt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/internal/usdt"
)

// BenchmarkUSDTProgramCost runs bench/usdt/testdata/loop.c's start/done
// pairs (b.N of them, at least 20000) under a source pairing them by
// thread with a fixed name, the cookie fast path where the kernel has
// cookies, and reports each program's own cost from the kernel's BPF
// statistics (run_time_ns / run_cnt): usdt_start and usdt_end, beside a
// bare uprobe on the same start probe that only counts, measured the same
// way first. No bpftrace needed, so it runs on every kernel of the matrix
// (test/vm/run.sh ./collector -- -test.run '^$' -test.bench
// BenchmarkUSDTProgramCost): compare kernels by the ratio to the bare
// program, not in nanoseconds (TCG).
func BenchmarkUSDTProgramCost(b *testing.B) {
	requireBPF(b)
	prog := bpftest.CProgram(b, "usdt-loop")
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enable bpf stats: %v", err)
	}
	defer stats.Close()
	n := max(b.N, 20000)
	loop := func() {
		if out, err := exec.Command(prog, strconv.Itoa(n)).CombinedOutput(); err != nil {
			b.Fatalf("loop: %v\n%s", err, out)
		}
	}
	perRun := func(p *ebpf.Program) float64 {
		st, err := p.Stats()
		if err != nil || st.RunCount == 0 {
			b.Fatalf("stats of %v: %v (%d runs)", p, err, st.RunCount)
		}
		return float64(st.Runtime.Nanoseconds()) / float64(st.RunCount)
	}

	f, err := usdt.Open(prog)
	if err != nil {
		b.Fatal(err)
	}
	start := f.Lookup("bench", "start")
	if len(start) != 1 {
		b.Fatalf("%d bench:start sites", len(start))
	}
	counter, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer counter.Close()
	bare, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.Kprobe, License: "GPL",
		Instructions: asm.Instructions{
			asm.LoadMapPtr(asm.R1, counter.FD()),
			asm.StoreImm(asm.R10, -4, 0, asm.Word),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
			asm.Add.Imm(asm.R1, 1),
			asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer bare.Close()
	ex, err := link.OpenExecutable(prog)
	if err != nil {
		b.Fatal(err)
	}
	l, err := ex.Uprobe("", bare, &link.UprobeOptions{Address: start[0].Offset})
	if err != nil {
		b.Fatal(err)
	}
	loop()
	l.Close()
	bareNs := perRun(bare)

	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	tr, err := usdtsource.Attach(context.Background(), c.SourceCore(), []usdt.SpanSource{{
		Binary: prog, Span: "bench", NameArg: -1, KeyArg: -1, StatusArg: -1, DurationArg: -1, ValueArg: -1,
		Start: usdt.ProbeRef{Provider: "bench", Name: "start"}, End: usdt.ProbeRef{Provider: "bench", Name: "done"},
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	c.Snapshot()
	b.ResetTimer()
	loop()
	b.StopTimer()
	s, _ := c.Snapshot()
	if got := seriesByName(s)["bench"].Count; got != uint64(n) {
		b.Fatalf("%d bench spans, want %d", got, n)
	}
	startNs, endNs := perRun(tr.Program("usdt_start")), perRun(tr.Program("usdt_end"))
	b.ReportMetric(bareNs, "prog-ns/run-bare")
	b.ReportMetric(startNs, "prog-ns/run-start")
	b.ReportMetric(endNs, "prog-ns/run-end")
	b.ReportMetric((startNs+endNs)/2/bareNs, "ratio-to-bare")
	b.Logf("kernel %s, %s objects, cookies %v: start %.0f ns, end %.0f ns, bare %.0f ns a run", kernel.Probe().Release, c.Kernel().Core, tr.HaveCookie(), startNs, endNs, bareNs)
}
