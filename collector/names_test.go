//go:build linux

package collector

import (
	"reflect"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// TestMergeSeries: a placeholder's series and its real name's, once
// resolved, become one: counts and sums add, extremes combine, the
// budget is the larger, histograms merge and the quantiles are taken
// again from the merged histogram; the real name's id is kept, and
// series of other names, cgroups or labels are left apart.
func TestMergeSeries(t *testing.T) {
	span := func(name string, id uint64, durs ...uint64) snapshot.Series {
		s := snapshot.Series{Span: name, NameID: id, CgroupID: 1, Count: uint64(len(durs)), Errors: 1, OverBudget: 2, BudgetNs: id}
		s.MinNs, s.MaxNs = durs[0], durs[0]
		for _, d := range durs {
			s.SumNs += d
			s.MinNs, s.MaxNs = min(s.MinNs, d), max(s.MaxNs, d)
		}
		s.Histogram = snapshot.DurationHistogram(durs)
		s.SetRates(10 * time.Second)
		s.SetQuantiles(snapshot.HistogramQuantiles(s.Histogram, float64(s.MinNs), float64(s.MaxNs)))
		return s
	}
	real := snapshot.NameID("db.query")
	in := []snapshot.Series{
		span("db.query", 7, 1000, 2000, 3000),
		span("other", 3, 5),
		span("db.query", real, 50, 9_000_000),
		span("db.query", 9, 4000),
	}
	in[3].CgroupID = 2
	out := mergeSeries(in, 10*time.Second, map[string]int{"db.query": 1})
	if len(out) != 3 || out[1].Span != "other" || out[2].CgroupID != 2 {
		t.Fatalf("merged into %+v", out)
	}
	all := []uint64{1000, 2000, 3000, 50, 9_000_000}
	want := span("db.query", real, all...)
	want.Errors, want.OverBudget = 2, 4
	want.SetRates(10 * time.Second)
	want.BudgetNs = max(real, 7)
	if !reflect.DeepEqual(out[0], want) {
		t.Errorf("merged\n got %+v\nwant %+v", out[0], want)
	}
}
