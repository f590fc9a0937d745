//go:build linux

package collector

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/snapshot"
	"github.com/spanwatch/spanwatch/source/marker"
)

// BenchmarkSnapshotRead measures one Snapshot over 10k and 100k series,
// each with one new value in every window (so every series is read, with
// its histogram cell), filled by the core itself through coretest.bpf.c.
// It reports ns per series; the goal is at most 1 µs.
func BenchmarkSnapshotRead(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("series=%d", n), func(b *testing.B) {
			ct := newCoreTest(b, Config{})
			es := make([]entry, n)
			for i := range es {
				es[i] = entry{Name: fmt.Sprintf("span.%d", i), Cgroup: uint64(i % 50), Value: uint64(1e6 + i)}
			}
			ct.aggregate(b, es)
			if s, err := ct.c.Snapshot(); err != nil || len(s.Series) != n {
				b.Fatalf("snapshot: %v, %d series", err, len(s.Series))
			}
			var read, cpu time.Duration
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				// A new value in every series, as on a busy host.
				for off := 0; off < n; off += 1 << 16 {
					ct.put(b, 0, es[off:min(off+1<<16, n)])
					ct.run(b, 0, min(1<<16, n-off), 1)
				}
				b.StartTimer()
				start, cpu0 := time.Now(), threadCPU()
				s, err := ct.c.Snapshot()
				read += time.Since(start)
				cpu += threadCPU() - cpu0
				if err != nil {
					b.Fatal(err)
				}
				if s.Stats.Events != uint64(n) {
					b.Fatalf("window with %d values, want %d", s.Stats.Events, n)
				}
			}
			b.ReportMetric(float64(read.Nanoseconds())/float64(b.N)/float64(n), "ns/series")
			// The CPU time of the reading thread: what the read costs,
			// whatever else the machine runs (wall time is the figure
			// on a quiet machine).
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(n), "cpu-ns/series")
		})
	}
}

// threadCPU is the CPU time the calling thread has used.
func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMarkerVsBareUprobe measures what a span costs the emitting
// thread through the marker source, against a bare uprobe on the same
// marker that only counts: the trap is the same, the difference is
// spanwatch's program (copying the payload, hashing the name, updating the
// histogram). It reports both, their ratio, and each program's own run time
// from the kernel's BPF stats.
func BenchmarkMarkerVsBareUprobe(b *testing.B) {
	requireBPF(b)
	if emit.Mode() != "marker" {
		b.Skip("needs the marker mode")
	}
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enable bpf stats: %v", err)
	}
	defer stats.Close()
	exe, _ := os.Executable()
	f := &emit.Finished{Name: "bench.span", Duration: time.Millisecond}
	loop := func(n int) time.Duration {
		start := time.Now()
		for i := 0; i < n; i++ {
			emit.Record(f)
		}
		return time.Since(start)
	}
	n := b.N
	if n < 20000 {
		n = 20000
	}

	// The bare uprobe: increment a per-CPU counter.
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
	exeFile, err := os.Open(exe)
	if err != nil {
		b.Fatal(err)
	}
	found, err := marker.Find(exeFile)
	exeFile.Close()
	if err != nil {
		b.Fatal(err)
	}
	markerOff, semOff := found.Off, found.Sem
	ex, err := link.OpenExecutable(exe)
	if err != nil {
		b.Fatal(err)
	}
	l, err := ex.Uprobe("", bare, &link.UprobeOptions{Address: markerOff, RefCtrOffset: semOff})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	bareTime := loop(n)
	b.StopTimer()
	bareStats, _ := bare.Stats()
	l.Close()

	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1, MarkerBinaries: []string{exe}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.StartTimer()
	swTime := loop(n)
	b.StopTimer()
	swStats, _ := c.objs.UprobeMarker.Stats()
	s, _ := c.Snapshot()
	var got uint64
	for _, sr := range s.Series {
		got += sr.Count
	}
	if got != uint64(n) {
		b.Fatalf("collector saw %d spans, want %d", got, n)
	}

	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(n) }
	b.ReportMetric(per(bareTime), "ns/span-bare")
	b.ReportMetric(per(swTime), "ns/span-spanwatch")
	b.ReportMetric(per(swTime)/per(bareTime), "ratio")
	if bareStats != nil && bareStats.RunCount > 0 {
		b.ReportMetric(float64(bareStats.Runtime.Nanoseconds())/float64(bareStats.RunCount), "prog-ns/run-bare")
	}
	if swStats != nil && swStats.RunCount > 0 {
		b.ReportMetric(float64(swStats.Runtime.Nanoseconds())/float64(swStats.RunCount), "prog-ns/run-spanwatch")
	}
}

// BenchmarkOverrunLatency measures from the end of an over-budget span
// (emit.Record returns) to the collector's OnOverrun callback holding the
// decoded, symbolized record: the latency an overrun alert starts with.
func BenchmarkOverrunLatency(b *testing.B) {
	requireBPF(b)
	if emit.Mode() != "marker" {
		b.Skip("needs the marker mode")
	}
	got := make(chan time.Time, 1)
	exe, _ := os.Executable()
	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1, MarkerBinaries: []string{exe},
		OnOverrun: func(ov snapshot.Overrun) {
			if len(ov.UserStack) == 0 || ov.UserStack[0].Function == "" {
				panic("overrun without a symbolized stack")
			}
			got <- time.Now()
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := c.SetBudgets([]BudgetRule{{Span: "bench.slow", Budget: time.Millisecond}}); err != nil {
		b.Fatal(err)
	}
	f := &emit.Finished{Name: "bench.slow", Duration: 2 * time.Millisecond}
	var total time.Duration
	for i := 0; i < b.N; i++ {
		emit.Record(f)
		sent := time.Now()
		select {
		case at := <-got:
			total += at.Sub(sent)
		case <-time.After(5 * time.Second):
			b.Fatal("no overrun within 5s")
		}
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/overrun")
}

// BenchmarkCoreValue measures the aggregation core alone (series_aggregate,
// no probe, no payload copy, no name hashing), per value, from the kernel's
// BPF statistics: one span series, durations spread over 1-3 ms (a few
// hundred histogram buckets) or all in one bucket.
func BenchmarkCoreValue(b *testing.B) {
	for _, tc := range []struct {
		name string
		vals func(i int) uint64
		hint bool
	}{
		{"spread", func(i int) uint64 { return 1e6 + uint64(i)*1999 }, false},
		{"spread-hint", func(i int) uint64 { return 1e6 + uint64(i)*1999 }, true},
		{"one-bucket", func(int) uint64 { return 1e6 }, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ct := newCoreTest(b, Config{})
			stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
			if err != nil {
				b.Fatalf("enable bpf stats: %v", err)
			}
			defer stats.Close()
			vals := make([]uint64, 1024)
			for i := range vals {
				vals[i] = tc.vals(i)
			}
			n := max(b.N, 100000)
			var per time.Duration
			for round := 0; round < 5; round++ {
				d, err := ct.core.Hot("bench.core", 7, vals, n, tc.hint)
				if err != nil {
					b.Fatal(err)
				}
				if round == 0 || d < per {
					per = d
				}
			}
			b.ReportMetric(float64(per.Nanoseconds()), "ns/value")
		})
	}
}

// BenchmarkSeriesCreate measures what the hashes that grow with use
// (GrowsWithUse: series_index, names, cg_created... created with
// BPF_F_NO_PREALLOC, elements from bpf_mem_alloc) cost the core against
// the same maps preallocated, in one run, alternating: per value that
// creates its series (a slot, an index element, a name element, a cell),
// and per value of a series that exists (lookups only). The run time is
// the test program's own, from the kernel's BPF statistics, per value;
// both include the test program's loop over its input.
func BenchmarkSeriesCreate(b *testing.B) {
	if !GrowsWithUse(kernel.CoreFull, kernel.Probe().Release) {
		b.Skipf("kernel %s: the full objects' maps do not grow with use here", kernel.Probe().Release)
	}
	const n = 4096
	es := make([]entry, n)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enable bpf stats: %v", err)
	}
	defer stats.Close()
	perValue := func(ct *coreTest) time.Duration {
		t0, c0, err := ct.core.RunTime()
		if err != nil {
			b.Fatal(err)
		}
		if err := ct.core.Run(0, n, 1); err != nil {
			b.Fatal(err)
		}
		t1, c1, err := ct.core.RunTime()
		if err != nil {
			b.Fatal(err)
		}
		if c1 == c0 {
			b.Fatal("the test program did not run")
		}
		return (t1 - t0) / n
	}
	var sum [2][2]time.Duration // [preallocated, grows][new, existing]
	rounds := max(b.N, 3)
	for r := 0; r < rounds; r++ {
		for mode, prealloc := range []bool{true, false} {
			ct := newCoreTest(b, Config{Core: kernel.CoreFull, MaxSeries: 2 * n, preallocate: prealloc})
			for i := range es {
				es[i] = entry{Name: fmt.Sprintf("bench.create.%d.%d", r, i), Cgroup: 7, Value: 1e6 + uint64(i)*1999}
			}
			if err := ct.core.Put(0, es); err != nil {
				b.Fatal(err)
			}
			created, existing := perValue(ct), perValue(ct)
			b.Logf("round %d, preallocated %v: %v a value creating its series, %v a value of an existing one", r, prealloc, created, existing)
			sum[mode][0] += created
			sum[mode][1] += existing
			ct.c.Close()
		}
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(rounds) }
	b.ReportMetric(per(sum[0][0]), "prealloc-new-ns/value")
	b.ReportMetric(per(sum[1][0]), "grow-new-ns/value")
	b.ReportMetric(per(sum[0][1]), "prealloc-existing-ns/value")
	b.ReportMetric(per(sum[1][1]), "grow-existing-ns/value")
}
