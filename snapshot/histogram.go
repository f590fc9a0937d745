package snapshot

import (
	"math"
	"math/big"
	"math/bits"
	"sort"
)

// The histogram is Prometheus' native histogram of schema 6, exactly: each
// power of two is split into 64 buckets whose bounds grow by a factor of
// 2^(1/64) (1.09%), so a bucket's geometric midpoint is within 0.55% of
// every value in it. Durations are bucketed in seconds, as Prometheus
// expects a _seconds histogram: bucket i holds the durations d with
//
//	2^((i-1)/64) s < d <= 2^(i/64) s
//
// and a duration of 0 goes to the zero bucket. Argument metrics (values
// without a unit) are bucketed the same way on their absolute value, with
// negative values in buckets of their own and 0 in the zero bucket.
//
// The BPF programs compute the same index with integer arithmetic only
// (bpf/hist.h, from the table in bpf/hist_table.h that hist_gen.go writes),
// so that an exported bucket is exactly one of Prometheus' buckets: nothing
// is lost in translation, and histograms of any number of windows and
// agents merge bucket by bucket.
const (
	// HistSchema is the Prometheus native histogram schema of the buckets.
	HistSchema = 6
	// HistPerOctave is the number of buckets per power of two.
	HistPerOctave = 1 << HistSchema
)

// A scale says what one unit of a bucketed value is worth in the unit its
// buckets are laid out in: durations are nanoseconds bucketed in seconds
// (1e9 per unit), metric values are bucketed as they are (1).
type scale struct {
	// factor is the S in bound(i) = S * 2^(i/64), in the value's own unit.
	factor uint64
	// k is the fixed-point shift of table: table[r] = floor(S * 2^(r/64) * 2^k).
	k uint
	// off is how far below the value's highest bit the bucket's octave
	// starts: bits.Len(S) (30 for 1e9, 1 for 1).
	off int
	// table[r], r = 0..64: floor(S * 2^(r/64) * 2^k). Exact: computed
	// with 256-bit floats from 2^(1/64) by repeated square roots.
	table [HistPerOctave + 1]uint64
}

var (
	durationScale = newScale(1e9, 32)
	valueScale    = newScale(1, 61)
)

func newScale(factor uint64, k uint) *scale {
	s := &scale{factor: factor, k: k, off: bits.Len64(factor)}
	const prec = 256
	root := new(big.Float).SetPrec(prec).SetInt64(2)
	for i := 0; i < HistSchema; i++ {
		root.Sqrt(root) // 2^(1/64) after six square roots
	}
	f := new(big.Float).SetPrec(prec).SetUint64(factor)
	f.SetMantExp(f, int(k)) // S * 2^k
	for r := 0; r < HistPerOctave; r++ {
		// Every r but 0 gives an irrational number, which is never
		// within 2^-200 (the product's rounding error) of an integer:
		// Int truncates exactly.
		v, _ := f.Int(nil)
		s.table[r] = v.Uint64()
		f.Mul(f, root)
	}
	// 2^(64/64) is exactly 2; the running product is within 2^-240 of it.
	s.table[HistPerOctave] = 2 * s.table[0]
	return s
}

// maxExact is the largest value bucketed exactly; larger ones (146 years
// of nanoseconds, or metric values above 2^62) go to its bucket.
const maxExact = 1 << 62

// index returns the schema-6 bucket of v >= 1: the smallest i with
// v <= S * 2^(i/64). It is what hist_index() in bpf/hist.h computes, step
// by step, in integers.
func (s *scale) index(v uint64) int32 {
	if v > maxExact {
		v = maxExact
	}
	b := bits.Len64(v) - 1 // v in [2^b, 2^(b+1))
	p := b - s.off
	// S * 2^p < 2^b <= v. Is v above S * 2^(p+1) too?
	if shl(v, int(s.k)-(p+1)) > s.table[0] {
		p++
	}
	// Now S * 2^p < v <= S * 2^(p+1): find the smallest r in 1..64 with
	// v <= S * 2^p * 2^(r/64), that is v * 2^(k-p) <= table[r].
	if int(s.k)-p < 0 {
		return int32(p)*HistPerOctave + HistPerOctave // past any real value
	}
	l := v << uint(int(s.k)-p)
	lo, hi := 1, HistPerOctave
	for lo < hi {
		mid := (lo + hi) / 2
		if l <= s.table[mid] {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return int32(p)*HistPerOctave + int32(lo)
}

// shl is v << n for n >= 0 and v >> -n for n < 0. index shifts right only
// maxExact, a power of two, so no bit is lost; left shifts stay below 2^63
// (v < 2^(b+1) and n <= 62-b).
func shl(v uint64, n int) uint64 {
	if n >= 0 {
		return v << uint(n)
	}
	return v >> uint(-n)
}

// bound returns the largest integer value in bucket i: floor(S * 2^(i/64)),
// saturated at the maximum uint64.
func (s *scale) bound(i int32) uint64 {
	q := floorDiv(i, HistPerOctave)
	t := s.table[i-q*HistPerOctave]
	sh := int(q) - int(s.k)
	switch {
	case sh >= 64 || (sh > 0 && t > math.MaxUint64>>uint(sh)):
		return math.MaxUint64
	case sh >= 0:
		return t << uint(sh)
	case sh <= -64:
		return 0
	}
	// table[r] = floor(S*2^(r/64)*2^k); shifting it right by k-q gives
	// floor(S*2^(r/64)*2^q) exactly (floor of floor/2^n is floor/2^n).
	return t >> uint(-sh)
}

func floorDiv(a, b int32) int32 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// bounds returns bucket i's integer values as [low, high): low is the
// smallest integer above the previous bucket's bound, high one past the
// largest integer at or below this bucket's. The bucket holds no integer
// when low == high (buckets narrower than 1 below 92 units).
func (s *scale) bounds(i int32) (low, high uint64) {
	low = s.bound(i-1) + 1
	high = s.bound(i)
	if high != math.MaxUint64 {
		high++
	}
	if low > high {
		low = high
	}
	return low, high
}

// DurationIndex returns the bucket of a duration of ns > 0 nanoseconds.
// (A duration of 0 belongs in the zero bucket, which has no index.)
func DurationIndex(ns uint64) int32 { return durationScale.index(ns) }

// DurationBounds returns the nanoseconds bucket i holds, as [low, high).
func DurationBounds(i int32) (low, high uint64) { return durationScale.bounds(i) }

// ValueIndex returns the bucket of a metric value's absolute value v > 0.
func ValueIndex(v uint64) int32 { return valueScale.index(v) }

// ValueBounds returns the absolute values bucket i holds, as [low, high).
func ValueBounds(i int32) (low, high uint64) { return valueScale.bounds(i) }

// Cells returns the BPF programs' shortcut into the table: the part of an
// octave a normalized value L (in (table[0], table[64]]) falls in is cut
// into cells of 2^shift, narrower than any bucket, so a cell holds at most
// one bucket bound: cell[j] is the bucket of the cell's first value, and
// the bucket of L is cell[j] or cell[j]+1, one comparison apart
// (hist_index in bpf/hist.h). Checked by TestCells.
func (s *scale) cells() (cell [256]uint8, shift uint) {
	f0 := s.table[0]
	shift = uint(bits.Len64(f0/128 - 1)) // the smallest 2^shift >= f0/128
	for j := range cell {
		lo := f0 + uint64(j)<<shift
		if j == 0 {
			lo++
		}
		if lo > s.table[HistPerOctave] || lo < f0 {
			cell[j] = HistPerOctave
			continue
		}
		r := 1
		for lo > s.table[r] {
			r++
		}
		cell[j] = uint8(r)
	}
	return cell, shift
}

// DurationCells and ValueCells are the scales' cells (see scale.cells).
func DurationCells() (cell [256]uint8, shift uint) { return durationScale.cells() }

// ValueCells is DurationCells for metric values.
func ValueCells() (cell [256]uint8, shift uint) { return valueScale.cells() }

// DurationTable and ValueTable return the fixed-point tables the BPF
// programs compare against (bpf/hist_table.h is generated from them), with
// their shift k and octave offset.
func DurationTable() (table [HistPerOctave + 1]uint64, k uint, off int) {
	return durationScale.table, durationScale.k, durationScale.off
}

// ValueTable is DurationTable for metric values.
func ValueTable() (table [HistPerOctave + 1]uint64, k uint, off int) {
	return valueScale.table, valueScale.k, valueScale.off
}

// A Bucket counts the values of a window that fell in one bucket: the zero
// bucket (Zero), or the schema-6 bucket Index of the positive values or, for
// metric series only, of the negative ones (Negative: the bucket holds -v
// for the v in [Low, High)). Low and High bound the values the bucket holds,
// as [Low, High) in the series' unit (nanoseconds for spans).
type Bucket struct {
	Index    int32  `json:"index"`
	Zero     bool   `json:"zero,omitempty"`
	Negative bool   `json:"negative,omitempty"`
	Low      uint64 `json:"low"`
	High     uint64 `json:"high"`
	Count    uint64 `json:"count"`
}

// DurationBucket returns the bucket of duration ns holding count spans.
func DurationBucket(ns uint64, count uint64) Bucket {
	if ns == 0 {
		return Bucket{Zero: true, Low: 0, High: 1, Count: count}
	}
	return DurationBucketAt(DurationIndex(ns), count)
}

// DurationBucketAt returns duration bucket i holding count spans.
func DurationBucketAt(i int32, count uint64) Bucket {
	lo, hi := DurationBounds(i)
	return Bucket{Index: i, Low: lo, High: hi, Count: count}
}

// ValueBucketAt returns metric bucket i (of -v when negative) holding
// count values.
func ValueBucketAt(i int32, negative bool, count uint64) Bucket {
	lo, hi := ValueBounds(i)
	return Bucket{Index: i, Negative: negative, Low: lo, High: hi, Count: count}
}

// Ord is the bucket's place in the order of the values buckets hold (the
// order of SortBuckets), as one integer: the zero bucket is -2^19,
// negative buckets are -2^20 - Index, positive ones Index. The detector
// packs its windows' histograms by ord; an Accumulator merges by ord.
func (b *Bucket) Ord() int64 {
	switch {
	case b.Zero:
		return ordZero
	case b.Negative:
		return ordNegBase - int64(b.Index)
	}
	return int64(b.Index)
}

const (
	ordZero    = -(1 << 19)
	ordNegBase = -(1 << 20)
)

// OrdBucket returns the bucket of ord o holding count values, of a metric
// or of durations.
func OrdBucket(o int64, count uint64, metric bool) Bucket {
	switch {
	case o == ordZero:
		return Bucket{Zero: true, Low: 0, High: 1, Count: count}
	case o < ordZero:
		return ValueBucketAt(int32(ordNegBase-o), true, count)
	case metric:
		return ValueBucketAt(int32(o), false, count)
	}
	return DurationBucketAt(int32(o), count)
}

// SortBuckets sorts buckets by the values they hold.
func SortBuckets(h []Bucket) {
	sort.Slice(h, func(i, j int) bool { return h[i].Ord() < h[j].Ord() })
}

// MergeHistogram adds src's counts to dst bucket by bucket and returns the
// result, sorted; both must be sorted (as every snapshot's histograms are).
// Histograms of any windows, series or agents merge exactly.
func MergeHistogram(dst, src []Bucket) []Bucket {
	if len(src) == 0 {
		return dst
	}
	out := make([]Bucket, 0, len(dst)+len(src))
	i, j := 0, 0
	for i < len(dst) && j < len(src) {
		switch od, os := dst[i].Ord(), src[j].Ord(); {
		case od == os:
			b := dst[i]
			b.Count += src[j].Count
			out = append(out, b)
			i++
			j++
		case od < os:
			out = append(out, dst[i])
			i++
		default:
			out = append(out, src[j])
			j++
		}
	}
	out = append(out, dst[i:]...)
	return append(out, src[j:]...)
}

// Quantile returns the q-quantile (0 < q <= 1) of the values a sorted
// histogram holds: the value of rank ceil(q*n) among the n values (nearest
// rank), estimated as the geometric midpoint of its bucket (within 0.55% of
// every value the bucket can hold) and clamped to [min, max], the window's
// exact extremes, which it returns themselves for the first and last rank.
// It returns 0 for an empty histogram, never NaN.
//
// Quantile is the rule; HistogramQuantiles and the Accumulator (which
// walks merged counts without building the histogram) apply it through
// the same walk (rankWalk).
func Quantile(h []Bucket, q float64, min, max float64) float64 {
	qs := [1]float64{q}
	return walkQuantiles(h, qs[:], min, max)[0]
}

// walkQuantiles returns the quantiles qs (ascending, at most 3) of a
// sorted histogram, by the rule of Quantile, in one walk.
func walkQuantiles(h []Bucket, qs []float64, min, max float64) (out [3]float64) {
	var n uint64
	for i := range h {
		n += h[i].Count
	}
	if n == 0 {
		return out
	}
	var w rankWalk
	w.start(n, qs, min, max)
	for i := 0; i < len(h) && !w.done(); i++ {
		if w.step(h[i].Count) {
			w.take(Midpoint(&h[i]))
		}
	}
	for ; w.next < w.k; w.next++ {
		w.out[w.next] = max
	}
	return w.out
}

// A rankWalk takes quantiles of n values counted bucket by bucket, in the
// order of the values the buckets hold: the value of rank ceil(q*n) (at
// least 1, at most n) is the midpoint of the bucket that holds that rank,
// clamped to the exact extremes [mn, mx], and the extremes themselves for
// the first and last rank; mn > mx means the extremes are not known, and
// the midpoint is taken as it is. It is the one quantile rule: Quantile,
// HistogramQuantiles and the Accumulator walk with it.
type rankWalk struct {
	n, seen uint64
	ranks   [3]uint64
	k, next int
	mn, mx  float64
	out     [3]float64
}

// start readies the walk for the quantiles qs (ascending, at most 3) of
// n > 0 values.
func (w *rankWalk) start(n uint64, qs []float64, mn, mx float64) {
	*w = rankWalk{n: n, k: len(qs), mn: mn, mx: mx}
	for i, q := range qs {
		r := uint64(math.Ceil(q*float64(n) - 1e-9))
		w.ranks[i] = min(max(r, 1), n)
	}
}

// step counts the next bucket's c values and reports whether a quantile
// falls in it: then take must be given the bucket's midpoint.
func (w *rankWalk) step(c uint64) bool {
	w.seen += c
	return w.next < w.k && w.ranks[w.next] <= w.seen
}

// take sets the quantiles that fall in the bucket just counted, mid being
// its midpoint (Midpoint).
func (w *rankWalk) take(mid float64) {
	for w.next < w.k && w.ranks[w.next] <= w.seen {
		v := mid
		if w.mn <= w.mx {
			switch w.ranks[w.next] {
			case 1:
				v = w.mn
			case w.n:
				v = w.mx
			default:
				v = math.Min(math.Max(mid, w.mn), w.mx)
			}
		}
		w.out[w.next] = v
		w.next++
	}
}

// done reports whether every quantile is taken.
func (w *rankWalk) done() bool { return w.next >= w.k }

// Midpoint estimates a value in b: the geometric midpoint of its real
// bounds, then clamped to the integers the bucket holds.
func Midpoint(b *Bucket) float64 {
	if b.Zero {
		return 0
	}
	lo, hi := float64(b.Low), float64(b.High-1)
	if b.High <= b.Low {
		hi = lo
	}
	v := math.Sqrt(math.Max(lo, 0.5) * math.Max(hi, 0.5))
	v = math.Min(math.Max(v, lo), hi)
	if b.Negative {
		return -v
	}
	return v
}

// DurationHistogram returns the sorted histogram of durations (in ns), as
// the collector builds one from the kernel's buckets: for tests and tools
// that make snapshots from raw durations.
func DurationHistogram(durs []uint64) []Bucket {
	counts := map[int32]uint64{}
	var zero uint64
	for _, d := range durs {
		if d == 0 {
			zero++
			continue
		}
		counts[DurationIndex(d)]++
	}
	var h []Bucket
	if zero > 0 {
		h = append(h, Bucket{Zero: true, Low: 0, High: 1, Count: zero})
	}
	for i, c := range counts {
		h = append(h, DurationBucketAt(i, c))
	}
	SortBuckets(h)
	return h
}
