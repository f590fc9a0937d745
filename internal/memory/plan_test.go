package memory

import (
	"strings"
	"testing"
	"time"
)

// kernel is a stand-in for collector.EstimateMapBytes: 16 MiB of fixed
// maps, 512 bytes a series and 8 a histogram cell, as the real maps.
func kernel(series, cells uint32) (uint64, error) {
	return 16<<20 + uint64(series)*512 + uint64(cells)*8, nil
}

func inputs() Inputs {
	return Inputs{Interval: 10 * time.Second, LongestRange: time.Minute, KernelBytes: kernel, Binary: 20 << 20}
}

func budget(n uint64) Budget { return Budget{Bytes: n, Source: SourceSetting, Detail: "test"} }

// TestPlanFits: the capacity a plan picks fits (what it expects live is
// under the live share of Go's limit), one more power of two of series
// would not, and a bigger budget never gives fewer series.
func TestPlanFits(t *testing.T) {
	prev := uint32(0)
	for _, mib := range []uint64{96, 128, 256, 512, 768, 1024, 2048, 4096} {
		p, err := NewPlan(budget(mib<<20), inputs())
		if err != nil {
			t.Fatalf("%d MiB: %v", mib, err)
		}
		if p.MaxSeries < prev {
			t.Errorf("%d MiB: %d series, fewer than a smaller budget's %d", mib, p.MaxSeries, prev)
		}
		prev = p.MaxSeries
		if p.KernelBytes+20<<20+p.GoLimit != mib<<20 {
			t.Errorf("%d MiB: kernel %d + binary + Go limit %d is not the budget", mib, p.KernelBytes, p.GoLimit)
		}
		if float64(p.LiveBytes) > LiveShare*float64(p.GoLimit) {
			t.Errorf("%d MiB: live %s over the live share of %s", mib, FormatBytes(p.LiveBytes), FormatBytes(p.GoLimit))
		}
		if p.HistogramCells != cellsFor(p.MaxSeries) || p.HistogramCells&(p.HistogramCells-1) != 0 {
			t.Errorf("%d MiB: %d cells for %d series", mib, p.HistogramCells, p.MaxSeries)
		}
		if p.MaxSeries < MaxSeries {
			in := inputs()
			in.MaxSeries = p.MaxSeries + 1
			if _, err := NewPlan(budget(mib<<20), in); err == nil {
				t.Errorf("%d MiB: %d series fit, but so does one more", mib, p.MaxSeries)
			}
		}
		t.Logf("%4d MiB: %6d series, %8d cells, kernel %s, Go limit %s, live %s, history %s, overruns %d, queue %d",
			mib, p.MaxSeries, p.HistogramCells, FormatBytes(p.KernelBytes), FormatBytes(p.GoLimit), FormatBytes(p.LiveBytes), FormatBytes(p.HistoryBytes), p.MaxOverrunsPerSnapshot, p.OverrunQueue)
	}
	if prev != MaxSeries {
		t.Errorf("4 GiB: %d series, want the cap %d", prev, MaxSeries)
	}
}

// TestPlanSettings: an explicit max_series wins when it fits, also above
// the default cap, and is an error naming what it needs and what fits
// when it does not.
func TestPlanSettings(t *testing.T) {
	in := inputs()
	in.MaxSeries, in.HistogramCells = 200000, 1<<22
	p, err := NewPlan(budget(8<<30), in)
	if err != nil || p.MaxSeries != 200000 || p.HistogramCells != 1<<22 {
		t.Fatalf("plan %+v, %v", p, err)
	}
	in.MaxSeries, in.HistogramCells = 131072, 0
	_, err = NewPlan(budget(256<<20), in)
	if err == nil || !strings.Contains(err.Error(), "max_series 131072 needs about") || !strings.Contains(err.Error(), "series fit") {
		t.Fatalf("error %v", err)
	}
	if _, err := NewPlan(budget(40<<20), inputs()); err == nil || !strings.Contains(err.Error(), "too small") {
		t.Errorf("a budget the maps fill: %v", err)
	}
}

// TestPlanRanges: the longer the rules' ranges, the fewer series fit,
// until the history's bound caps what it may take.
func TestPlanRanges(t *testing.T) {
	var last uint32 = MaxSeries + 1
	for _, r := range []time.Duration{0, time.Minute, 10 * time.Minute, time.Hour} {
		in := inputs()
		in.LongestRange = r
		p, err := NewPlan(budget(512<<20), in)
		if err != nil {
			t.Fatal(err)
		}
		if p.MaxSeries > last {
			t.Errorf("range %s: %d series, more than a shorter range's %d", r, p.MaxSeries, last)
		}
		last = p.MaxSeries
		if hist := uint64(p.MaxSeries) * uint64(p.Windows) * WindowBytes; hist > p.HistoryBytes && p.Windows > 0 {
			t.Logf("range %s: the history would take %s, bounded to %s", r, FormatBytes(hist), FormatBytes(p.HistoryBytes))
		}
	}
}
