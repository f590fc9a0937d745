//go:build linux

package inflight

import (
	"bufio"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/internal/symbolize"
	"github.com/spanwatch/spanwatch/internal/usdt"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestUSDTStuckSpan runs the whole path with the real USDT tracer: a
// program's span starts at its USDT start probe (kept by usdt_start in
// task storage or usdt_inflight, whichever the kernel allows) and blocks;
// the watcher samples it as still running; when the program lets the span
// end, the core reports the same span as an ordinary overrun.
func TestUSDTStuckSpan(t *testing.T) {
	// With a status argument the end goes the general way; without one,
	// the cookie fast path (see usdt.bpf.c). Both keep the start in task
	// storage where the kernel has it.
	for _, tc := range []struct {
		name      string
		statusArg int
	}{{"status", 0}, {"fast", -1}} {
		t.Run(tc.name, func(t *testing.T) { testUSDTStuckSpan(t, tc.statusArg) })
	}
}

func testUSDTStuckSpan(t *testing.T, statusArg int) {
	bin := bpftest.CProgram(t, "stuck")
	m := newMaps(t)
	coreMaps := privateCore(t, map[string]*ebpf.Map{"budgets": m.budgets, "overruns": m.overruns, "counters": m.counters})
	tr, err := usdt.NewTracer(usdt.TracerConfig{Maps: coreMaps, Core: kernel.CoreFull})
	if err != nil {
		bpftest.SkipUnlessLoaded(t, "load the USDT tracer", err)
	}
	defer tr.Close()
	const span, budget = "stuck", 100 * time.Millisecond
	if err := tr.Add(context.Background(), usdt.SpanSource{
		Binary: bin, Span: span, NameArg: -1, KeyArg: -1, StatusArg: statusArg, DurationArg: -1,
		Start: usdt.ProbeRef{Provider: "sw", Name: "t_start"}, End: usdt.ProbeRef{Provider: "sw", Name: "t_done"},
	}); err != nil {
		t.Fatal(err)
	}
	if err := m.budgets.Put(&bpf.SpanwatchBudgetKey{NameId: snapshot.NameID(span)}, &bpf.SpanwatchBudget{BudgetNs: uint64(budget), Flags: captureUser}); err != nil {
		t.Fatal(err)
	}
	w, err := New(Config{
		Inflight: tr.Map("usdt_inflight"), Sources: tr.Map("usdt_sources"), TaskStart: tr.Map("usdt_task_start"), TaskNames: tr.Map("usdt_task_names"),
		Budgets: m.budgets, Overruns: m.overruns, Counters: m.counters, Samples: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	t.Logf("task storage scan: %v", w.task != nil)
	rd, err := ringbuf.NewReader(m.overruns)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()

	cmd := exec.Command(bin)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("read ready: %q, %v", line, err)
	}
	pid := uint32(cmd.Process.Pid)
	sym := symbolize.New(symbolize.Config{})
	defer sym.Close()
	if err := sym.Capture(pid); err != nil {
		t.Fatal(err)
	}

	read := func() bpf.SpanwatchOverrun {
		t.Helper()
		rd.SetDeadline(time.Now().Add(10 * time.Second))
		rec, err := rd.Read()
		if err != nil {
			t.Fatalf("read overrun: %v", err)
		}
		return *(*bpf.SpanwatchOverrun)(unsafe.Pointer(&rec.RawSample[0]))
	}
	time.Sleep(2 * budget)
	if err := w.Scan(); err != nil {
		t.Fatal(err)
	}
	r := read()
	if r.Pid != pid || r.Status&^StatusOffCPU != StatusStillRunning || r.NameId != snapshot.NameID(span) || r.DurationNs <= uint64(budget) {
		t.Fatalf("still running sample: pid %d status %#x name id %#x duration %v", r.Pid, r.Status, r.NameId, time.Duration(r.DurationNs))
	}
	frames, err := sym.User(pid, r.Ustack[:max(0, r.UstackLen)/8])
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range frames {
		names = append(names, f.Function)
	}
	if got := strings.Join(names, ","); !strings.Contains(got, "c,b,a,main") {
		t.Errorf("still running stack %s, want c, b, a, main", got)
	}

	// The span ends: the core reports it as an ordinary overrun, longer.
	// Samples of the span still running may come first: the samplers
	// stay attached until the next scan (one came after the scan's, and
	// before the end, in CI's run on Debian's 6.1 under qemu TCG).
	stdin.Close()
	end := read()
	for extra := 0; end.Status&StatusStillRunning != 0 && end.Pid == pid && extra < 100; extra++ {
		end = read()
	}
	if end.Pid != pid || end.Status != 0 || end.DurationNs < r.DurationNs {
		t.Errorf("end of span: pid %d status %#x duration %v (sampled at %v)", end.Pid, end.Status, time.Duration(end.DurationNs), time.Duration(r.DurationNs))
	}
	cmd.Wait()
	if err := w.Scan(); err != nil {
		t.Fatal(err)
	}
	if w.Active() {
		t.Error("samplers still attached after the span ended")
	}
}

// privateCore returns the core maps a USDT tracer shares (bpf.CoreMaps):
// those given, and the others created small, with the core's state set the
// way the collector sets it, so that spans aggregate and budgets apply.
func privateCore(t *testing.T, given map[string]*ebpf.Map) map[string]*ebpf.Map {
	t.Helper()
	spec, err := bpf.LoadSpanwatch()
	if err != nil {
		t.Fatal(err)
	}
	const seriesMax, chunks = 1024, 1024
	sizes := map[string]uint32{
		"series": seriesMax, "series_index": seriesMax, "free_slots": seriesMax, "names": seriesMax + 1,
		"series_dirty": (seriesMax + 63) / 64, "cell_banks": 1, "cell_dirty": (chunks + 63) / 64,
	}
	maps := map[string]*ebpf.Map{}
	for _, name := range bpf.CoreMaps {
		if m := given[name]; m != nil {
			maps[name] = m
			continue
		}
		ms := spec.Maps[name].Copy()
		if n, ok := sizes[name]; ok {
			ms.MaxEntries = n
		}
		if ms.InnerMap != nil {
			// One bank of cells serves every slot; the bank and the
			// inner map made from one spec, so the kernel takes it.
			ms.InnerMap.MaxEntries = chunks
		}
		m, err := ebpf.NewMap(ms)
		if err != nil {
			bpftest.SkipUnlessLoaded(t, "create BPF map "+name, err)
		}
		t.Cleanup(func() { m.Close() })
		maps[name] = m
		if ms.InnerMap != nil {
			bank, err := ebpf.NewMap(ms.InnerMap)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { bank.Close() })
			if err := m.Put(uint32(0), bank); err != nil {
				t.Fatal(err)
			}
		}
	}
	state := bpf.SpanwatchCoreState{
		OtherNameId: snapshot.NameID(snapshot.OtherName), SeriesMax: seriesMax,
		BankChunksMask: chunks - 1, BankSlots: seriesMax, DefaultQuota: seriesMax, BudgetGen: 1,
	}
	if err := maps["core"].Put(uint32(0), &state); err != nil {
		t.Fatal(err)
	}
	return maps
}
