//go:build linux

package collector

import (
	"fmt"
	"testing"

	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/kernel"
)

func TestCellBanksPlan(t *testing.T) {
	for _, c := range []struct {
		series, cells              uint32
		chunks, slots, banks, idle uint32
	}{
		{68217, 1 << 24, 16384, 533, 128, 1}, // the 1 GiB default
		{27974, 1 << 22, 16384, 875, 32, 1},  // the DaemonSet's 512Mi
		{131071, 1 << 24, 16384, 1024, 128, 1},
		{1024, 4096, 512, 1024, 1, 1},
		{64, 512, 64, 64, 1, 1},
		{8192, 1 << 17, 16384, 8192, 1, 1},
		{20000, 1 << 20, 16384, 2500, 8, 1},
		{16000, 1 << 24, 131072, 1000, 16, 1},
	} {
		cfg := Config{MaxSeries: c.series, HistogramCells: c.cells}
		p := cfg.cellBanks()
		if p.chunks != c.chunks || p.slots != c.slots || p.banks != c.banks || p.ahead(0) != c.idle {
			t.Errorf("%d series, %d cells: %d chunks, %d slots, %d banks, %d idle; want %d, %d, %d, %d",
				c.series, c.cells, p.chunks, p.slots, p.banks, p.ahead(0), c.chunks, c.slots, c.banks, c.idle)
		}
		if p.chunks*p.banks*uint32(cellsPerChunk) > c.cells || p.slots*p.banks < c.series || p.chunks&(p.chunks-1) != 0 {
			t.Errorf("%d series, %d cells: %+v holds more cells or fewer slots than asked", c.series, c.cells, p)
		}
	}
}

// TestCellBanksGrowWithUse creates series past the banks there are, with
// the goroutine that creates them stopped: their values go to the first
// bank, exactly; banks made later take the new values, and a histogram
// adds up the cells of a bucket in both.
func TestCellBanksGrowWithUse(t *testing.T) {
	bpftest.Require(t, kernel.Atomics, kernel.Loop)
	ct := newCoreTest(t, Config{Core: kernel.CoreFull, MaxSeries: 8192, HistogramCells: 1 << 19, SeriesQuota: 8192})
	b := ct.c.reader.banks
	if got := len(b.maps()); got != 1 || b.plan.slots != 2048 {
		t.Fatalf("%d banks of %d slots at start, want 1 of 2048", got, b.plan.slots)
	}
	before := ct.c.MapBytes()
	b.stopGrowing()
	const n = 5000 // bank 0 serves 2,048 slots
	var es []entry
	for i := range n {
		es = append(es, entry{Name: fmt.Sprintf("bank.%d", i), Cgroup: 1 + uint64(i)%64, Value: uint64(1000 + i)})
	}
	ct.aggregate(t, es)
	s, got := ct.snapshot(t)
	if s.Stats.HistogramFull != 0 || s.Stats.StatsFull != 0 {
		t.Fatalf("histogram_full %d, series_full %d", s.Stats.HistogramFull, s.Stats.StatsFull)
	}
	check := func(round uint64) {
		t.Helper()
		for i := range n {
			name := fmt.Sprintf("bank.%d", i)
			sr, ok := got[name]
			if !ok || sr.Count != round {
				t.Fatalf("%s: count %d, want %d", name, sr.Count, round)
			}
			var h uint64
			for _, bk := range sr.Histogram {
				h += bk.Count
			}
			if h != round || len(sr.Histogram) != 1 {
				t.Fatalf("%s: histogram %+v, want %d values in one bucket", name, sr.Histogram, round)
			}
		}
	}
	check(1)
	if got := len(b.maps()); got != 1 {
		t.Fatalf("%d banks while stopped, want 1", got)
	}
	if err := b.grow(); err != nil {
		t.Fatal(err)
	}
	// 5,000 slots taken since the last look: banks ahead by four times
	// that (all four).
	if got, want := len(b.maps()), int(b.plan.ahead(5*n)); got != want || want != 4 {
		t.Fatalf("%d banks after growing, want %d (4)", got, want)
	}
	if after := ct.c.MapBytes(); after-before < 2*uint64(b.plan.chunks)*64 {
		t.Errorf("map bytes %d -> %d: the new banks of %d bytes are not counted", before, after, b.plan.chunks*64)
	}
	// Twice each: values of slots whose bank is new go there; the cells
	// of bank 0 that took their first values are read empty, and freed.
	ct.aggregate(t, es)
	ct.aggregate(t, es)
	s, got = ct.snapshot(t)
	if s.Stats.HistogramFull != 0 {
		t.Fatalf("histogram_full %d", s.Stats.HistogramFull)
	}
	check(2)
	// Both cells of a spilled slot are read: look at one.
	slot := uint32(4000)
	var cells int
	for bank := uint32(0); bank < uint32(len(b.maps())); bank++ {
		base := int(bank) * int(b.plan.chunks) * cellsPerChunk
		for i := base; i < base+int(b.plan.chunks)*cellsPerChunk; i++ {
			if ct.c.reader.cells[i]>>(32+cellFieldBits) == uint64(slot+1) {
				cells++
			}
		}
	}
	// Its first value's cell in bank 0 was freed by that read: the bank
	// of its slot is there, and no program can still add to it.
	if cells != 1 {
		t.Errorf("slot %d holds %d cells, want 1 (in its own bank; the one in bank 0 freed)", slot, cells)
	}
	for i := 0; i < int(b.plan.chunks)*cellsPerChunk; i++ {
		if s := uint32(ct.c.reader.cells[i]>>(32+cellFieldBits)) - 1; s != ^uint32(0) && s >= b.plan.slots {
			t.Fatalf("bank 0 still holds a cell of slot %d", s)
		}
	}
	if len(ct.c.reader.spilled) != 0 {
		t.Errorf("%d cells still noted out of their bank", len(ct.c.reader.spilled))
	}
	// And a third round is exact, in the slots' own banks.
	ct.aggregate(t, es)
	s, got = ct.snapshot(t)
	if s.Stats.HistogramFull != 0 {
		t.Fatalf("histogram_full %d", s.Stats.HistogramFull)
	}
	check(1)
}

// TestCellBanksSpreadABurst puts a burst of 30,000 new series in the one
// bank an idle agent has (growing stopped): 23% of its cells. Spread as
// at random, a chunk of 8 cells is full about one time in 1,600 and
// no value finds both its chunks full; the golden-ratio multiply alone
// left 1,180 of the 16,384 chunks full and lost 43 values.
func TestCellBanksSpreadABurst(t *testing.T) {
	bpftest.Require(t, kernel.Atomics, kernel.Loop)
	ct := newCoreTest(t, Config{Core: kernel.CoreFull})
	b := ct.c.reader.banks
	b.stopGrowing()
	const n = 30000
	var es []entry
	for i := range n {
		es = append(es, burstEntry(i))
	}
	ct.aggregate(t, es)
	full, used := bankZeroChunks(ct.c.reader)
	s, _ := ct.snapshot(t)
	if s.Stats.HistogramFull != 0 || used != n {
		t.Errorf("histogram_full %d, %d cells used of bank 0: want 0, %d", s.Stats.HistogramFull, used, n)
	}
	if full > int(b.plan.chunks)/256 {
		t.Errorf("%d of bank 0's %d chunks full at %d%% of its cells: the keys are not spread", full, b.plan.chunks, 100*n/(int(b.plan.chunks)*cellsPerChunk))
	}
}

func burstEntry(i int) entry {
	return entry{Name: fmt.Sprintf("svc%d.op%d", i%97, i), Cgroup: uint64(1 + i%100), Value: uint64(1e5 + i)}
}

// bankZeroChunks counts bank 0's chunks whose cells are all taken and
// its cells taken.
func bankZeroChunks(r *seriesReader) (full, used int) {
	for ch := range int(r.banks.plan.chunks) {
		k := 0
		for _, v := range r.cells[ch*cellsPerChunk : (ch+1)*cellsPerChunk] {
			if v != 0 {
				k++
			}
		}
		used += k
		if k == cellsPerChunk {
			full++
		}
	}
	return full, used
}

// BenchmarkSeriesBurst makes n new series at once, one value each, in a
// fresh collector at the default sizes with its bank goroutine running,
// as an agent meets a burst of new names faster than bankPoll. It
// reports the values lost (histogram_full) and bank 0's chunks left full
// (BENCHMARKS.md, "A burst of new series"). Run it with -benchtime 3x: an
// iteration is a collector.
func BenchmarkSeriesBurst(b *testing.B) {
	for _, n := range []int{30000, 40000, 60000, 80000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			es := make([]entry, n)
			for i := range es {
				es[i] = burstEntry(i)
			}
			var lost, full float64
			for range b.N {
				ct := newCoreTest(b, Config{})
				ct.aggregate(b, es)
				f, _ := bankZeroChunks(ct.c.reader)
				s, _ := ct.snapshot(b)
				lost += float64(s.Stats.HistogramFull)
				full += float64(f)
				if s.Stats.SeriesLive != uint64(n) {
					b.Fatalf("%d series live of %d", s.Stats.SeriesLive, n)
				}
			}
			b.ReportMetric(lost/float64(b.N), "lost/burst")
			b.ReportMetric(full/float64(b.N), "full-chunks")
		})
	}
}
