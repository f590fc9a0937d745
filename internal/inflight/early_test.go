//go:build linux

package inflight

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/symbolize"
	"github.com/spanwatch/spanwatch/snapshot"
)

// earlyRun is what one run of testdata/phases.c's span gave: its samples
// by the function they were in, and the Joiner's report.
type earlyRun struct {
	byFunc    map[string]int
	within    int // samples taken within the budget
	end       snapshot.Overrun
	reported  bool // the Joiner reported the span's end
	dropped   uint64
	durationN uint64
}

// runPhases runs one span of testdata/phases.c (80 ms of CPU in a, then
// 25 ms in b) as an SDK span would open it in inflight_exec, with a budget
// and, when early, sample_from_start; the watcher scans as the collector
// runs it. The samples go through a Joiner, with the span's end record
// (as the core sends it for a span over its budget) when over.
func runPhases(t *testing.T, budget time.Duration, early bool) earlyRun {
	t.Helper()
	m := newMaps(t)
	core, err := bpf.LoadSpanwatch()
	if err != nil {
		t.Fatal(err)
	}
	execMap, err := ebpf.NewMap(core.Maps["inflight_exec"])
	if err != nil {
		bpftest.SkipUnlessLoaded(t, "create inflight_exec", err)
	}
	defer execMap.Close()
	const span = "charge"
	if err := m.budgets.Put(&bpf.SpanwatchBudgetKey{NameId: snapshot.NameID(span)}, &bpf.SpanwatchBudget{BudgetNs: uint64(budget), Flags: captureUser}); err != nil {
		t.Fatal(err)
	}
	w, err := New(Config{Exec: execMap, Budgets: m.budgets, Overruns: m.overruns, Counters: m.counters,
		Frequency: 499, NoBlocked: true, Interval: 20 * time.Millisecond})
	if err != nil {
		bpftest.SkipUnlessLoaded(t, "load the inflight programs", err)
	}
	defer w.Close()
	if early {
		if err := w.SetEarly(map[string]time.Duration{span: budget}); err != nil {
			t.Fatal(err)
		}
	}
	rd, err := ringbuf.NewReader(m.overruns)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()

	bin := bpftest.CProgram(t, "phases")
	cmd := exec.Command(bin)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() }()
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("read ready: %q, %v", line, err)
	}
	pid := uint32(cmd.Process.Pid)
	sym := symbolize.New(symbolize.Config{})
	defer sym.Close()
	if err := sym.Capture(pid); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := w.Scan(); err != nil { // attach the clock when early
		t.Fatal(err)
	}

	// The span opens, as an SDK's start event opens it.
	key := bpf.InflightInflightExecKey{Tgid: pid, Exec: uint64(pid)}
	start, _ := monotonicNs()
	const startReal = 12345
	var st bpf.InflightInflightStack
	st.Depth, st.Tid = 1, pid
	st.Spans[0] = bpf.InflightInflightOpen{StartNs: start, StartReal: startReal, NameId: snapshot.NameID(span), Name: nameBytes(span)}
	if err := execMap.Put(&key, &st); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if line, err := out.ReadString('\n'); err != nil || line != "done\n" {
		t.Fatalf("read done: %q, %v", line, err)
	}
	endNs, _ := monotonicNs()
	if err := execMap.Delete(&key); err != nil { // the span ends
		t.Fatal(err)
	}
	cancel()
	<-done

	now := time.Unix(1000, 0)
	j := NewJoiner(JoinConfig{Now: func() time.Time { return now }})
	res := earlyRun{byFunc: map[string]int{}, durationN: endNs - start}
	rd.SetDeadline(time.Now().Add(200 * time.Millisecond))
	for {
		rec, err := rd.Read()
		if errors.Is(err, ringbuf.ErrFlushed) || errors.Is(err, ringbuf.ErrClosed) || err != nil {
			break
		}
		r := (*bpf.SpanwatchOverrun)(unsafe.Pointer(&rec.RawSample[0]))
		if r.Pid != pid || r.NameId != snapshot.NameID(span) || r.Status&StatusStillRunning == 0 || r.StartNs != startReal || r.BudgetNs != uint64(budget) {
			t.Fatalf("sample: pid %d name id %#x status %#x start %d budget %d", r.Pid, r.NameId, r.Status, r.StartNs, r.BudgetNs)
		}
		frames, err := sym.User(pid, stackAddrs(r.Ustack[:], r.UstackLen))
		if err != nil {
			t.Fatal(err)
		}
		fn := "?"
		for _, f := range frames {
			if f.Function == "a" || f.Function == "b" {
				fn = f.Function
				break
			}
		}
		res.byFunc[fn]++
		if r.DurationNs <= r.BudgetNs {
			res.within++
		}
		j.Add(Record{Overrun: snapshot.Overrun{Span: span, NameID: r.NameId, PID: pid, TID: r.Tid, DurationNs: r.DurationNs,
			BudgetNs: r.BudgetNs, StillRunning: true, UserStack: frames}, Sample: true, StartNs: startReal, MonoStartNs: r.TsNs - r.DurationNs})
	}
	if res.durationN > uint64(budget) {
		res.end, res.reported = j.Add(Record{Overrun: snapshot.Overrun{Span: span, NameID: snapshot.NameID(span), PID: pid, TID: pid,
			DurationNs: res.durationN, BudgetNs: uint64(budget)}, StartNs: startReal, MonoStartNs: start})
	}
	now = now.Add(time.Second)
	res.dropped = j.EarlyDropped()
	t.Logf("budget %v early %v: span %v, samples by function %v (%d within the budget), dropped %d, end samples %d",
		budget, early, time.Duration(res.durationN), res.byFunc, res.within, res.dropped, len(res.end.Samples))
	return res
}

func stackAddrs(stack []uint64, n int32) []uint64 {
	if n <= 0 {
		return nil
	}
	out := stack[:min(int(n)/8, len(stack))]
	for i, a := range out {
		if a == 0 {
			return out[:i]
		}
	}
	return out
}

// weight is the span time the end's samples in function fn stand for.
func weight(o snapshot.Overrun, fn string) uint64 {
	var w uint64
	for _, s := range o.Samples {
		for _, f := range s.UserStack {
			if f.Function == fn {
				w += s.WeightNs
				break
			}
		}
	}
	return w
}

// TestSampleFromStart: a span of 105 ms against a 100 ms budget, 80 ms of
// it in a before the budget. Sampled from its start, a dominates the span's
// samples (and their weight in its end); sampled from its budget on, as by
// default, a has none. A span within its budget (250 ms) leaves no report,
// and its samples are counted as dropped.
func TestSampleFromStart(t *testing.T) {
	const budget = 100 * time.Millisecond
	on := runPhases(t, budget, true)
	if on.durationN <= uint64(budget) {
		t.Skipf("skipping: the span took %v, within its budget: the test needs it just over", time.Duration(on.durationN))
	}
	if !on.reported || on.byFunc["a"] <= on.byFunc["b"] || weight(on.end, "a") <= weight(on.end, "b") || on.within == 0 {
		t.Errorf("from the start: samples %v (%d within), end weights a %v b %v; want a first",
			on.byFunc, on.within, time.Duration(weight(on.end, "a")), time.Duration(weight(on.end, "b")))
	}
	if on.dropped != 0 {
		t.Errorf("from the start: %d samples dropped of a span over its budget", on.dropped)
	}
	off := runPhases(t, budget, false)
	if off.byFunc["a"] >= off.byFunc["b"] && off.byFunc["a"] > 0 || off.within != 0 {
		t.Errorf("from the budget on: samples %v (%d within); want no more in a than in b, none within", off.byFunc, off.within)
	}

	under := runPhases(t, 250*time.Millisecond, true)
	if under.reported || under.dropped == 0 || under.dropped != uint64(under.within) {
		t.Errorf("within the budget: reported %v, %d dropped of %d samples within", under.reported, under.dropped, under.within)
	}
}

// BenchmarkSampleFromStart measures what sampling from the start costs
// against sampling from the budget on (today's default): one thread runs
// testdata/phases.c's spans back to back (105 ms each on the CPU, at most
// 9.5 a second), each within its 250 ms budget, so that every sample
// taken from the start is dropped. Per mode: the samplers' BPF run time
// per second (inflight_on_cpu, the kernel's BPF stats), the agent side's
// CPU per second (this process: the watcher's scans every 100 ms, reading
// the ring buffer, symbolizing each sample and joining it; the loop that
// drives the program costs the same in both), and the samples taken and
// dropped per span.
func BenchmarkSampleFromStart(b *testing.B) {
	for _, early := range []bool{false, true} {
		name := "off"
		if early {
			name = "on"
		}
		b.Run(name, func(b *testing.B) { benchPhases(b, early) })
	}
}

func benchPhases(b *testing.B, early bool) {
	m := newMaps(b)
	core, err := bpf.LoadSpanwatch()
	if err != nil {
		b.Fatal(err)
	}
	execMap, err := ebpf.NewMap(core.Maps["inflight_exec"])
	if err != nil {
		bpftest.SkipUnlessLoaded(b, "create inflight_exec", err)
	}
	defer execMap.Close()
	const span, budget = "charge", 250 * time.Millisecond
	if err := m.budgets.Put(&bpf.SpanwatchBudgetKey{NameId: snapshot.NameID(span)}, &bpf.SpanwatchBudget{BudgetNs: uint64(budget), Flags: captureUser}); err != nil {
		b.Fatal(err)
	}
	w, err := New(Config{Exec: execMap, Budgets: m.budgets, Overruns: m.overruns, Counters: m.counters})
	if err != nil {
		bpftest.SkipUnlessLoaded(b, "load the inflight programs", err)
	}
	defer w.Close()
	// Warm-up spans sampled from their start in both modes, so that the
	// symbolizer's one-time loads of the modules' tables (the program,
	// libc, the vDSO: lazily, at a first frame in each) are not measured.
	if err := w.SetEarly(map[string]time.Duration{span: budget}); err != nil {
		b.Fatal(err)
	}
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		bpftest.SkipUnlessLoaded(b, "enable BPF run-time statistics (5.8+)", err)
	}
	defer stats.Close()
	rd, err := ringbuf.NewReader(m.overruns)
	if err != nil {
		b.Fatal(err)
	}
	defer rd.Close()
	bin := bpftest.CProgram(b, "phases")
	cmd := exec.Command(bin)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() }()
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		b.Fatalf("read ready: %q, %v", line, err)
	}
	pid := uint32(cmd.Process.Pid)
	sym := symbolize.New(symbolize.Config{})
	defer sym.Close()
	if err := sym.Capture(pid); err != nil {
		b.Fatal(err)
	}
	j := NewJoiner(JoinConfig{})
	var samples atomic.Int64
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for {
			rec, err := rd.Read()
			if err != nil {
				return
			}
			r := (*bpf.SpanwatchOverrun)(unsafe.Pointer(&rec.RawSample[0]))
			frames, _ := sym.User(r.Pid, stackAddrs(r.Ustack[:], r.UstackLen))
			j.Add(Record{Overrun: snapshot.Overrun{Span: span, NameID: r.NameId, PID: r.Pid, TID: r.Tid, DurationNs: r.DurationNs,
				BudgetNs: r.BudgetNs, StillRunning: true, UserStack: frames}, Sample: true, StartNs: r.StartNs, MonoStartNs: r.TsNs - r.DurationNs})
			samples.Add(1)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	key := bpf.InflightInflightExecKey{Tgid: pid, Exec: uint64(pid)}
	runSpan := func(i int) {
		now, _ := monotonicNs()
		var st bpf.InflightInflightStack
		st.Depth, st.Tid = 1, pid
		st.Spans[0] = bpf.InflightInflightOpen{StartNs: now, StartReal: uint64(i + 1), NameId: snapshot.NameID(span), Name: nameBytes(span)}
		if err := execMap.Put(&key, &st); err != nil {
			b.Fatal(err)
		}
		if _, err := stdin.Write([]byte("x")); err != nil {
			b.Fatal(err)
		}
		if line, err := out.ReadString('\n'); err != nil || line != "done\n" {
			b.Fatalf("read done: %q, %v", line, err)
		}
		if err := execMap.Delete(&key); err != nil {
			b.Fatal(err)
		}
	}
	for i := -5; i < 0; i++ {
		runSpan(i)
	}
	time.Sleep(budget + time.Second)
	if !early {
		if err := w.SetEarly(nil); err != nil {
			b.Fatal(err)
		}
	}
	samples0, dropped0 := samples.Load(), j.EarlyDropped()
	var ru0, ru1 unix.Rusage
	before, _ := w.objs.InflightOnCpu.Stats()
	unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	start := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runSpan(i)
	}
	b.StopTimer()
	// Let the last samples arrive and the Joiner decide.
	time.Sleep(budget + time.Second)
	elapsed := time.Since(start)
	unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	after, _ := w.objs.InflightOnCpu.Stats()
	rd.Close()
	<-readDone
	cpu := time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano() + ru1.Stime.Nano() - ru0.Stime.Nano())
	sec := elapsed.Seconds()
	b.ReportMetric(float64(b.N)/sec, "spans/s")
	b.ReportMetric(float64(cpu.Microseconds())/1000/sec, "agent-cpu-ms/s")
	b.ReportMetric(float64((after.Runtime-before.Runtime).Microseconds())/1000/sec, "bpf-ms/s")
	b.ReportMetric(float64(after.RunCount-before.RunCount)/sec, "bpf-runs/s")
	b.ReportMetric(float64(samples.Load()-samples0)/float64(b.N), "samples/span")
	b.ReportMetric(float64(j.EarlyDropped()-dropped0)/float64(b.N), "dropped/span")
	b.ReportMetric(0, "ns/op")
}
