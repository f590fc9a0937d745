//go:build linux

package ueventsbench

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/bench/internal/loopbench"
	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/userevents"
)

// The test binary doubles as the application: with childEnv set, TestMain
// records spans instead of running tests.
const (
	childEnv  = "SPANWATCH_UEVBENCH_SPANS"  // spans to time
	listenEnv = "SPANWATCH_UEVBENCH_LISTEN" // "1": wait for a listener first
	inVM      = "SPANWATCH_IN_VM"
	spanName  = "uevbench.span"
	warmup    = 500 // spans recorded before the timed ones (TCG translates new code)
)

var (
	spans  = flag.Int("uevbench.spans", 20000, "spans each application process times")
	rounds = flag.Int("uevbench.rounds", 7, "rounds of the conditions, each in a rotated order")
)

func TestMain(m *testing.M) {
	if s := os.Getenv(childEnv); s != "" {
		os.Exit(runChild(s))
	}
	os.Exit(m.Run())
}

// runChild records warmup and then n spans on one locked thread and
// prints the thread's CPU time and the wall time per timed span, in ns.
func runChild(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		fmt.Fprintln(os.Stderr, "child: bad span count:", s)
		return 2
	}
	runtime.LockOSThread()
	want := os.Getenv(listenEnv) == "1"
	for deadline := time.Now().Add(5 * time.Second); emit.Enabled() != want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "child: mode %s enabled=%t, want %t\n", emit.Mode(), emit.Enabled(), want)
			return 3
		}
	}
	f := &emit.Finished{Name: spanName, Duration: time.Millisecond}
	for range warmup {
		emit.Record(f)
	}
	var c0, c1 unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &c0)
	w0 := time.Now()
	for range n {
		emit.Record(f)
	}
	wall := time.Since(w0)
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &c1)
	cpu := time.Duration(c1.Nano() - c0.Nano())
	fmt.Printf("%s %.1f %.1f %d\n", emit.Mode(), float64(cpu)/float64(n), float64(wall)/float64(n), emit.WriteErrors())
	return 0
}

// A result is one application run: its thread's CPU time and wall time
// per span, in ns.
type result struct{ cpu, wall float64 }

// runApp runs the application with n timed spans, in the marker mode or
// over user_events, and returns its times.
func runApp(b testing.TB, n int, marker, listening bool) result {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe)
	mode := "user_events"
	if marker {
		mode = "marker"
	}
	listen := "0"
	if listening {
		listen = "1"
	}
	cmd.Env = append(os.Environ(), childEnv+"="+strconv.Itoa(n), listenEnv+"="+listen, "SPANWATCH_EMIT="+mode)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("application (%s, listening %t): %v: %s", mode, listening, err, out)
	}
	var got string
	var r result
	var werr uint64
	if _, err := fmt.Sscan(string(out), &got, &r.cpu, &r.wall, &werr); err != nil || got != mode || werr != 0 {
		b.Fatalf("application (%s) printed %q", mode, out)
	}
	return r
}

// counters are counting perf events on the span event's tracepoint, one
// per CPU, no BPF: opening them enables the event.
type counters []int

func openCounters(b testing.TB) counters {
	b.Helper()
	id, err := userevents.EventID(emit.EventName)
	if err != nil {
		b.Fatal(err)
	}
	var cs counters
	for cpu := range runtime.NumCPU() {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_TRACEPOINT,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Config: uint64(id),
		}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			cs.close()
			b.Fatalf("perf_event_open tracepoint user_events:%s (id %d) cpu %d: %v", emit.EventName, id, cpu, err)
		}
		cs = append(cs, fd)
	}
	return cs
}

func (cs counters) sum(b testing.TB) uint64 {
	b.Helper()
	var total uint64
	for _, fd := range cs {
		var buf [8]byte
		if _, err := unix.Read(fd, buf[:]); err != nil {
			b.Fatalf("read perf counter: %v", err)
		}
		total += binary.NativeEndian.Uint64(buf[:])
	}
	return total
}

func (cs counters) close() {
	for _, fd := range cs {
		unix.Close(fd)
	}
}

// A block is a listener set up once, under which the application runs in
// turn in each of its modes (a production collector has the user_events
// source and the marker both).
type block struct {
	names  []string // a name per run: user_events first, the marker second
	marker []bool
	// listen sets the listener up; the returned function checks that it
	// saw the given number of spans and tears it down.
	listen func(b testing.TB) (check func(spans int))
	progs  []string // the BPF program doing the work of each run, if any
}

// collectorListener starts a collector with cfg's sources and the test
// binary's marker.
func collectorListener(cfg collector.Config, wantMethod string) func(b testing.TB) func(int) {
	return func(b testing.TB) func(int) {
		b.Helper()
		exe, err := os.Executable()
		if err != nil {
			b.Fatal(err)
		}
		cfg.ScanInterval = -1
		cfg.MarkerBinaries = []string{exe}
		c, err := collector.New(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		if ok, method := c.UserEventsAttached(); !ok || method != wantMethod {
			c.Close()
			b.Fatalf("user_events attached=%t by %q, want %s", ok, method, wantMethod)
		}
		return func(n int) {
			defer c.Close()
			s, err := c.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			var got uint64
			for _, sr := range s.Series {
				if sr.Span == spanName {
					got += sr.Count
				}
			}
			if got != uint64(n) {
				b.Fatalf("collector counted %d of %d spans", got, n)
			}
		}
	}
}

func blocks() []block {
	return []block{
		// Nobody listening, then a counting perf event opened before the
		// run and closed after it: no collector at all.
		{names: []string{"none", "perf"}, marker: []bool{false, false}, listen: func(testing.TB) func(int) { return func(int) {} }},
		{names: []string{"fentry", "marker"}, marker: []bool{false, true}, progs: []string{"fentry_perf_tp_event", "uprobe_marker"},
			listen: collectorListener(collector.Config{}, "fentry")},
		{names: []string{"kprobe", "marker_k"}, marker: []bool{false, true}, progs: []string{"kprobe_perf_tp_event", "uprobe_marker"},
			listen: collectorListener(collector.Config{ForceKprobe: true}, "kprobe")},
	}
}

// runIn runs the application's run i of blk (the listener set up): the
// perf run opens its counters around it.
func (blk block) runIn(b testing.TB, i, n int) result {
	b.Helper()
	switch blk.names[i] {
	case "none":
		return runApp(b, n, false, false)
	case "perf":
		cs := openCounters(b)
		defer cs.close()
		r := runApp(b, n, false, true)
		if got := cs.sum(b); got != uint64(warmup+n) {
			b.Fatalf("perf counted %d of %d writes", got, warmup+n)
		}
		return r
	}
	return runApp(b, n, blk.marker[i], true)
}

// progCost returns the runs and run time of the newest loaded program
// named name (the kernel keeps 15 bytes of a name; BPF statistics on).
func progCost(b testing.TB, name string) loopbench.ProgCost {
	b.Helper()
	var newest *ebpf.Program
	for id, err := ebpf.ProgramGetNextID(0); err == nil; id, err = ebpf.ProgramGetNextID(id) {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		info, err := p.Info()
		if err != nil || !(info.Name == name || len(info.Name) == 15 && strings.HasPrefix(name, info.Name)) {
			p.Close()
			continue
		}
		if newest != nil {
			newest.Close()
		}
		newest = p
	}
	if newest == nil {
		b.Fatalf("no BPF program named %s", name)
	}
	defer newest.Close()
	return loopbench.Stats(b, newest)
}

// TestApplication checks the application the benchmark starts: it times
// its spans over user_events with nobody listening, and every span reaches
// a counting perf event when one is open.
func TestApplication(t *testing.T) {
	if os.Geteuid() != 0 || emit.Mode() != "user_events" {
		if os.Getenv(inVM) == "1" {
			t.Fatalf("%s=1 but the span SDK uses %s (root: %t)", inVM, emit.Mode(), os.Geteuid() == 0)
		}
		t.Skipf("needs root and user_events; the span SDK uses %s", emit.Mode())
	}
	nobody := blocks()[0]
	for i, name := range nobody.names {
		if r := nobody.runIn(t, i, 100); r.cpu <= 0 || r.wall <= 0 {
			t.Errorf("%s: times %+v", name, r)
		}
	}
}

// BenchmarkSpanCost: see the package comment. It ignores b.N; run it with
// -test.benchtime 1x, and -uevbench.spans and -uevbench.rounds to change
// its size.
func BenchmarkSpanCost(b *testing.B) {
	if os.Geteuid() != 0 || emit.Mode() != "user_events" {
		if os.Getenv(inVM) == "1" {
			b.Fatalf("%s=1 but the span SDK uses %s (root: %t)", inVM, emit.Mode(), os.Geteuid() == 0)
		}
		b.Skipf("needs root and user_events; the span SDK uses %s", emit.Mode())
	}
	blks := blocks()
	names := []string{"none", "perf", "fentry", "marker", "kprobe", "marker_k"}
	n := *spans
	cpu := make(map[string][]float64)
	wall := make(map[string][]float64)
	// Ratios are taken within a round, then their median over rounds.
	ratios := [][2]string{{"fentry", "perf"}, {"fentry", "marker"}, {"kprobe", "perf"}, {"kprobe", "marker_k"},
		{"kprobe", "fentry"}, {"marker_k", "marker"}, {"perf", "none"}, {"fentry", "none"}, {"marker", "none"}}
	rcpu := make(map[[2]string][]float64)
	rwall := make(map[[2]string][]float64)
	for r := range *rounds {
		got := make(map[string]result)
		var order []string
		for i := range blks {
			blk := blks[(r+i)%len(blks)]
			check := blk.listen(b)
			// x, y, x, y (or y, x, y, x in odd rounds): each the mean of two.
			for k := range 4 {
				j := (k + r) % 2
				res := blk.runIn(b, j, n)
				g := got[blk.names[j]]
				got[blk.names[j]] = result{g.cpu + res.cpu/2, g.wall + res.wall/2}
				order = append(order, blk.names[j])
			}
			if blk.progs != nil {
				check(4 * (warmup + n))
			} else {
				check(0)
			}
		}
		for _, name := range names {
			cpu[name] = append(cpu[name], got[name].cpu)
			wall[name] = append(wall[name], got[name].wall)
		}
		for _, q := range ratios {
			rcpu[q] = append(rcpu[q], got[q[0]].cpu/got[q[1]].cpu)
			rwall[q] = append(rwall[q], got[q[0]].wall/got[q[1]].wall)
		}
		b.Logf("round %d (%s): thread CPU ns/span %s", r+1, strings.Join(order, ","), line(names, got))
	}
	b.Logf("%d spans per run, %d rounds; thread CPU time per span (wall in brackets), median [min-max] over rounds:", n, *rounds)
	for _, name := range names {
		b.Logf("  %-8s %8.0f ns [%.0f-%.0f]   (wall %.0f ns [%.0f-%.0f])", name,
			loopbench.Median(cpu[name]), minOf(cpu[name]), maxOf(cpu[name]),
			loopbench.Median(wall[name]), minOf(wall[name]), maxOf(wall[name]))
	}
	b.Logf("ratios within a round, median [min-max]:")
	for _, q := range ratios {
		name := q[0] + "/" + q[1]
		b.Logf("  %-15s cpu %.3f [%.3f-%.3f]   wall %.3f [%.3f-%.3f]", name,
			loopbench.Median(rcpu[q]), minOf(rcpu[q]), maxOf(rcpu[q]),
			loopbench.Median(rwall[q]), minOf(rwall[q]), maxOf(rwall[q]))
		b.ReportMetric(loopbench.Median(rcpu[q]), name)
	}

	// Where the time goes: the program's own time per span, with the
	// statistics on (one more run of each BPF condition).
	stats := loopbench.EnableStats(b)
	defer stats.Close()
	for _, blk := range blks {
		if blk.progs == nil {
			continue
		}
		check := blk.listen(b)
		for j, prog := range blk.progs {
			before := progCost(b, prog)
			res := blk.runIn(b, j, n)
			cost := progCost(b, prog).Sub(before)
			if cost.Runs < uint64(warmup+n) {
				b.Fatalf("%s ran %d times for %d spans", prog, cost.Runs, warmup+n)
			}
			b.Logf("  %-8s program %s: %.0f ns a run (%d runs); the span %.0f ns (thread CPU, statistics on): the program %.0f%%",
				blk.names[j], prog, cost.PerRun(), cost.Runs, res.cpu, 100*cost.PerRun()/res.cpu)
			b.ReportMetric(cost.PerRun(), blk.names[j]+"-prog-ns/run")
		}
		check(2 * (warmup + n))
	}
}

func line(names []string, got map[string]result) string {
	var s []string
	for _, name := range names {
		s = append(s, fmt.Sprintf("%s %.0f", name, got[name].cpu))
	}
	return strings.Join(s, ", ")
}

func minOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
