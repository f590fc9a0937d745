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
	out := mergeSeries(in, 10*time.Second, func(s *snapshot.Series) bool { return s.Span == "db.query" })
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

// TestMergeSplitByProcess checks that series of a split cgroup merge by
// their whole identity: two processes of one executable are one series,
// another executable's and another cgroup's stay apart.
func TestMergeSplitByProcess(t *testing.T) {
	span := func(process string, cg uint64, durs ...uint64) snapshot.Series {
		s := snapshot.Series{Span: "work", NameID: snapshot.NameID("work"), CgroupID: cg, Count: uint64(len(durs))}
		s.Process = process
		for _, d := range durs {
			s.SumNs += d
			s.MaxNs = max(s.MaxNs, d)
			if s.MinNs == 0 || d < s.MinNs {
				s.MinNs = d
			}
		}
		s.Histogram = snapshot.DurationHistogram(durs)
		s.SetRates(time.Second)
		return s
	}
	in := []snapshot.Series{
		span("alpha", 1, 10, 20),
		span("beta", 1, 30),
		span("alpha", 1, 40, 50, 60),
		span("alpha", 2, 70),
		span("", 1, 80),
	}
	out := mergeSeries(in, time.Second, func(s *snapshot.Series) bool { return s.CgroupID == 1 })
	type row struct {
		process string
		cg      uint64
		count   uint64
		sum     uint64
		buckets uint64
	}
	var got []row
	for _, s := range out {
		var n uint64
		for _, b := range s.Histogram {
			n += b.Count
		}
		got = append(got, row{s.Process, s.CgroupID, s.Count, s.SumNs, n})
	}
	want := []row{{"alpha", 1, 5, 180, 5}, {"beta", 1, 1, 30, 1}, {"alpha", 2, 1, 70, 1}, {"", 1, 1, 80, 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merged %+v, want %+v", got, want)
	}
}
