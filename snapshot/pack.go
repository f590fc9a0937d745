package snapshot

import "encoding/binary"

// A schema-6 histogram has 64 buckets per power of two, so a busy
// series' window holds a hundred buckets or more: kept as Buckets (32
// bytes each) that is kilobytes per window. Packed, as the detector keeps
// the windows of its ranges, a bucket is its ord's increase over the
// previous bucket's and its count, two varints: 2-4 bytes.

// PackHistogram appends the packed form of a sorted histogram to dst,
// returning it with the first and last bucket's ords (Bucket.Ord); ok is
// false when h is not sorted (or repeats a bucket), and nothing useful was
// packed.
func PackHistogram(dst []byte, h []Bucket) (out []byte, first, last int32, ok bool) {
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

// AddPacked adds a packed histogram (PackHistogram) whose first bucket's
// ord is first. It is AddBucket for each of its buckets, without a call
// per bucket: the detector's ranges merge every window of every series
// this way.
func (a *Accumulator) AddPacked(p []byte, first int32) {
	if len(p) == 0 {
		return
	}
	a.hist = true
	dense, used := a.dense, a.used
	o := int64(first)
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
		a.n += c
		if j := uint64(o - a.lo); j < uint64(len(dense)) {
			dense[j] += c
			used[j>>6] |= 1 << (j & 63)
			continue
		}
		a.addSparse(o, c)
		dense, used = a.dense, a.used
	}
}
