package snapshot

import (
	"math/bits"
	"slices"
	"time"
)

// Totals are what adds up when series of one span or metric are combined:
// the counts, the sum and the exact extremes. Sum, Min and Max are a
// span's SumNs, MinNs and MaxNs, or an argument metric's Sum, Min and Max
// as the bits of their int64 (two's complement sums add alike).
type Totals struct {
	Count, Errors, OverBudget uint64
	Sum, Min, Max             uint64
}

// Totals returns the series' totals.
func (s *Series) Totals() Totals {
	t := Totals{Count: s.Count, Errors: s.Errors, OverBudget: s.OverBudget}
	if s.IsMetric() {
		t.Sum, t.Min, t.Max = uint64(s.Sum), uint64(s.Min), uint64(s.Max)
	} else {
		t.Sum, t.Min, t.Max = s.SumNs, s.MinNs, s.MaxNs
	}
	return t
}

// An Accumulator combines series of one span or metric into one: the
// windows of a range (the detector's rules), or the series one window
// holds twice (the collector's resolved names). Counts and sums add,
// extremes combine, histograms merge bucket by bucket, and the quantiles
// are taken once, from the merged histogram, by the rule of Quantile. It
// is the one place where series are combined.
//
// An Accumulator reuses its buffers from one Reset to the next; it is not
// safe for concurrent use.
type Accumulator struct {
	metric bool
	t      Totals
	// bound is, quantile by quantile, the largest of the quantiles of the
	// series added without their histogram (Bound); bounded says there
	// were some.
	bound   [3]float64
	bounded bool
	// The merged histogram: counts by Ord, dense from lo (the usual: one
	// distribution's body and tail) with used's bits saying which are
	// set, or in sparse when the ords did not fit.
	hist   bool // some bucket was added
	lo     int64
	dense  []uint64
	used   []uint64
	sparse map[int64]uint64
	ords   []int64
	n      uint64 // the values the histogram holds
	// mids caches each bucket's midpoint by ord, durations' and metric
	// values', kept from one Reset to the next.
	mids [2]map[int64]float64
}

// maxDense bounds the span of ords merged in a dense array; wider
// histograms (a metric with both negative and positive values, spans with
// a zero bucket) merge in a map.
const maxDense = 1 << 14

// Reset starts the accumulator over, for series of argument metrics or of
// spans.
func (a *Accumulator) Reset(metric bool) {
	clear(a.dense)
	clear(a.used)
	clear(a.sparse)
	*a = Accumulator{metric: metric, dense: a.dense[:0], used: a.used[:0], sparse: a.sparse, ords: a.ords[:0], mids: a.mids}
}

// Add adds a series: its totals and its histogram. A series with no
// spans (or values) adds nothing.
func (a *Accumulator) Add(s *Series) {
	t := s.Totals()
	a.AddTotals(&t)
	if s.Count == 0 || len(s.Histogram) == 0 {
		return
	}
	h := s.Histogram
	if !a.hist {
		a.Reserve(h[0].Ord(), h[len(h)-1].Ord())
	}
	for i := range h {
		a.AddBucket(h[i].Ord(), h[i].Count)
	}
}

// AddTotals adds a series' totals (those of a series with no spans add
// nothing), without its histogram: the caller adds that with AddBucket,
// or bounds the quantiles with Bound.
func (a *Accumulator) AddTotals(t *Totals) {
	if t.Count == 0 {
		return
	}
	first := a.t.Count == 0
	a.t.Count += t.Count
	a.t.Errors += t.Errors
	a.t.OverBudget += t.OverBudget
	a.t.Sum += t.Sum
	switch {
	case first:
		a.t.Min, a.t.Max = t.Min, t.Max
	case a.metric:
		a.t.Min = uint64(min(int64(a.t.Min), int64(t.Min)))
		a.t.Max = uint64(max(int64(a.t.Max), int64(t.Max)))
	default:
		a.t.Min, a.t.Max = min(a.t.Min, t.Min), max(a.t.Max, t.Max)
	}
}

// Bound adds the quantiles (in the order of Quantiles) of a series whose
// histogram is not known, a hand-written one: merged histograms cannot
// include it, so the combined quantiles are at least its own.
func (a *Accumulator) Bound(q [3]float64) {
	if !a.bounded {
		a.bound, a.bounded = q, true
		return
	}
	for i := range q {
		a.bound[i] = max(a.bound[i], q[i])
	}
}

// Reserve says that the buckets to come have ords in [lo, hi], before the
// first AddBucket: they are then merged in a dense array.
func (a *Accumulator) Reserve(lo, hi int64) {
	if a.hist || hi < lo || hi-lo >= maxDense {
		return
	}
	span := int(hi-lo) + 1
	if cap(a.dense) < span {
		a.dense = make([]uint64, span)
		a.used = make([]uint64, (span+63)/64)
	}
	a.lo, a.dense, a.used = lo, a.dense[:span], a.used[:(span+63)/64]
}

// AddBucket adds count values to the bucket of ord o (Bucket.Ord).
func (a *Accumulator) AddBucket(o int64, count uint64) {
	a.hist = true
	a.n += count
	if i := uint64(o - a.lo); i < uint64(len(a.dense)) {
		a.dense[i] += count
		a.used[i>>6] |= 1 << (i & 63)
		return
	}
	a.addSparse(o, count)
}

// addSparse counts a bucket outside the dense array's span; the dense
// array's counts move to the map first.
func (a *Accumulator) addSparse(o int64, count uint64) {
	if a.sparse == nil {
		a.sparse = map[int64]uint64{}
	}
	if len(a.dense) > 0 {
		a.walkDense(func(o int64, c uint64) bool {
			a.sparse[o] += c
			return true
		})
		clear(a.dense)
		clear(a.used)
		a.dense, a.used = a.dense[:0], a.used[:0]
	}
	a.sparse[o] += count
}

// walkDense calls f with the dense array's buckets in order, until f
// returns false.
func (a *Accumulator) walkDense(f func(o int64, c uint64) bool) {
	for wi, word := range a.used {
		for word != 0 {
			i := wi<<6 + bits.TrailingZeros64(word)
			word &= word - 1
			if !f(a.lo+int64(i), a.dense[i]) {
				return
			}
		}
	}
}

// walk calls f with the merged histogram's buckets in order, until f
// returns false.
func (a *Accumulator) walk(f func(o int64, c uint64) bool) {
	if len(a.sparse) == 0 {
		a.walkDense(f)
		return
	}
	a.ords = a.ords[:0]
	for o := range a.sparse {
		a.ords = append(a.ords, o)
	}
	slices.Sort(a.ords)
	for _, o := range a.ords {
		if !f(o, a.sparse[o]) {
			return
		}
	}
}

// extremes returns the combined extremes as floats.
func (a *Accumulator) extremes() (mn, mx float64) {
	if a.metric {
		return float64(int64(a.t.Min)), float64(int64(a.t.Max))
	}
	return float64(a.t.Min), float64(a.t.Max)
}

// Quantiles returns the Quantiles of the merged histogram, clamped to the
// combined extremes (Quantile), and at least those Bound was given.
func (a *Accumulator) Quantiles() (q [3]float64) {
	if a.hist {
		mn, mx := a.extremes()
		var w rankWalk
		w.start(a.n, Quantiles[:], mn, mx)
		visit := func(o int64, c uint64) bool {
			if w.step(c) {
				w.take(a.midpoint(o))
			}
			return !w.done()
		}
		switch {
		case a.n == 0:
		case len(a.sparse) == 0:
			// The hot path (every range of every rule): walkDense and
			// visit are inlined, no call per bucket.
			a.walkDense(visit)
		default:
			a.walk(visit)
		}
		q = w.out
	}
	if a.bounded {
		if !a.hist {
			return a.bound
		}
		for i := range q {
			q[i] = max(q[i], a.bound[i])
		}
	}
	return q
}

// midpoint is the Midpoint of the bucket of ord o.
func (a *Accumulator) midpoint(o int64) float64 {
	k := 0
	if a.metric {
		k = 1
	}
	if v, ok := a.mids[k][o]; ok {
		return v
	}
	if a.mids[k] == nil {
		a.mids[k] = map[int64]float64{}
	}
	b := OrdBucket(o, 0, a.metric)
	v := Midpoint(&b)
	a.mids[k][o] = v
	return v
}

// Histogram returns the merged histogram, sorted.
func (a *Accumulator) Histogram() []Bucket {
	var h []Bucket
	a.walk(func(o int64, c uint64) bool {
		h = append(h, OrdBucket(o, c, a.metric))
		return true
	})
	return h
}

// Into sets s's counts, sums, extremes, rates over covered (the time the
// combined series cover), and quantiles to the combined ones; the fields
// of the other kind (a metric's for a span, a span's for a metric) are
// zeroed. Labels, budget and histogram are left as they are.
func (a *Accumulator) Into(s *Series, covered time.Duration) {
	t := &a.t
	s.Count, s.Errors, s.OverBudget = t.Count, t.Errors, t.OverBudget
	s.SumNs, s.MinNs, s.MaxNs, s.P50Ns, s.P90Ns, s.P99Ns = 0, 0, 0, 0, 0, 0
	s.Sum, s.Min, s.Max, s.P50, s.P90, s.P99 = 0, 0, 0, 0, 0, 0
	if a.metric {
		s.Sum, s.Min, s.Max = int64(t.Sum), int64(t.Min), int64(t.Max)
	} else {
		s.SumNs, s.MinNs, s.MaxNs = t.Sum, t.Min, t.Max
	}
	s.SetRates(covered)
	s.SetQuantiles(a.Quantiles())
}
