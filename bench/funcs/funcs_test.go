//go:build linux && amd64

package funcsbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bench/internal/loopbench"
	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/source/function"
)

const (
	callsPerRun = 200000 // calls of work() per loop run
	trios       = 5      // baseline, spanwatch, bpftrace runs, in turn
	spanName    = "bench_func"
)

func requireTools(b *testing.B) (loop string) {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("needs root: BPF, uprobes and kernel BPF statistics")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		b.Skip("no C compiler (cc): install build-essential")
	}
	if _, err := exec.LookPath("bpftrace"); err != nil {
		b.Skip("no bpftrace on PATH: install bpftrace")
	}
	loop = filepath.Join(b.TempDir(), "loop")
	// Debian's default flags (dpkg-buildflags): the function is compiled
	// the way a distribution compiles it.
	args := []string{"-O2", "-g", "-fstack-protector-strong", "-o", loop, "testdata/loop.c"}
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		b.Fatalf("cc %v: %v: %s", args, err, out)
	}
	return loop
}

// runOnce runs the loop for callsPerRun calls and returns its ns per
// call.
func runOnce(b *testing.B, loop string) float64 {
	b.Helper()
	return runN(b, loop, callsPerRun)
}

// runN runs the loop for n calls and returns its ns per call.
func runN(b *testing.B, loop string, n int) float64 {
	b.Helper()
	return loopbench.Run(b, loop, strconv.Itoa(n))
}

// A tracer is one side of the comparison, attached.
type tracer struct {
	entry, ret *ebpf.Program
	close      func()
	// spans returns the spans the tracer aggregated so far, when it can
	// tell (spanwatch's snapshot); -1 otherwise.
	spans func() int64
}

// programsNamed opens the programs process pid holds whose name keep
// accepts, keyed by name; when two share a name, by name and their
// count of instructions ("work/12").
func programsNamed(pid int, keep func(string) bool) map[string]*ebpf.Program {
	out := map[string]*ebpf.Program{}
	seen := map[ebpf.ProgramID]bool{}
	for _, id := range loopbench.ProgIDsOf(pid) {
		if seen[id] {
			continue
		}
		seen[id] = true
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		info, err := p.Info()
		if err != nil || !keep(info.Name) {
			p.Close()
			continue
		}
		key := info.Name
		if out[key] != nil {
			insns, _ := info.Instructions()
			key = fmt.Sprintf("%s/%d", key, len(insns))
		}
		if out[key] != nil {
			p.Close()
			continue
		}
		out[key] = p
	}
	return out
}

// attachSpanwatch loads spanwatch's collector core and one function
// source on loop's work(). Its programs, func_entry and func_return, are
// found among those this process holds: source/function does not hand
// them out.
func attachSpanwatch(b *testing.B, loop string) tracer {
	b.Helper()
	return attachSpanwatchReturns(b, loop, function.ReturnsInstructions)
}

// attachSpanwatchReturns is attachSpanwatch with the returns seen as
// returns says: by func_return on the return instruction, or by
// func_uretprobe.
func attachSpanwatchReturns(b *testing.B, loop string, returns function.Returns) tracer {
	b.Helper()
	retProg := "func_return"
	if returns == function.ReturnsUretprobe {
		retProg = "func_uretprobe"
	}
	ctx := context.Background()
	col, err := collector.New(ctx, collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	g, err := glob.Compile("work")
	if err != nil {
		b.Fatal(err)
	}
	src, err := function.Attach(ctx, col.SourceCore(), []function.Target{{Binary: loop, Functions: g, Span: spanName, Returns: returns}})
	if err != nil {
		col.Close()
		b.Fatal(err)
	}
	if tr := src.Traced(); len(tr) != 1 || len(tr[0].Func.Returns) != 1 {
		b.Fatalf("traced %+v, want work with one return site", tr)
	}
	progs := programsNamed(os.Getpid(), func(n string) bool { return n == "func_entry" || n == retProg })
	if progs["func_entry"] == nil || progs[retProg] == nil {
		b.Fatalf("spanwatch's programs not found: %v", progs)
	}
	var total int64
	return tracer{
		entry: progs["func_entry"],
		ret:   progs[retProg],
		close: func() {
			for _, p := range progs {
				p.Close()
			}
			if c, err := src.Counts(); err != nil || len(c) != 0 {
				b.Errorf("function source counters %v (%v), want none", c, err)
			}
			src.Close()
			col.Close()
		},
		spans: func() int64 {
			snap, err := col.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			for _, s := range snap.Series {
				if s.Span == spanName {
					total += int64(s.Count)
				}
			}
			return total
		},
	}
}

// bpftraceScript is the classic entry/return latency script, the return
// by a uretprobe.
func bpftraceScript(loop string) string {
	return fmt.Sprintf(`uprobe:%[1]s:work { @start[tid] = nsecs; }
uretprobe:%[1]s:work { @h[comm] = hist(nsecs - @start[tid]); delete(@start[tid]); }`, loop)
}

// attachBpftrace runs bpftrace on loop's work(). Its programs are the
// two kprobe-type programs named work that its process holds; the
// entry's is the shorter.
func attachBpftrace(b *testing.B, loop string) tracer {
	b.Helper()
	cmd := exec.Command("bpftrace", "-e", bpftraceScript(loop))
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stop := func() { cmd.Process.Signal(syscall.SIGINT); cmd.Process.Kill(); cmd.Wait() }
	sc := bufio.NewScanner(stdout)
	attached := false
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "Attaching") {
			attached = true
			break
		}
	}
	if !attached {
		stop()
		b.Fatal("bpftrace did not attach")
	}
	go io.Copy(io.Discard, stdout)
	var progs map[string]*ebpf.Program
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, p := range progs {
			p.Close()
		}
		progs = programsNamed(cmd.Process.Pid, func(n string) bool { return n == "work" })
		if len(progs) == 2 {
			break
		}
	}
	if len(progs) != 2 {
		stop()
		b.Fatalf("bpftrace's programs not found (got %d)", len(progs))
	}
	var ps []*ebpf.Program
	for _, p := range progs {
		ps = append(ps, p)
	}
	size := func(p *ebpf.Program) int {
		info, err := p.Info()
		if err != nil {
			b.Fatal(err)
		}
		insns, _ := info.Instructions()
		return len(insns)
	}
	if size(ps[0]) > size(ps[1]) {
		ps[0], ps[1] = ps[1], ps[0]
	}
	// bpftrace enables its probes right after printing "Attaching".
	time.Sleep(500 * time.Millisecond)
	return tracer{
		entry: ps[0],
		ret:   ps[1],
		close: func() { ps[0].Close(); ps[1].Close(); stop() },
		spans: func() int64 { return -1 },
	}
}

// figures are one comparison's results.
type figures struct {
	swEntry, swRet, btEntry, btRet float64 // ns per program run
	base, sw, bt                   float64 // median ns per call
	swAdded, btAdded, addedRatio   float64 // ns per call; median of per-trio ratios
	ratioMin, ratioMax             float64 // the per-trio ratios' range
}

// compare runs the bare, spanwatch-traced and bpftrace-traced copies of
// the loop in turn (rotating which goes first), trios times, with both
// tracers attached throughout, so drift in the machine's speed hits all
// three.
func compare(b *testing.B, base, swLoop, btLoop string, sw, bt tracer) figures {
	b.Helper()
	e0, r0 := loopbench.Stats(b, sw.entry), loopbench.Stats(b, sw.ret)
	be0, br0 := loopbench.Stats(b, bt.entry), loopbench.Stats(b, bt.ret)
	var bases, sws, bts, ratios []float64
	for k := 0; k < trios; k++ {
		var x [3]float64
		for i := 0; i < 3; i++ {
			switch (i + k) % 3 {
			case 0:
				x[0] = runOnce(b, base)
			case 1:
				x[1] = runOnce(b, swLoop)
			case 2:
				x[2] = runOnce(b, btLoop)
			}
		}
		bases, sws, bts = append(bases, x[0]), append(sws, x[1]), append(bts, x[2])
		ratios = append(ratios, (x[1]-x[0])/(x[2]-x[0]))
	}
	e1, r1 := loopbench.Stats(b, sw.entry), loopbench.Stats(b, sw.ret)
	be1, br1 := loopbench.Stats(b, bt.entry), loopbench.Stats(b, bt.ret)
	if n := sw.spans(); n != callsPerRun*trios {
		b.Fatalf("spanwatch aggregated %d spans, want %d", n, callsPerRun*trios)
	}
	sorted := append([]float64(nil), ratios...)
	sort.Float64s(sorted)
	f := figures{
		swEntry: e1.Sub(e0).PerRun(), swRet: r1.Sub(r0).PerRun(),
		btEntry: be1.Sub(be0).PerRun(), btRet: br1.Sub(br0).PerRun(),
		base: loopbench.Median(bases), sw: loopbench.Median(sws), bt: loopbench.Median(bts),
		addedRatio: loopbench.Median(ratios), ratioMin: sorted[0], ratioMax: sorted[len(sorted)-1],
	}
	f.swAdded, f.btAdded = f.sw-f.base, f.bt-f.base
	return f
}

// BenchmarkFuncVsBpftrace compares spanwatch's function source and
// bpftrace's uprobe + uretprobe on the same C function in one run: each
// traces its own copy of the loop, both attached at once, and the copies
// run in turn with an untraced one. Run with -benchtime 1x: each
// iteration is a full comparison.
func BenchmarkFuncVsBpftrace(b *testing.B) {
	loop := requireTools(b)
	defer loopbench.EnableStats(b).Close()
	for i := 0; i < b.N; i++ {
		base, swLoop, btLoop := loopbench.Copies(b, loop)
		sw := attachSpanwatch(b, swLoop)
		bt := attachBpftrace(b, btLoop)
		f := compare(b, base, swLoop, btLoop, sw, bt)
		bt.close()
		sw.close()
		swProg, btProg := f.swEntry+f.swRet, f.btEntry+f.btRet
		b.ReportMetric(f.swEntry, "sw-entry-ns/run")
		b.ReportMetric(f.swRet, "sw-return-ns/run")
		b.ReportMetric(f.btEntry, "bt-entry-ns/run")
		b.ReportMetric(f.btRet, "bt-return-ns/run")
		b.ReportMetric(swProg/btProg, "prog-cost-ratio")
		b.ReportMetric(f.swAdded, "sw-added-ns/call")
		b.ReportMetric(f.btAdded, "bt-added-ns/call")
		b.ReportMetric(f.addedRatio, "added-ratio")
		b.Logf("median ns per call over %d trios of %d calls: bare %.1f, spanwatch %.0f, bpftrace %.0f", trios, callsPerRun, f.base, f.sw, f.bt)
		b.Logf("BPF program cost (run_time_ns/run_cnt): spanwatch entry %.0f return %.0f (per call %.0f); bpftrace entry %.0f return %.0f (per call %.0f); ratio %.2f",
			f.swEntry, f.swRet, swProg, f.btEntry, f.btRet, btProg, swProg/btProg)
		b.Logf("added per call: spanwatch %.0f ns, bpftrace %.0f ns; median per-trio ratio %.2f (range %.2f-%.2f; goal <= 0.7)", f.swAdded, f.btAdded, f.addedRatio, f.ratioMin, f.ratioMax)
	}
}
