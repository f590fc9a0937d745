//go:build linux

package inflight

import (
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/snapshot"
)

// pingPong passes a byte back and forth n times between two OS threads
// over pipes: every hop blocks one thread and wakes the other, so each
// round trip is at least two context switches.
func pingPong(b *testing.B, n int) time.Duration {
	ar, aw, _ := os.Pipe()
	br, bw, _ := os.Pipe()
	defer ar.Close()
	defer aw.Close()
	defer br.Close()
	defer bw.Close()
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		buf := make([]byte, 1)
		for i := 0; i < n; i++ {
			ar.Read(buf)
			bw.Write(buf)
		}
		close(done)
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := []byte{1}
	start := time.Now()
	for i := 0; i < n; i++ {
		aw.Write(buf)
		br.Read(buf)
	}
	<-done
	return time.Since(start)
}

// BenchmarkOffCPUSampler measures what the sched_switch sampler costs every
// context switch on the host while some thread is watched (it is detached
// otherwise): its own run time per call from the kernel's BPF stats (a
// hash lookup that misses for every other thread), and a pipe ping-pong's
// round trip with the sampler detached and attached.
func BenchmarkOffCPUSampler(b *testing.B) {
	m := newMaps(b)
	w, err := New(Config{Inflight: m.inflight, Sources: m.sources, Budgets: m.budgets, Overruns: m.overruns, Counters: m.counters, NoOnCPU: true})
	if err != nil {
		bpftest.SkipUnlessLoaded(b, "load the inflight programs", err)
	}
	defer w.Close()
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		bpftest.SkipUnlessLoaded(b, "enable BPF run-time statistics (5.8+)", err)
	}
	defer stats.Close()
	// A watched thread that never runs: every call is the common case.
	if err := w.objs.InflightWatch.Put(&bpf.InflightInflightExecKey{Tgid: 1 << 30, Exec: 1 << 30}, &bpf.InflightInflightTarget{Pid: 1 << 30, Samples: 1}); err != nil {
		b.Fatal(err)
	}
	n := max(b.N, 20000)
	detached := pingPong(b, n)
	w.mu.Lock()
	err = w.setActive(true)
	w.mu.Unlock()
	if err != nil {
		b.Fatal(err)
	}
	before, _ := w.objs.InflightOffCpu.Stats()
	attached := pingPong(b, n)
	after, _ := w.objs.InflightOffCpu.Stats()
	runs := after.RunCount - before.RunCount
	if runs == 0 {
		b.Fatal("the sampler never ran")
	}
	b.ReportMetric(float64((after.Runtime-before.Runtime).Nanoseconds())/float64(runs), "prog-ns/switch")
	b.ReportMetric(float64(detached.Nanoseconds())/float64(n), "ns/roundtrip-detached")
	b.ReportMetric(float64(attached.Nanoseconds())/float64(n), "ns/roundtrip-attached")
	b.ReportMetric(float64(attached)/float64(detached), "attached/detached")
}

// BenchmarkScan measures one scan (every 100ms by default): the task
// iterator over every task on the host plus the usdt_inflight walk, with
// nothing overdue, the steady state.
func BenchmarkScan(b *testing.B) {
	m := newMaps(b)
	if m.taskStart == nil {
		b.Skip("skipping: no task storage")
	}
	w, err := New(Config{Inflight: m.inflight, Sources: m.sources, Budgets: m.budgets, Overruns: m.overruns, Counters: m.counters, TaskStart: m.taskStart, TaskNames: m.taskNames})
	if err != nil {
		bpftest.SkipUnlessLoaded(b, "load the inflight programs", err)
	}
	defer w.Close()
	tasks := 0
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if ts, err := os.ReadDir("/proc/" + p.Name() + "/task"); err == nil {
			tasks += len(ts)
		}
	}
	b.ResetTimer()
	for range b.N {
		if err := w.Scan(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(tasks), "tasks")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/scan")
}

// BenchmarkScanSDK measures one scan of the SDKs' open spans: entries
// threads of execution (goroutines) with a span open each, none overdue,
// or with none open (idle: the batch scan deletes them at its first pass),
// read with the map iterator where it loads, else with batch lookups.
func BenchmarkScanSDK(b *testing.B) {
	for _, tc := range []struct {
		entries int
		idle    bool
	}{{100, false}, {1000, false}, {8000, false}, {8000, true}} {
		entries := tc.entries
		name := strconv.Itoa(entries) + "-open"
		if tc.idle {
			name = strconv.Itoa(entries) + "-idle"
		}
		b.Run(name, func(b *testing.B) {
			m := newMaps(b)
			core, err := bpf.LoadSpanwatch()
			if err != nil {
				b.Fatal(err)
			}
			exec, err := ebpf.NewMap(core.Maps["inflight_exec"])
			if err != nil {
				b.Fatal(err)
			}
			defer exec.Close()
			gprocs, err := ebpf.NewMap(core.Maps["inflight_gprocs"])
			if err != nil {
				b.Fatal(err)
			}
			defer gprocs.Close()
			w, err := New(Config{Exec: exec, GProcs: gprocs, Budgets: m.budgets, Overruns: m.overruns, Counters: m.counters})
			if err != nil {
				bpftest.SkipUnlessLoaded(b, "load the inflight programs", err)
			}
			defer w.Close()
			if err := m.budgets.Put(&bpf.SpanwatchBudgetKey{NameId: snapshot.NameID("op")}, &bpf.SpanwatchBudget{BudgetNs: uint64(time.Hour), Flags: captureUser}); err != nil {
				b.Fatal(err)
			}
			now, _ := monotonicNs()
			for i := 0; i < entries; i++ {
				v := bpf.InflightInflightStack{Depth: 1, Tid: 1, Goroutine: 1}
				if tc.idle {
					v.Depth = 0
				}
				v.Spans[0] = bpf.InflightInflightOpen{StartNs: now, StartReal: uint64(i + 1), NameId: snapshot.NameID("op"), Name: nameBytes("op")}
				if err := exec.Put(&bpf.InflightInflightExecKey{Tgid: 1, Exec: uint64(0xc000000000 + i*0x1000)}, &v); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for range b.N {
				if err := w.Scan(); err != nil {
					b.Fatal(err)
				}
			}
			if w.Watching() != 0 {
				b.Fatalf("%d watched, want none (nothing is overdue)", w.Watching())
			}
			method := "iterator"
			if w.list == nil {
				method = "batch"
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/scan")
			b.Logf("%d entries, read by %s", entries, method)
		})
	}
}
