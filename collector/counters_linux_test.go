//go:build linux

package collector

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestCountersReachStats checks that every loss counter the BPF programs
// keep reaches the snapshot's stats, as the growth over the window of the
// sum over CPUs. The marker source watches every process that links the
// SDK, so other processes' spans may add to the counters meanwhile: each
// is checked within a margin above what the test put there.
func TestCountersReachStats(t *testing.T) {
	ct := newCoreTest(t, Config{MaxSeries: 1024, HistogramCells: 4096})
	ct.snapshot(t) // the first window takes the counters as they are
	fields := []struct {
		c    bpf.SpanwatchCounter
		name string
		get  func(*snapshot.Stats) uint64
	}{
		{bpf.SpanwatchCounterCOUNTER_RINGBUF_DROPS, "ringbuf_drops", func(s *snapshot.Stats) uint64 { return s.RingbufDrops }},
		{bpf.SpanwatchCounterCOUNTER_SERIES_FULL, "stats_full", func(s *snapshot.Stats) uint64 { return s.StatsFull }},
		{bpf.SpanwatchCounterCOUNTER_SHORT, "short_events", func(s *snapshot.Stats) uint64 { return s.ShortEvents }},
		{bpf.SpanwatchCounterCOUNTER_READ_ERRORS, "read_errors", func(s *snapshot.Stats) uint64 { return s.ReadErrors }},
		{bpf.SpanwatchCounterCOUNTER_HIST_FULL, "histogram_full", func(s *snapshot.Stats) uint64 { return s.HistogramFull }},
		{bpf.SpanwatchCounterCOUNTER_NAME_TRUNCATED, "names_truncated", func(s *snapshot.Stats) uint64 { return s.NamesTruncated }},
		{bpf.SpanwatchCounterCOUNTER_QUOTA_OTHER, "quota_other", func(s *snapshot.Stats) uint64 { return s.QuotaOther }},
		{bpf.SpanwatchCounterCOUNTER_NAMES_FULL, "names_full", func(s *snapshot.Stats) uint64 { return s.NamesFull }},
		{bpf.SpanwatchCounterCOUNTER_MINMAX_RETRIES, "extremes_dropped", func(s *snapshot.Stats) uint64 { return s.ExtremesDropped }},
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	const base, margin = 1 << 40, 1 << 20
	want := map[bpf.SpanwatchCounter]uint64{}
	for i, f := range fields {
		var vals []uint64
		if err := ct.c.objs.Counters.Lookup(uint32(f.c), &vals); err != nil {
			t.Fatal(err)
		}
		// Add to one CPU's value, a different one for each counter,
		// so that the sum over CPUs is what is checked.
		add := uint64(base + i)
		vals[i%cpus] += add
		if err := ct.c.objs.Counters.Put(uint32(f.c), vals); err != nil {
			t.Fatal(err)
		}
		want[f.c] = add
	}
	s, _ := ct.snapshot(t)
	for _, f := range fields {
		if got := f.get(&s.Stats); got < want[f.c] || got > want[f.c]+margin {
			t.Errorf("%s = %d, want %d (+ at most %d from other processes' spans)", f.name, got, want[f.c], margin)
		}
	}
}
