package snapshot

import "math/bits"

// The latency histogram is log-linear, the same in BPF (bpf/aggregate.h) and
// here: durations below 8 ns get one bucket each; above that, every power of
// two is split into HistSub equal sub-buckets. A bucket is at most 1/8 of its
// lower bound wide, so the midpoint estimate a quantile uses is within 6.25%
// of every value in the bucket. The last bucket also holds everything above
// 2^38 ns (about 275 s).
const (
	HistSubBits = 3
	HistSub     = 1 << HistSubBits
	HistMaxExp  = 37
	// HistBuckets is the number of buckets: must match HIST_BUCKETS in
	// bpf/aggregate.h.
	HistBuckets = (HistMaxExp - HistSubBits + 2) * HistSub // 288
)

// BucketIndex returns the bucket a duration of ns nanoseconds falls in.
func BucketIndex(ns uint64) int {
	if ns < HistSub {
		return int(ns)
	}
	e := 63 - bits.LeadingZeros64(ns)
	if e > HistMaxExp {
		return HistBuckets - 1
	}
	return (e-HistSubBits+1)*HistSub + int((ns>>(e-HistSubBits))&(HistSub-1))
}

// BucketBounds returns bucket i's range [low, high).
func BucketBounds(i int) (low, high uint64) {
	if i < HistSub {
		return uint64(i), uint64(i) + 1
	}
	e := i/HistSub + HistSubBits - 1
	sub := uint64(i % HistSub)
	shift := e - HistSubBits
	return (HistSub + sub) << shift, (HistSub + sub + 1) << shift
}

// Quantile estimates the q-quantile (0 < q <= 1) of a histogram given as
// per-bucket counts, using the midpoint of the bucket that holds the rank.
// It returns 0 for an empty histogram, never NaN.
func Quantile(counts []uint64, q float64) uint64 {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total) + 0.5)
	if rank < 1 {
		rank = 1
	}
	if rank > total {
		rank = total
	}
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= rank {
			lo, hi := BucketBounds(i)
			if hi-lo == 1 {
				return lo
			}
			return lo + (hi-lo)/2
		}
	}
	return 0
}

// SparseBuckets returns the non-empty buckets of counts.
func SparseBuckets(counts []uint64) []Bucket {
	var out []Bucket
	for i, c := range counts {
		if c == 0 {
			continue
		}
		lo, hi := BucketBounds(i)
		out = append(out, Bucket{LowNs: lo, HighNs: hi, Count: c})
	}
	return out
}
