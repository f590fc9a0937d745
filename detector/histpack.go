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

// packHist appends the packed form of a sorted histogram to dst, returning
// it with the first and last bucket's ords (snapshot.Bucket.Ord); ok is
// false when h is not sorted (or repeats a bucket), and nothing useful was
// packed.
func packHist(dst []byte, h []snapshot.Bucket) (out []byte, first, last int32, ok bool) {
	if len(h) == 0 {
		return dst, 0, 0, true
	}
	f := h[0].Ord()
	prev := f
	for i := range h {
		o := h[i].Ord()
		if i > 0 && o <= prev {
			return dst, 0, 0, false
		}
		dst = binary.AppendUvarint(dst, uint64(o-prev))
		dst = binary.AppendUvarint(dst, h[i].Count)
		prev = o
	}
	return dst, int32(f), int32(prev), true
}

// addPacked adds a window's packed histogram to a, which merges it with
// the other windows' and takes the quantiles (snapshot.Accumulator).
func addPacked(a *snapshot.Accumulator, w *seriesWin) {
	p, o := w.hist, int64(w.histFirst)
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
		a.AddBucket(o, c)
	}
}
