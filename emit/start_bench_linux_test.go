//go:build linux

package emit_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/emit"
)

// markerProgram finds the collector's marker program (the newest loaded
// program called uprobe_marker), to read its run time from the kernel's
// BPF stats.
func markerProgram(b *testing.B) *ebpf.Program {
	b.Helper()
	var found *ebpf.Program
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			break
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		if info, err := p.Info(); err == nil && info.Name == "uprobe_marker" {
			if found != nil {
				found.Close()
			}
			found = p
			continue
		}
		p.Close()
	}
	if found == nil {
		b.Fatal("no uprobe_marker program loaded")
	}
	return found
}

// BenchmarkStartEndListening measures, with a collector listening through
// the marker, what the start event adds to a span: a span recorded by its
// end alone (emit.Record, no start event: what every span cost before
// starts were sent) against a span started and ended (emit.Start, End:
// two events). It reports the emitting thread's time per span and the BPF
// program's own time per span (kernel BPF stats), each for both, so the
// start event's cost reads as the difference, beside the end event's.
func BenchmarkStartEndListening(b *testing.B) {
	if os.Geteuid() != 0 || emit.Mode() != "marker" {
		b.Skip("needs root and the marker mode")
	}
	exe, _ := os.Executable()
	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1, MarkerBinaries: []string{exe}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enable bpf stats: %v", err)
	}
	defer stats.Close()
	prog := markerProgram(b)
	defer prog.Close()
	runtime := func() (time.Duration, uint64) {
		st, err := prog.Stats()
		if err != nil {
			b.Fatal(err)
		}
		return st.Runtime, st.RunCount
	}
	n := max(b.N, 20000)
	f := &emit.Finished{Name: "bench.span", Duration: time.Millisecond, Start: time.Now()}
	type result struct{ wall, bpf time.Duration }
	measure := func(fn func()) result {
		rt0, rc0 := runtime()
		start := time.Now()
		for i := 0; i < n; i++ {
			fn()
		}
		wall := time.Since(start)
		rt1, rc1 := runtime()
		if rc1-rc0 == 0 {
			b.Fatal("the marker program never ran")
		}
		return result{wall / time.Duration(n), (rt1 - rt0) / time.Duration(n)}
	}
	b.ResetTimer()
	end := measure(func() { emit.Record(f) })
	pair := measure(func() { emit.Start("bench.span").End(nil) })
	b.StopTimer()
	b.ReportMetric(float64(end.wall.Nanoseconds()), "end-only-ns/span")
	b.ReportMetric(float64(pair.wall.Nanoseconds()), "start+end-ns/span")
	b.ReportMetric(float64(end.bpf.Nanoseconds()), "end-only-bpf-ns/span")
	b.ReportMetric(float64(pair.bpf.Nanoseconds()), "start+end-bpf-ns/span")
	b.Logf("per span: end only %v (BPF %v); start and end %v (BPF %v): the start event adds %v (BPF %v)",
		end.wall, end.bpf, pair.wall, pair.bpf, pair.wall-end.wall, pair.bpf-end.bpf)
}
