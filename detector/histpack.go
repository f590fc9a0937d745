package detector

import (
	"encoding/binary"
	"math/bits"

	"github.com/spanwatch/spanwatch/snapshot"
)

// The detector keeps each series' recent windows for the rules' ranges,
// histograms included. A schema-6 histogram has 64 buckets per power of
// two, so a busy series' window holds a hundred buckets or more: kept as
// snapshot.Buckets (32 bytes each) that is kilobytes per window. Packed,
// a bucket is its position's increase over the previous bucket's and its
// count, two varints: 2-4 bytes.

// An ord orders buckets by the values they hold, as snapshot.SortBuckets
// does: negative buckets (most negative first), the zero bucket, positive
// buckets upwards.
const (
	ordZero    = -(1 << 19)
	ordNegBase = -(1 << 20)
)

func ord(b *snapshot.Bucket) int64 {
	switch {
	case b.Zero:
		return ordZero
	case b.Negative:
		return ordNegBase - int64(b.Index)
	}
	return int64(b.Index)
}

// packHist appends the packed form of a sorted histogram to dst, returning
// it with the first and last bucket's ords; ok is false when h is not
// sorted (or repeats a bucket), and nothing useful was packed.
func packHist(dst []byte, h []snapshot.Bucket) (out []byte, first, last int32, ok bool) {
	if len(h) == 0 {
		return dst, 0, 0, true
	}
	f := ord(&h[0])
	prev := f
	for i := range h {
		o := ord(&h[i])
		if i > 0 && o <= prev {
			return dst, 0, 0, false
		}
		dst = binary.AppendUvarint(dst, uint64(o-prev))
		dst = binary.AppendUvarint(dst, h[i].Count)
		prev = o
	}
	return dst, int32(f), int32(prev), true
}

// maxDense bounds the ord span merged in a dense array; wider histograms
// (a metric with both negative and positive values) merge pairwise.
const maxDense = 1 << 14

// A merger merges the packed histograms of a series' windows, reusing its
// buffers from one series to the next.
type merger struct {
	dense []uint64
	// used has a bit set for each ord of dense with a count, so the walk
	// skips the empty stretches between a distribution's body and tail.
	used []uint64
	// bounds caches each bucket's [Low, High) by ord: computing them takes
	// big-number arithmetic.
	bounds [2]map[int64][2]uint64 // 0: durations, 1: metric values
	// mids caches each bucket's midpoint, the estimate of a value in it.
	mids [2]map[int64]float64
}

// midpoint is snapshot.Midpoint of the bucket of ord o: the estimate of a
// value in it, before clamping to the extremes.
func (m *merger) midpoint(o int64, metric bool) float64 {
	k := 0
	if metric {
		k = 1
	}
	if v, ok := m.mids[k][o]; ok {
		return v
	}
	if m.mids[k] == nil {
		m.mids[k] = map[int64]float64{}
	}
	b := m.bucket(o, 1, metric)
	v := snapshot.Midpoint(&b)
	m.mids[k][o] = v
	return v
}

// quantiles returns the qs-quantiles (ascending) of the windows' merged
// histograms, exactly as snapshot.Quantile over the merged histogram
// would: [lo, hi] is the span of the windows' ords, [mn, mx] the exact
// extremes. It walks the merged counts once instead of building the
// merged histogram.
func (m *merger) quantiles(wins []*seriesWin, lo, hi int64, mn, mx float64, metric bool, qs *[3]float64) (out [3]float64) {
	if hi-lo >= maxDense {
		var h []snapshot.Bucket
		for _, w := range wins {
			var one []snapshot.Bucket
			p, o := w.hist, int64(w.histFirst)
			for len(p) > 0 {
				d, k := binary.Uvarint(p)
				c, j := binary.Uvarint(p[k:])
				p = p[k+j:]
				o += int64(d)
				one = append(one, m.bucket(o, c, metric))
			}
			h = snapshot.MergeHistogram(h, one)
		}
		for i, q := range qs {
			out[i] = snapshot.Quantile(h, q, mn, mx)
		}
		return out
	}
	var n uint64
	span := int(hi-lo) + 1
	if cap(m.dense) < span {
		m.dense = make([]uint64, span)
		m.used = make([]uint64, (span+63)/64)
	}
	d := m.dense[:span]
	used := m.used[:(span+63)/64]
	for _, w := range wins {
		p, o := w.hist, int64(w.histFirst)-lo
		for i := 0; i < len(p); {
			// Both varints are one byte almost always: the next bucket is
			// near, the count small.
			var delta, c uint64
			if b := p[i]; b < 0x80 {
				delta = uint64(b)
				i++
			} else {
				v, k := binary.Uvarint(p[i:])
				delta = v
				i += k
			}
			if b := p[i]; b < 0x80 {
				c = uint64(b)
				i++
			} else {
				v, k := binary.Uvarint(p[i:])
				c = v
				i += k
			}
			o += int64(delta)
			d[o] += c
			used[o>>6] |= 1 << (o & 63)
			n += c
		}
	}
	if n == 0 {
		return out
	}
	var ranks [3]uint64
	for i, q := range qs {
		ranks[i] = snapshot.QuantileRank(q, n)
	}
	var seen uint64
	next := 0
	for wi, word := range used {
		for word != 0 && next < len(qs) {
			i := wi<<6 + bits.TrailingZeros64(word)
			word &= word - 1
			seen += d[i]
			for next < len(qs) && ranks[next] <= seen {
				out[next] = snapshot.RankValue(ranks[next], n, m.midpoint(lo+int64(i), metric), mn, mx)
				next++
			}
		}
	}
	clear(d)
	clear(used)
	return out
}

// bucket rebuilds the bucket of an ord.
func (m *merger) bucket(o int64, count uint64, metric bool) snapshot.Bucket {
	if o == ordZero {
		return snapshot.Bucket{Zero: true, Low: 0, High: 1, Count: count}
	}
	k := 0
	if metric {
		k = 1
	}
	if m.bounds[k] == nil {
		m.bounds[k] = map[int64][2]uint64{}
	}
	b, ok := m.bounds[k][o]
	neg := o < ordZero
	idx := int32(o)
	if neg {
		idx = int32(ordNegBase - o)
	}
	if !ok {
		if metric {
			b[0], b[1] = snapshot.ValueBounds(idx)
		} else {
			b[0], b[1] = snapshot.DurationBounds(idx)
		}
		m.bounds[k][o] = b
	}
	return snapshot.Bucket{Index: idx, Negative: neg, Low: b[0], High: b[1], Count: count}
}
