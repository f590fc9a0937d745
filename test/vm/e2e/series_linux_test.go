//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/coretest"
	"github.com/spanwatch/spanwatch/internal/kernel"
)

// TestSeriesModelScales fills the kernel with 100,000 series at the
// default sizes and checks that they all fit, within 256 MiB of BPF maps,
// whatever the CPU count: bench/series/vm.sh boots the VM with 2 and with 16
// vCPUs and compares the figures this test logs (capacity, map bytes, and
// the read cost per series of a window where every series has a value).
// It needs only BPF, not user_events.
func TestSeriesModelScales(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv(inVM) == "1" {
			t.Fatal("not root in the VM")
		}
		t.Skip("needs root to load BPF")
	}
	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	core, err := coretest.Load(c.Maps(), c.Kernel().Core == kernel.CoreCompat)
	if err != nil {
		t.Fatal(err)
	}
	defer core.Close()
	const n = 100000
	cpus, _ := ebpf.PossibleCPU()
	capacity, bytes := c.SeriesCapacity(), c.MapBytes()
	if capacity < n || bytes > 256<<20 {
		t.Fatalf("capacity %d series in %d MiB of maps on %d CPUs: want >= %d in <= 256 MiB", capacity, bytes>>20, cpus, n)
	}
	es := make([]coretest.Entry, n)
	for i := range es {
		es[i] = coretest.Entry{Name: fmt.Sprintf("svc%d.op%d", i%97, i), Cgroup: uint64(1 + i%100), Value: uint64(1e5 + i)}
	}
	// New series come in steps of 10,000, a poll of the collector's bank
	// goroutine apart at least: 50,000 a second, about what
	// bench/memory/fill makes (131,072 in 0.6-1.3 s). Its banks are made
	// as the slots in use come near them; a burst of new series faster
	// than the goroutine spills into the banks made (BENCHMARKS.md, "A
	// burst of new series").
	for off := 0; off < n; off += n / 10 {
		if err := core.Aggregate(es[off : off+n/10]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	s, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Series) != n || s.Stats.Events != n || s.Stats.StatsFull != 0 || s.Stats.HistogramFull != 0 {
		t.Fatalf("%d series, %d events, %d series full, %d histogram full: want %d, %d, 0, 0", len(s.Series), s.Stats.Events, s.Stats.StatsFull, s.Stats.HistogramFull, n, n)
	}
	// Read cost: the best of 5 windows in which every series has a value.
	best := time.Duration(1 << 62)
	for i := 0; i < 5; i++ {
		if err := core.Aggregate(es); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		start := time.Now()
		s, err = c.Snapshot()
		d := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if s.Stats.Events != n {
			t.Fatalf("window %d: %d events, want %d", i, s.Stats.Events, n)
		}
		best = min(best, d)
	}
	t.Logf("series-model cpus=%d capacity=%d map_bytes=%d series=%d read_ns_per_series=%.0f", cpus, capacity, bytes, n, float64(best.Nanoseconds())/n)
}
