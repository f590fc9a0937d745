package detector

import (
	"encoding/binary"

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
// it with the first and last bucket's ords. Bucket counts above 2^64-1
// cannot occur (they are uint64 already).
func packHist(dst []byte, h []snapshot.Bucket) (out []byte, first, last int64) {
	if len(h) == 0 {
		return dst, 0, 0
	}
	first = ord(&h[0])
	prev := first
	for i := range h {
		o := ord(&h[i])
		dst = binary.AppendUvarint(dst, uint64(o-prev))
		dst = binary.AppendUvarint(dst, h[i].Count)
		prev = o
	}
	return dst, first, prev
}

// eachBucket calls f with the ord and count of each bucket of a packed
// histogram whose first bucket has ord first.
func eachBucket(p []byte, first int64, f func(o int64, count uint64)) {
	o := first
	for len(p) > 0 {
		d, n := binary.Uvarint(p)
		p = p[n:]
		c, m := binary.Uvarint(p)
		p = p[m:]
		o += int64(d)
		f(o, c)
	}
}

// maxDense bounds the ord span merged in a dense array; wider histograms
// (a metric with both negative and positive values) merge pairwise.
const maxDense = 1 << 14

// A merger merges the packed histograms of a series' windows. It reuses
// its buffers from one series to the next: the histogram merge returns is
// valid until the next call.
type merger struct {
	dense []uint64
	out   []snapshot.Bucket
	// bounds caches each bucket's [Low, High) by ord: computing them takes
	// big-number arithmetic.
	bounds [2]map[int64][2]uint64 // 0: durations, 1: metric values
}

// merge returns the sorted histogram of the windows' packed histograms,
// [lo, hi] being the smallest first and largest last ord among them.
func (m *merger) merge(wins []*seriesWin, lo, hi int64, metric bool) []snapshot.Bucket {
	m.out = m.out[:0]
	if hi-lo >= maxDense {
		var h []snapshot.Bucket
		for _, w := range wins {
			var one []snapshot.Bucket
			eachBucket(w.hist, w.histFirst, func(o int64, c uint64) { one = append(one, m.bucket(o, c, metric)) })
			h = snapshot.MergeHistogram(h, one)
		}
		return h
	}
	span := int(hi-lo) + 1
	if cap(m.dense) < span {
		m.dense = make([]uint64, span)
	}
	d := m.dense[:span]
	for _, w := range wins {
		eachBucket(w.hist, w.histFirst, func(o int64, c uint64) { d[o-lo] += c })
	}
	for i, c := range d {
		if c != 0 {
			m.out = append(m.out, m.bucket(lo+int64(i), c, metric))
			d[i] = 0
		}
	}
	return m.out
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
