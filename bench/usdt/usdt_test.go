//go:build linux && amd64

package usdtbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	usdtsource "github.com/spanwatch/spanwatch/source/usdt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/spanwatch/spanwatch/bench/internal/loopbench"
	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/usdt"
)

const (
	pairsPerRun = 200000 // start/done pairs per loop run
	trios       = 9      // baseline, spanwatch, bpftrace runs, in turn
)

func requireTools(b *testing.B) (dir string) {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("needs root: BPF, uprobes and kernel BPF statistics")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		b.Skip("no C compiler (cc): install build-essential")
	}
	if _, err := os.Stat("/usr/include/x86_64-linux-gnu/sys/sdt.h"); err != nil {
		b.Skip("no sys/sdt.h: install systemtap-sdt-dev")
	}
	if _, err := exec.LookPath("bpftrace"); err != nil {
		b.Skip("no bpftrace on PATH: install bpftrace")
	}
	dir = b.TempDir()
	for _, v := range []struct {
		name  string
		flags []string
	}{{"loop", nil}, {"loop-nop5", []string{"-DNOP5"}}} {
		args := append([]string{"-O2", "-o", filepath.Join(dir, v.name)}, v.flags...)
		args = append(args, "testdata/loop.c")
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			b.Fatalf("cc %v: %v: %s", args, err, out)
		}
	}
	return dir
}

// runOnce runs the loop for pairsPerRun pairs and returns its ns per
// start/done pair.
func runOnce(b *testing.B, loop string, args ...string) float64 {
	b.Helper()
	return loopbench.Run(b, loop, append([]string{strconv.Itoa(pairsPerRun)}, args...)...)
}

// A tracer is one side of the comparison, attached.
type tracer struct {
	start, done *ebpf.Program
	close       func()
	// spans returns the spans the tracer aggregated so far, when it can
	// tell (spanwatch's snapshot); -1 otherwise.
	spans func() int64
}

// attachSpanwatch loads spanwatch's collector core and one USDT source
// (bench:start/bench:done paired by thread, fixed name) on loop. With nop5
// it attaches at the nop5 of "nop; nop5" sites.
func attachSpanwatch(b *testing.B, loop string, nop5 bool) tracer {
	b.Helper()
	ctx := context.Background()
	col, err := collector.New(ctx, collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	tr, err := usdt.NewTracer(usdt.TracerConfig{Maps: col.Maps(), Core: col.Kernel().Core, OptimizeNop5: nop5})
	if err != nil {
		col.Close()
		b.Fatal(err)
	}
	closeAll := func() { tr.Close(); col.Close() }
	if err := tr.Add(ctx, usdt.SpanSource{
		Binary: loop, Span: "bench", NameArg: -1, KeyArg: -1, StatusArg: -1, DurationArg: -1,
		Start: usdt.ProbeRef{Provider: "bench", Name: "start"},
		End:   usdt.ProbeRef{Provider: "bench", Name: "done"},
	}); err != nil {
		closeAll()
		b.Fatal(err)
	}
	for _, s := range tr.Sites() {
		if nop5 && !s.Probe.Nop5 {
			closeAll()
			b.Fatalf("%s is not a nop;nop5 site", s.Probe.FullName())
		}
	}
	var total int64
	return tracer{
		start: tr.Program("usdt_start"),
		done:  tr.Program("usdt_end"),
		close: closeAll,
		spans: func() int64 {
			snap, err := col.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			for _, s := range snap.Series {
				if s.Span == "bench" {
					total += int64(s.Count)
				}
			}
			return total
		},
	}
}

// bpftraceScript is the classic start/done latency script.
func bpftraceScript(loop string) string {
	return fmt.Sprintf(`usdt:%[1]s:bench:start { @s[tid] = nsecs; }
usdt:%[1]s:bench:done { @h = hist(nsecs - @s[tid]); delete(@s[tid]); }`, loop)
}

// attachBpftrace runs bpftrace on loop's probes. Its programs are the
// kprobe-type programs named start and done that its process holds.
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
	progs := map[string]*ebpf.Program{}
	deadline := time.Now().Add(10 * time.Second)
	for len(progs) < 2 && time.Now().Before(deadline) {
		for _, id := range loopbench.ProgIDsOf(cmd.Process.Pid) {
			p, err := ebpf.NewProgramFromID(id)
			if err != nil {
				continue
			}
			info, err := p.Info()
			if err != nil || (info.Name != "start" && info.Name != "done") || progs[info.Name] != nil {
				p.Close()
				continue
			}
			progs[info.Name] = p
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(progs) < 2 {
		stop()
		b.Fatalf("bpftrace's programs not found (got %d)", len(progs))
	}
	// bpftrace enables its probes right after printing "Attaching".
	time.Sleep(500 * time.Millisecond)
	return tracer{
		start: progs["start"],
		done:  progs["done"],
		close: func() { progs["start"].Close(); progs["done"].Close(); stop() },
		spans: func() int64 { return -1 },
	}
}

// attachFloor attaches the floor tracer to loop's bench:start and
// bench:done (at the call site, where bpftrace attaches): a program that
// reads the clock and does nothing else (clockProgram). Every tracer that
// times a span reads the clock once per probe, so the floor is what the
// machine charges any such tracer before it does any work of its own: the
// trap, the program's entry and bpf_ktime_get_ns, which on some machines
// costs several times what the rest of a program does
// (BenchmarkUprobeFloor).
func attachFloor(b *testing.B, loop string) tracer {
	b.Helper()
	f, err := usdt.Open(loop)
	if err != nil {
		b.Fatal(err)
	}
	ex, err := link.OpenExecutable(loop)
	if err != nil {
		b.Fatal(err)
	}
	var progs []*ebpf.Program
	var links []link.Link
	closeAll := func() {
		for _, l := range links {
			l.Close()
		}
		for _, p := range progs {
			p.Close()
		}
	}
	for _, name := range []string{"start", "done"} {
		sites := f.Lookup("bench", name)
		if len(sites) != 1 {
			closeAll()
			b.Fatalf("%d bench:%s sites, want 1", len(sites), name)
		}
		p, err := clockProgram()
		if err != nil {
			closeAll()
			b.Fatal(err)
		}
		progs = append(progs, p)
		l, err := ex.Uprobe("", p, &link.UprobeOptions{Address: sites[0].Offset})
		if err != nil {
			closeAll()
			b.Fatalf("attach floor at bench:%s: %v", name, err)
		}
		links = append(links, l)
	}
	return tracer{start: progs[0], done: progs[1], close: closeAll, spans: func() int64 { return -1 }}
}

// figures are one comparison's results.
type figures struct {
	swStart, swDone, btStart, btDone float64 // ns per program run
	flStart, flDone                  float64 // the floor's, ns per program run
	base, sw, bt, fl                 float64 // median ns per pair
	swAdded, btAdded, addedRatio     float64 // ns per probe hit; median of per-round ratios
	flAdded, addedAboveRatio         float64 // the floor's ns per hit; median per-round ratio above it
}

// compare runs the bare, spanwatch-traced, bpftrace-traced and
// floor-traced copies of the loop in turn (rotating which goes first),
// trios times, with the three tracers attached throughout, so drift in the
// machine's speed hits all four.
func compare(b *testing.B, base, swLoop, btLoop, flLoop string, sw, bt, fl tracer) figures {
	b.Helper()
	s0, d0 := loopbench.Stats(b, sw.start), loopbench.Stats(b, sw.done)
	bs0, bd0 := loopbench.Stats(b, bt.start), loopbench.Stats(b, bt.done)
	fs0, fd0 := loopbench.Stats(b, fl.start), loopbench.Stats(b, fl.done)
	var bases, sws, bts, fls, ratios, aboves []float64
	for k := 0; k < trios; k++ {
		var x [4]float64
		for i := 0; i < 4; i++ {
			switch (i + k) % 4 {
			case 0:
				x[0] = runOnce(b, base)
			case 1:
				x[1] = runOnce(b, swLoop)
			case 2:
				x[2] = runOnce(b, btLoop)
			case 3:
				x[3] = runOnce(b, flLoop)
			}
		}
		bases, sws, bts, fls = append(bases, x[0]), append(sws, x[1]), append(bts, x[2]), append(fls, x[3])
		ratios = append(ratios, (x[1]-x[0])/(x[2]-x[0]))
		aboves = append(aboves, (x[1]-x[3])/(x[2]-x[3]))
	}
	s1, d1 := loopbench.Stats(b, sw.start), loopbench.Stats(b, sw.done)
	bs1, bd1 := loopbench.Stats(b, bt.start), loopbench.Stats(b, bt.done)
	fs1, fd1 := loopbench.Stats(b, fl.start), loopbench.Stats(b, fl.done)
	if n := sw.spans(); n != pairsPerRun*trios {
		b.Fatalf("spanwatch aggregated %d spans, want %d", n, pairsPerRun*trios)
	}
	f := figures{
		swStart: s1.Sub(s0).PerRun(), swDone: d1.Sub(d0).PerRun(),
		btStart: bs1.Sub(bs0).PerRun(), btDone: bd1.Sub(bd0).PerRun(),
		flStart: fs1.Sub(fs0).PerRun(), flDone: fd1.Sub(fd0).PerRun(),
		base: loopbench.Median(bases), sw: loopbench.Median(sws), bt: loopbench.Median(bts), fl: loopbench.Median(fls),
		addedRatio: loopbench.Median(ratios), addedAboveRatio: loopbench.Median(aboves),
	}
	f.swAdded, f.btAdded, f.flAdded = (f.sw-f.base)/2, (f.bt-f.base)/2, (f.fl-f.base)/2
	return f
}

func report(b *testing.B, what string, f figures) {
	swProg := (f.swStart + f.swDone) / 2
	btProg := (f.btStart + f.btDone) / 2
	flProg := (f.flStart + f.flDone) / 2
	b.ReportMetric(f.swStart, "sw-start-ns/run")
	b.ReportMetric(f.swDone, "sw-done-ns/run")
	b.ReportMetric(f.btStart, "bt-start-ns/run")
	b.ReportMetric(f.btDone, "bt-done-ns/run")
	b.ReportMetric(swProg/btProg, "prog-cost-ratio")
	b.ReportMetric(f.swAdded, "sw-added-ns/hit")
	b.ReportMetric(f.btAdded, "bt-added-ns/hit")
	b.ReportMetric(f.addedRatio, "added-ratio")
	b.ReportMetric(f.flStart, "floor-start-ns/run")
	b.ReportMetric(f.flDone, "floor-done-ns/run")
	b.ReportMetric((swProg-flProg)/(btProg-flProg), "prog-above-floor-ratio")
	b.ReportMetric(f.flAdded, "floor-added-ns/hit")
	b.ReportMetric(f.addedAboveRatio, "added-above-floor-ratio")
	b.Logf("%s: median ns per start/done pair over %d rounds: bare %.1f, spanwatch %.0f, bpftrace %.0f, floor %.0f", what, trios, f.base, f.sw, f.bt, f.fl)
	b.Logf("BPF program cost (run_time_ns/run_cnt): spanwatch start %.0f done %.0f (avg %.0f); bpftrace start %.0f done %.0f (avg %.0f); ratio %.2f (goal <= 0.5)",
		f.swStart, f.swDone, swProg, f.btStart, f.btDone, btProg, swProg/btProg)
	b.Logf("added per probe hit: spanwatch %.0f ns, bpftrace %.0f ns; median per-round ratio %.2f (goal <= 0.8)", f.swAdded, f.btAdded, f.addedRatio)
	b.Logf("floor (the clock read alone): start %.0f done %.0f ns/run (avg %.0f), added %.0f ns per hit; above it, program cost ratio %.2f (spanwatch %.0f, bpftrace %.0f ns), added-time ratio %.2f",
		f.flStart, f.flDone, flProg, f.flAdded, (swProg-flProg)/(btProg-flProg), swProg-flProg, btProg-flProg, f.addedAboveRatio)
}

// BenchmarkUSDTvsBpftrace compares spanwatch and bpftrace on the same
// probes in one run: each traces its own copy of the loop, both attached
// at once, and the copies run in turn with an untraced one. Run with
// -benchtime 1x: each iteration is a full comparison.
func BenchmarkUSDTvsBpftrace(b *testing.B) {
	dir := requireTools(b)
	benchCompare(b, dir, "loop", false)
}

// BenchmarkUSDTNop5 is the same comparison on a loop whose probes are
// "nop; nop5": spanwatch with OptimizeNop5 attaches at the nop5, which
// kernels with the uprobe syscall (6.18+) turn into a call; bpftrace 0.17
// attaches at the nop. The loop runs in main, not a leaf function, so the
// red-zone hazard of optimized uprobes (usdt.TracerConfig.OptimizeNop5)
// does not apply.
func BenchmarkUSDTNop5(b *testing.B) {
	dir := requireTools(b)
	benchCompare(b, dir, "loop-nop5", true)
}

func benchCompare(b *testing.B, dir, name string, nop5 bool) {
	defer loopbench.EnableStats(b).Close()
	for i := 0; i < b.N; i++ {
		base, swLoop, btLoop := loopbench.Copies(b, filepath.Join(dir, name))
		flLoop := loopbench.Copy(b, filepath.Join(dir, name), "-floor")
		sw := attachSpanwatch(b, swLoop, nop5)
		bt := attachBpftrace(b, btLoop)
		fl := attachFloor(b, flLoop)
		f := compare(b, base, swLoop, btLoop, flLoop, sw, bt, fl)
		fl.close()
		bt.close()
		sw.close()
		report(b, name, f)
	}
}

// attachNamed loads a collector core and one USDT source named by the
// start probe's string argument (bench:nstart/bench:ndone, paired by
// thread) on loop, reading names as cfg says.
func attachNamed(b *testing.B, loop string, cfg usdt.TracerConfig) (tracer, *usdt.Tracer) {
	return attachSource(b, cfg, usdt.SpanSource{
		Binary: loop, NameArg: 0, KeyArg: -1, StatusArg: -1, DurationArg: -1, ValueArg: -1,
		Start: usdt.ProbeRef{Provider: "bench", Name: "nstart"},
		End:   usdt.ProbeRef{Provider: "bench", Name: "ndone"},
	}, "bench_named")
}

// attachSource attaches one span source through a collector of its own;
// the tracer's spans are those of the series named span.
func attachSource(b *testing.B, cfg usdt.TracerConfig, src usdt.SpanSource, span string) (tracer, *usdt.Tracer) {
	b.Helper()
	ctx := context.Background()
	col, err := collector.New(ctx, collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	tr, err := usdtsource.AttachWith(ctx, col.SourceCore(), cfg, []usdt.SpanSource{src})
	if err != nil {
		col.Close()
		b.Fatal(err)
	}
	start := "usdt_start_s"
	if tr.NameMethod() == "probe_read" {
		start = "usdt_start"
	}
	var total int64
	return tracer{
		start: tr.Program(start),
		done:  tr.Program("usdt_end"),
		close: func() { tr.Close(); col.Close() },
		spans: func() int64 {
			snap, err := col.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			for _, s := range snap.Series {
				if s.Span == span {
					total += int64(s.Count)
				}
			}
			return total
		},
	}, tr.Tracer
}

// BenchmarkUSDTNameRead compares the two ways a start probe's name
// argument is read, in one run: a sleepable program (uprobe.s, faulting
// the page in when it is absent; kernel 6.0+) against an ordinary one
// (bpf_probe_read_user_str), each tracing its own copy of the loop with
// bench:nstart("bench_named")/bench:ndone, the copies run in turn with a
// bare one. "resident": the loop read the name first, so this is the cost
// of the sleepable path where nothing needs faulting. "absent": the loop
// never reads it; the sleepable program faults the page in at the first
// hit, the ordinary one fails every read and takes the name the tracer
// read through /proc/PID/mem from usdt_names.
func BenchmarkUSDTNameRead(b *testing.B) {
	dir := requireTools(b)
	b.Run("resident", func(b *testing.B) { benchNameRead(b, dir, "named-touched") })
	b.Run("absent", func(b *testing.B) { benchNameRead(b, dir, "named") })
}

func benchNameRead(b *testing.B, dir, mode string) {
	defer loopbench.EnableStats(b).Close()
	for i := 0; i < b.N; i++ {
		base, sLoop, pLoop := loopbench.Copies(b, filepath.Join(dir, "loop"))
		sl, slt := attachNamed(b, sLoop, usdt.TracerConfig{})
		method := slt.NameMethod()
		if method == "probe_read" {
			sl.close()
			b.Skip("no sleepable uprobes on this kernel (6.0+)")
		}
		pr, prt := attachNamed(b, pLoop, usdt.TracerConfig{NoSleepable: true})
		s0, d0 := loopbench.Stats(b, sl.start), loopbench.Stats(b, sl.done)
		p0, q0 := loopbench.Stats(b, pr.start), loopbench.Stats(b, pr.done)
		var bases, sls, prs, ratios []float64
		for k := 0; k < trios; k++ {
			var x [3]float64
			for j := 0; j < 3; j++ {
				switch (j + k) % 3 {
				case 0:
					x[0] = runOnce(b, base, mode)
				case 1:
					x[1] = runOnce(b, sLoop, mode)
				case 2:
					x[2] = runOnce(b, pLoop, mode)
				}
			}
			bases, sls, prs = append(bases, x[0]), append(sls, x[1]), append(prs, x[2])
			ratios = append(ratios, (x[1]-x[0])/(x[2]-x[0]))
		}
		s1, d1 := loopbench.Stats(b, sl.start), loopbench.Stats(b, sl.done)
		p1, q1 := loopbench.Stats(b, pr.start), loopbench.Stats(b, pr.done)
		for _, t := range []tracer{sl, pr} {
			if n := t.spans(); n != pairsPerRun*trios {
				b.Fatalf("aggregated %d spans, want %d", n, pairsPerRun*trios)
			}
		}
		sst, _ := slt.Stats()
		pst, _ := prt.Stats()
		pr.close()
		sl.close()
		b.Logf("names not read by the program: sleepable %d (+%d from the tracer), ordinary %d (+%d from the tracer) of %d", sst.NameFallback, sst.NameCached, pst.NameFallback, pst.NameCached, pairsPerRun*trios)
		sStart, pStart := s1.Sub(s0).PerRun(), p1.Sub(p0).PerRun()
		sDone, pDone := d1.Sub(d0).PerRun(), q1.Sub(q0).PerRun()
		bm, sm, pm := loopbench.Median(bases), loopbench.Median(sls), loopbench.Median(prs)
		b.ReportMetric(sStart, "sleepable-start-ns/run")
		b.ReportMetric(pStart, "ordinary-start-ns/run")
		b.ReportMetric(sStart/pStart, "start-cost-ratio")
		b.ReportMetric((sm-bm)/2, "sleepable-added-ns/hit")
		b.ReportMetric((pm-bm)/2, "ordinary-added-ns/hit")
		b.ReportMetric(loopbench.Median(ratios), "added-ratio")
		b.Logf("start program (%s): sleepable %.0f ns/run, ordinary %.0f ns/run, ratio %.2f; done %.0f and %.0f ns/run", method, sStart, pStart, sStart/pStart, sDone, pDone)
		b.Logf("added per probe hit: sleepable %.0f ns, ordinary %.0f ns; median per-trio ratio %.2f (bare %.1f ns per pair)", (sm-bm)/2, (pm-bm)/2, loopbench.Median(ratios), bm)
	}
}

// BenchmarkUSDTBuiltName measures what building a span name from two
// pointer-and-length pieces in the kernel (name_args, as the JVM's method
// probes are named) costs against reading one NUL-terminated name
// (name_arg): one copy of the loop runs "built" traced with name_args,
// another "named-touched" with name_arg: 0, and a third bare in each mode,
// in turn, trios times. Both names are on a resident page, read by the
// same start program (sleepable where the kernel has it).
func BenchmarkUSDTBuiltName(b *testing.B) {
	dir := requireTools(b)
	defer loopbench.EnableStats(b).Close()
	for i := 0; i < b.N; i++ {
		base, nLoop, bLoop := loopbench.Copies(b, filepath.Join(dir, "loop"))
		nt, ntr := attachNamed(b, nLoop, usdt.TracerConfig{})
		bt, btr := attachSource(b, usdt.TracerConfig{}, usdt.SpanSource{
			Binary: bLoop, NameArg: -1, KeyArg: -1, StatusArg: -1, DurationArg: -1, ValueArg: -1,
			NameArgs: []usdt.StrArg{{Ptr: 0, Len: 1}, {Ptr: 2, Len: 3}}, NameSeparator: ".",
			Start: usdt.ProbeRef{Provider: "bench", Name: "bstart"},
			End:   usdt.ProbeRef{Provider: "bench", Name: "ndone"},
		}, "Bench.method")
		if ntr.NameMethod() != btr.NameMethod() {
			b.Fatalf("name read by %s for name_arg, %s for name_args", ntr.NameMethod(), btr.NameMethod())
		}
		prog := "usdt_start_s"
		if ntr.NameMethod() == "probe_read" {
			prog = "usdt_start"
		}
		n0, b0 := loopbench.Stats(b, nt.start), loopbench.Stats(b, bt.start)
		var nAdded, bAdded, ratios []float64
		for k := 0; k < trios; k++ {
			var x [4]float64
			for j := 0; j < 4; j++ {
				switch (j + k) % 4 {
				case 0:
					x[0] = runOnce(b, base, "named-touched")
				case 1:
					x[1] = runOnce(b, nLoop, "named-touched")
				case 2:
					x[2] = runOnce(b, base, "built")
				case 3:
					x[3] = runOnce(b, bLoop, "built")
				}
			}
			nAdded, bAdded = append(nAdded, x[1]-x[0]), append(bAdded, x[3]-x[2])
			ratios = append(ratios, (x[3]-x[2])/(x[1]-x[0]))
		}
		n1, b1 := loopbench.Stats(b, nt.start), loopbench.Stats(b, bt.start)
		for _, t := range []tracer{nt, bt} {
			if n := t.spans(); n != pairsPerRun*trios {
				b.Fatalf("aggregated %d spans, want %d", n, pairsPerRun*trios)
			}
		}
		bt.close()
		nt.close()
		nStart, bStart := n1.Sub(n0).PerRun(), b1.Sub(b0).PerRun()
		b.ReportMetric(nStart, "name_arg-start-ns/run")
		b.ReportMetric(bStart, "name_args-start-ns/run")
		b.ReportMetric(bStart/nStart, "start-cost-ratio")
		b.ReportMetric(loopbench.Median(nAdded)/2, "name_arg-added-ns/hit")
		b.ReportMetric(loopbench.Median(bAdded)/2, "name_args-added-ns/hit")
		b.ReportMetric(loopbench.Median(ratios), "added-ratio")
		b.Logf("start program (%s, %s): one C string %.0f ns/run, two pointer+length pieces %.0f ns/run (%.2fx); added per hit %.0f and %.0f ns (median per-trio ratio %.2f)",
			prog, ntr.NameMethod(), nStart, bStart, bStart/nStart, loopbench.Median(nAdded)/2, loopbench.Median(bAdded)/2, loopbench.Median(ratios))
	}
}
