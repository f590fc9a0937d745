package snapshot_test

import (
	"math"
	"math/rand"
	"reflect"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// accCase is a series combined over windows (or twins): each window's
// values, with its errors and over-budget counts.
type accCase struct {
	name   string
	metric bool
	wins   [][]int64
	// noHist marks windows given without their histogram (their own
	// quantiles only), as hand-written snapshots are.
	noHist []bool
}

func spread(n int, mul, mod, off int64) []int64 {
	v := make([]int64, n)
	for i := range v {
		v[i] = (int64(i)*mul)%mod + off
	}
	return v
}

var accCases = []accCase{
	{name: "spans", wins: [][]int64{{1000, 2000, 3000}, {1500, 1_000_000}, {7, 7, 7, 9_000_000_000}}},
	{name: "spans one window", wins: [][]int64{{10, 20, 30, 40, 50}}},
	{name: "spans one value", wins: [][]int64{{123456}}},
	{name: "spans zero durations", wins: [][]int64{{0, 5, 100}, {3_000_000}, {0}}},
	{name: "spans many", wins: [][]int64{spread(500, 7919, 100000, 1), spread(300, 104729, 5_000_000, 1000), spread(50, 13, 400, 90_000)}},
	{name: "spans empty window", wins: [][]int64{{}, {400, 500}, {}}},
	{name: "spans no windows"},
	{name: "spans without histogram", wins: [][]int64{{1000, 2000, 3000}, {5000, 6000}, {100, 200}}, noHist: []bool{false, true, false}},
	{name: "spans all without histogram", wins: [][]int64{{1000, 2000, 3000}, {5000, 6000}}, noHist: []bool{true, true}},
	{name: "metrics", metric: true, wins: [][]int64{{-5, 3, 100}, {-1000, 0, 2}, {42}}},
	{name: "metrics positive", metric: true, wins: [][]int64{spread(100, 1, 100, 1), {50, 60}}},
	{name: "metrics negative", metric: true, wins: [][]int64{{-1, -2, -3}, {-70000, -8}}},
	{name: "metrics many", metric: true, wins: [][]int64{spread(400, 7919, 100000, -50000), spread(200, 31, 1000, 0)}},
	{name: "metrics without histogram", metric: true, wins: [][]int64{{-5, 3, 100}, {7, 8}}, noHist: []bool{false, true}},
}

// window builds window i of c as the collector does: counts, sum,
// extremes, histogram and its quantiles; the i-th window has i errors and
// i+1 spans over budget (at most its count).
func (c *accCase) window(i int) snapshot.Series {
	vals := c.wins[i]
	s := snapshot.Series{Span: "s", Count: uint64(len(vals))}
	if c.metric {
		s.Kind = snapshot.KindMetric
	}
	if len(vals) == 0 {
		return s
	}
	s.Errors = min(uint64(i), s.Count)
	s.OverBudget = min(uint64(i+1), s.Count)
	s.BudgetNs = 1000
	counts := map[snapshot.Bucket]uint64{}
	mn, mx := vals[0], vals[0]
	for _, v := range vals {
		mn, mx = min(mn, v), max(mx, v)
		s.Sum += v
		var b snapshot.Bucket
		switch {
		case v == 0:
			b = snapshot.Bucket{Zero: true, Low: 0, High: 1}
		case c.metric:
			a := uint64(v)
			if v < 0 {
				a = uint64(-v)
			}
			b = snapshot.ValueBucketAt(snapshot.ValueIndex(a), v < 0, 0)
		default:
			b = snapshot.DurationBucketAt(snapshot.DurationIndex(uint64(v)), 0)
		}
		counts[b]++
	}
	for b, n := range counts {
		b.Count = n
		s.Histogram = append(s.Histogram, b)
	}
	snapshot.SortBuckets(s.Histogram)
	if c.metric {
		s.Min, s.Max = mn, mx
		s.SetQuantiles(snapshot.HistogramQuantiles(s.Histogram, float64(mn), float64(mx)))
	} else {
		s.SumNs, s.MinNs, s.MaxNs, s.Sum = uint64(s.Sum), uint64(mn), uint64(mx), 0
		s.SetQuantiles(snapshot.HistogramQuantiles(s.Histogram, float64(mn), float64(mx)))
	}
	if i < len(c.noHist) && c.noHist[i] {
		s.Histogram = nil
	}
	s.SetRates(10 * time.Second)
	return s
}

// accResult is what a combined series holds, quantiles as float64 bits.
type accResult struct {
	Count, Errors, Over uint64
	Sum, Min, Max       int64
	Q                   [3]uint64
	Rate, ErrorRatio    float64
}

func resultOf(s *snapshot.Series) accResult {
	r := accResult{Count: s.Count, Errors: s.Errors, Over: s.OverBudget, Rate: s.Rate, ErrorRatio: s.ErrorRatio}
	if s.IsMetric() {
		r.Sum, r.Min, r.Max = s.Sum, s.Min, s.Max
		r.Q = [3]uint64{math.Float64bits(s.P50), math.Float64bits(s.P90), math.Float64bits(s.P99)}
	} else {
		r.Sum, r.Min, r.Max = int64(s.SumNs), int64(s.MinNs), int64(s.MaxNs)
		r.Q = [3]uint64{s.P50Ns, s.P90Ns, s.P99Ns}
	}
	return r
}

// rangeWant are the detector's range aggregates of accCases, as its own
// code computed them before the Accumulator (detector/history.go's
// aggregate and histpack.go's merger, at 70988e6): the windows are 10s
// each and all in the range.
var rangeWant = map[string]accResult{
	"spans":                       {Count: 9, Errors: 3, Over: 6, Sum: 9001007521, Min: 7, Max: 9000000000, Q: [3]uint64{1494, 9000000000, 9000000000}, Rate: 0.3, ErrorRatio: 0.3333333333333333},
	"spans one window":            {Count: 5, Errors: 0, Over: 1, Sum: 150, Min: 10, Max: 50, Q: [3]uint64{30, 50, 50}, Rate: 0.5, ErrorRatio: 0},
	"spans one value":             {Count: 1, Errors: 0, Over: 1, Sum: 123456, Min: 123456, Max: 123456, Q: [3]uint64{123456, 123456, 123456}, Rate: 0.1, ErrorRatio: 0},
	"spans zero durations":        {Count: 5, Errors: 2, Over: 3, Sum: 3000105, Min: 0, Max: 3000000, Q: [3]uint64{5, 3000000, 3000000}, Rate: 0.16666666666666666, ErrorRatio: 0.4},
	"spans many":                  {Count: 850, Errors: 3, Over: 6, Sum: 751699725, Min: 1, Max: 4977247, Q: [3]uint64{83106, 3486361, 4824809}, Rate: 28.333333333333332, ErrorRatio: 0.0035294117647058825},
	"spans empty window":          {Count: 2, Errors: 1, Over: 2, Sum: 900, Min: 400, Max: 500, Q: [3]uint64{400, 500, 500}, Rate: 0.06666666666666667, ErrorRatio: 0.5},
	"spans no windows":            {Count: 0, Errors: 0, Over: 0, Sum: 0, Min: 0, Max: 0, Q: [3]uint64{0, 0, 0}, Rate: 0, ErrorRatio: 0},
	"spans without histogram":     {Count: 7, Errors: 3, Over: 5, Sum: 17300, Min: 100, Max: 6000, Q: [3]uint64{5000, 6000, 6000}, Rate: 0.23333333333333334, ErrorRatio: 0.42857142857142855},
	"spans all without histogram": {Count: 5, Errors: 1, Over: 3, Sum: 17000, Min: 1000, Max: 6000, Q: [3]uint64{5000, 6000, 6000}, Rate: 0.25, ErrorRatio: 0.2},
	"metrics":                     {Count: 7, Errors: 2, Over: 4, Sum: -858, Min: -1000, Max: 100, Q: [3]uint64{0x4000000000000000, 0x4059000000000000, 0x4059000000000000}, Rate: 0.23333333333333334, ErrorRatio: 0.2857142857142857},
	"metrics positive":            {Count: 102, Errors: 1, Over: 3, Sum: 5160, Min: 1, Max: 100, Q: [3]uint64{0x4049000000000000, 0x4056800000000000, 0x4058c00000000000}, Rate: 5.1, ErrorRatio: 0.00980392156862745},
	"metrics negative":            {Count: 5, Errors: 1, Over: 3, Sum: -70014, Min: -70000, Max: -1, Q: [3]uint64{0xc008000000000000, 0xbff0000000000000, 0xbff0000000000000}, Rate: 0.25, ErrorRatio: 0.2},
	"metrics many":                {Count: 600, Errors: 1, Over: 3, Sum: -65900, Min: -50000, Max: 49819, Q: [3]uint64{0x407cdfee44b04df7, 0x40e0fb6fbd8c47f7, 0x40e78069873ea232}, Rate: 30, ErrorRatio: 0.0016666666666666668},
	"metrics without histogram":   {Count: 5, Errors: 1, Over: 3, Sum: 113, Min: -5, Max: 100, Q: [3]uint64{0x401c000000000000, 0x4059000000000000, 0x4059000000000000}, Rate: 0.25, ErrorRatio: 0.2},
}

// twinWant are the collector's merges of accCases' windows as twins of one
// 10s window (collector/names.go's mergeInto, at 70988e6), with the number
// of buckets of the merged histogram: a window without its histogram
// counts in the totals only.
var twinWant = map[string]struct {
	accResult
	buckets int
}{
	"spans":                       {accResult{Count: 9, Errors: 3, Over: 6, Sum: 9001007521, Min: 7, Max: 9000000000, Q: [3]uint64{1494, 9000000000, 9000000000}, Rate: 0.9, ErrorRatio: 0.3333333333333333}, 7},
	"spans one window":            {accResult{Count: 5, Errors: 0, Over: 1, Sum: 150, Min: 10, Max: 50, Q: [3]uint64{30, 50, 50}, Rate: 0.5, ErrorRatio: 0}, 5},
	"spans one value":             {accResult{Count: 1, Errors: 0, Over: 1, Sum: 123456, Min: 123456, Max: 123456, Q: [3]uint64{123456, 123456, 123456}, Rate: 0.1, ErrorRatio: 0}, 1},
	"spans zero durations":        {accResult{Count: 5, Errors: 2, Over: 3, Sum: 3000105, Min: 0, Max: 3000000, Q: [3]uint64{5, 3000000, 3000000}, Rate: 0.5, ErrorRatio: 0.4}, 4},
	"spans many":                  {accResult{Count: 850, Errors: 3, Over: 6, Sum: 751699725, Min: 1, Max: 4977247, Q: [3]uint64{83106, 3486361, 4824809}, Rate: 85, ErrorRatio: 0.0035294117647058825}, 425},
	"spans empty window":          {accResult{Count: 2, Errors: 1, Over: 2, Sum: 900, Min: 400, Max: 500, Q: [3]uint64{400, 500, 500}, Rate: 0.2, ErrorRatio: 0.5}, 2},
	"spans no windows":            {accResult{Count: 0, Errors: 0, Over: 0, Sum: 0, Min: 0, Max: 0, Q: [3]uint64{0, 0, 0}, Rate: 0, ErrorRatio: 0}, 0},
	"spans without histogram":     {accResult{Count: 7, Errors: 3, Over: 5, Sum: 17300, Min: 100, Max: 6000, Q: [3]uint64{1001, 6000, 6000}, Rate: 0.7, ErrorRatio: 0.42857142857142855}, 5},
	"spans all without histogram": {accResult{Count: 5, Errors: 1, Over: 3, Sum: 17000, Min: 1000, Max: 6000, Q: [3]uint64{0, 0, 0}, Rate: 0.5, ErrorRatio: 0.2}, 0},
	"metrics":                     {accResult{Count: 7, Errors: 2, Over: 4, Sum: -858, Min: -1000, Max: 100, Q: [3]uint64{0x4000000000000000, 0x4059000000000000, 0x4059000000000000}, Rate: 0.7, ErrorRatio: 0.2857142857142857}, 7},
	"metrics positive":            {accResult{Count: 102, Errors: 1, Over: 3, Sum: 5160, Min: 1, Max: 100, Q: [3]uint64{0x4049000000000000, 0x4056800000000000, 0x4058c00000000000}, Rate: 10.2, ErrorRatio: 0.00980392156862745}, 100},
	"metrics negative":            {accResult{Count: 5, Errors: 1, Over: 3, Sum: -70014, Min: -70000, Max: -1, Q: [3]uint64{0xc008000000000000, 0xbff0000000000000, 0xbff0000000000000}, Rate: 0.5, ErrorRatio: 0.2}, 5},
	"metrics many":                {accResult{Count: 600, Errors: 1, Over: 3, Sum: -65900, Min: -50000, Max: 49819, Q: [3]uint64{0x407cdfee44b04df7, 0x40e0fb6fbd8c47f7, 0x40e78069873ea232}, Rate: 60, ErrorRatio: 0.0016666666666666668}, 460},
	"metrics without histogram":   {accResult{Count: 5, Errors: 1, Over: 3, Sum: 113, Min: -5, Max: 100, Q: [3]uint64{0x4008000000000000, 0x4059000000000000, 0x4059000000000000}, Rate: 0.5, ErrorRatio: 0.2}, 3},
}

// quantilesOf returns a series' own quantiles in the order of Quantiles.
func quantilesOf(s *snapshot.Series) [3]float64 {
	if s.IsMetric() {
		return [3]float64{s.P50, s.P90, s.P99}
	}
	return [3]float64{float64(s.P50Ns), float64(s.P90Ns), float64(s.P99Ns)}
}

// TestAccumulatorRange: combining the windows of a range gives what the
// detector's own code gave: counts and sums add, extremes combine, rates
// over the time covered, quantiles from the merged histograms (bounded by
// the quantiles of windows without one). One accumulator serves every
// case, as the detector reuses its own from series to series; each case
// is merged five ways: buckets spanned by the first series (Add), the
// span of all reserved first, and none reserved (every bucket in the
// map), each bucket by bucket (AddBucket) or packed (AddPacked, as the
// detector does).
func TestAccumulatorRange(t *testing.T) {
	var a snapshot.Accumulator
	for _, c := range accCases {
		covered := time.Duration(max(len(c.wins), 1)) * 10 * time.Second
		for _, how := range []string{"add", "reserve", "sparse", "packed", "packed sparse"} {
			a.Reset(c.metric)
			lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
			for i := range c.wins {
				if w := c.window(i); len(w.Histogram) > 0 {
					lo, hi = min(lo, w.Histogram[0].Ord()), max(hi, w.Histogram[len(w.Histogram)-1].Ord())
				}
			}
			if how == "reserve" || how == "packed" {
				a.Reserve(lo, hi)
			}
			for i := range c.wins {
				w := c.window(i)
				switch {
				case i < len(c.noHist) && c.noHist[i]:
					tot := w.Totals()
					a.AddTotals(&tot)
					a.Bound(quantilesOf(&w))
				case how == "add":
					a.Add(&w)
				case how == "packed" || how == "packed sparse":
					tot := w.Totals()
					a.AddTotals(&tot)
					p, first, _, ok := snapshot.PackHistogram(nil, w.Histogram)
					if !ok {
						t.Fatalf("%s: window %d's histogram not sorted", c.name, i)
					}
					a.AddPacked(p, first)
				default:
					tot := w.Totals()
					a.AddTotals(&tot)
					for _, b := range w.Histogram {
						a.AddBucket(b.Ord(), b.Count)
					}
				}
			}
			out := snapshot.Series{Span: "s", Kind: map[bool]string{true: snapshot.KindMetric}[c.metric]}
			a.Into(&out, covered)
			if got, want := resultOf(&out), rangeWant[c.name]; got != want {
				t.Errorf("%s (%s):\n got %+v\nwant %+v", c.name, how, got, want)
			}
		}
	}
}

// TestAccumulatorTwins: combining the series one window holds twice
// gives what the collector's own merge gave, and the merged histogram is
// the windows' histograms merged (MergeHistogram).
func TestAccumulatorTwins(t *testing.T) {
	var a snapshot.Accumulator
	for _, c := range accCases {
		a.Reset(c.metric)
		var merged []snapshot.Bucket
		for i := range c.wins {
			w := c.window(i)
			a.Add(&w)
			if w.Count > 0 {
				merged = snapshot.MergeHistogram(merged, w.Histogram)
			}
		}
		out := snapshot.Series{Span: "s", Kind: map[bool]string{true: snapshot.KindMetric}[c.metric]}
		a.Into(&out, 10*time.Second)
		want := twinWant[c.name]
		if got := resultOf(&out); got != want.accResult {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, want.accResult)
		}
		h := a.Histogram()
		if len(h) != want.buckets || !reflect.DeepEqual(h, merged) {
			t.Errorf("%s: merged histogram\n got %v\nwant %v (%d buckets)", c.name, h, merged, want.buckets)
		}
	}
}

// TestAccumulatorQuantiles: over random histograms of durations and of
// metric values, merged dense or sparse, the accumulator's quantiles are
// those HistogramQuantiles (Quantile's rule) takes from the merged
// histogram, clamped to the combined extremes.
func TestAccumulatorQuantiles(t *testing.T) {
	r := rand.New(rand.NewSource(23))
	var a snapshot.Accumulator
	for iter := 0; iter < 300; iter++ {
		c := accCase{metric: iter%2 == 1}
		for w := 0; w < 1+r.Intn(6); w++ {
			vals := make([]int64, r.Intn(40))
			scale := int64(1) << r.Intn(40)
			for i := range vals {
				vals[i] = r.Int63n(scale) + 1
				if c.metric && iter%4 == 1 && r.Intn(3) == 0 {
					vals[i] = -vals[i]
				}
				if iter%5 == 0 && r.Intn(10) == 0 {
					vals[i] = 0
				}
			}
			c.wins = append(c.wins, vals)
		}
		a.Reset(c.metric)
		var merged []snapshot.Bucket
		first := true
		var mn, mx int64
		for i := range c.wins {
			w := c.window(i)
			a.Add(&w)
			if w.Count == 0 {
				continue
			}
			merged = snapshot.MergeHistogram(merged, w.Histogram)
			lo, hi := slicesMinMax(c.wins[i])
			if first || lo < mn {
				mn = lo
			}
			if first || hi > mx {
				mx = hi
			}
			first = false
		}
		want := snapshot.HistogramQuantiles(merged, float64(mn), float64(mx))
		if got := a.Quantiles(); got != want {
			t.Errorf("case %d %v: quantiles %v, want %v", iter, c.wins, got, want)
		}
	}
}

func slicesMinMax(v []int64) (lo, hi int64) {
	lo, hi = v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// TestAccumulatorEmpty: an accumulator given nothing, or only series
// without spans, sets zeros (never NaN) and an empty histogram, and Into
// zeroes what the target held, the other kind's fields too.
func TestAccumulatorEmpty(t *testing.T) {
	for _, metric := range []bool{false, true} {
		var a snapshot.Accumulator
		a.Reset(metric)
		empty := snapshot.Series{Span: "s"}
		a.Add(&empty)
		out := snapshot.Series{Span: "s", Count: 9, SumNs: 9, MinNs: 9, MaxNs: 9, P99Ns: 9, Sum: -9, Min: -9, P50: 9, Rate: 9, ErrorRatio: 1}
		if metric {
			out.Kind = snapshot.KindMetric
		}
		a.Into(&out, 10*time.Second)
		want := snapshot.Series{Span: "s", Kind: out.Kind}
		if !reflect.DeepEqual(out, want) {
			t.Errorf("metric %v: %+v, want %+v", metric, out, want)
		}
		if h := a.Histogram(); h != nil {
			t.Errorf("metric %v: histogram %v, want none", metric, h)
		}
	}
}

// TestOrd: Ord orders buckets as SortBuckets does, and OrdBucket
// rebuilds the bucket of an ord.
func TestOrd(t *testing.T) {
	h := []snapshot.Bucket{
		snapshot.ValueBucketAt(snapshot.ValueIndex(1000), true, 1),
		snapshot.ValueBucketAt(snapshot.ValueIndex(3), true, 2),
		{Zero: true, Low: 0, High: 1, Count: 3},
		snapshot.ValueBucketAt(snapshot.ValueIndex(1), false, 4),
		snapshot.ValueBucketAt(snapshot.ValueIndex(1<<40), false, 5),
	}
	for i := range h {
		if i > 0 && h[i-1].Ord() >= h[i].Ord() {
			t.Errorf("ord of %+v (%d) not below %+v's (%d)", h[i-1], h[i-1].Ord(), h[i], h[i].Ord())
		}
		if b := snapshot.OrdBucket(h[i].Ord(), h[i].Count, true); b != h[i] {
			t.Errorf("OrdBucket(%d) = %+v, want %+v", h[i].Ord(), b, h[i])
		}
	}
	d := snapshot.DurationBucket(1500, 7)
	if b := snapshot.OrdBucket(d.Ord(), 7, false); b != d {
		t.Errorf("OrdBucket(%d) = %+v, want %+v", d.Ord(), b, d)
	}
}

// TestSetHistogramQuantiles: a window's quantiles come from its own
// histogram, clamped to its own extremes, a span's in nanoseconds and a
// metric's as they are.
func TestSetHistogramQuantiles(t *testing.T) {
	for _, c := range accCases {
		for i := range c.wins {
			w := c.window(i)
			if len(w.Histogram) == 0 {
				continue
			}
			want := quantilesOf(&w) // window() takes them with HistogramQuantiles
			w.P50Ns, w.P90Ns, w.P99Ns, w.P50, w.P90, w.P99 = 0, 0, 0, 0, 0, 0
			w.SetHistogramQuantiles()
			if got := quantilesOf(&w); got != want {
				t.Errorf("%s window %d: %v, want %v", c.name, i, got, want)
			}
		}
	}
}
