package metrics

import (
	"math"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// A classic bucket's upper bound (le) is always a bucket boundary of
// spanwatch's histogram, Prometheus' native schema 6: 2^(i/64) seconds for
// an integer i. SnapBound turns any duration into the nearest such bound,
// nearest in ratio (the one whose index is 64*log2(d/1s) rounded to the
// nearest integer), so a configured bound moves by at most 0.55%: 1ms
// becomes 2^(-638/64) s = 0.99795ms, 250ms becomes 2^(-128/64) s = 250ms
// exactly, 1s stays 1s. Then every classic bucket is a union of whole
// native buckets, and its count is exact.

// SnapBound returns the schema-6 bucket index whose upper bound is nearest
// to d, and that bound in seconds.
func SnapBound(d time.Duration) (index int32, le float64) {
	i := int32(math.Round(64 * math.Log2(d.Seconds())))
	return i, boundSeconds(i)
}

// boundSeconds is the upper bound of schema-6 bucket i, 2^(i/64) seconds.
func boundSeconds(i int32) float64 {
	if i%snapshot.HistPerOctave == 0 {
		return math.Ldexp(1, int(i/snapshot.HistPerOctave)) // exact
	}
	return math.Exp2(float64(i) / snapshot.HistPerOctave)
}

// classicBounds is a sorted, de-duplicated list of classic bucket bounds:
// native bucket indexes and their le in seconds.
type classicBounds struct {
	index []int32
	le    []float64
}

func snapBounds(ds []time.Duration) classicBounds {
	var b classicBounds
	for _, d := range ds {
		i, le := SnapBound(d)
		if n := len(b.index); n > 0 && b.index[n-1] >= i {
			continue // two bounds snapped to one; the caller sorted them
		}
		b.index = append(b.index, i)
		b.le = append(b.le, le)
	}
	return b
}
