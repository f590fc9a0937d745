package snapshot

import (
	"math"
	"math/big"
	"math/rand"
	"sort"
	"strings"
	"testing"
)

// bigBound returns S * 2^(i/64) with 300 bits of precision, computed
// independently of the package's tables (from 2^(1/64) by exponentiation
// instead of a running product).
func bigBound(factor uint64, i int32) *big.Float {
	const prec = 300
	root := new(big.Float).SetPrec(prec).SetInt64(2)
	for k := 0; k < HistSchema; k++ {
		root.Sqrt(root)
	}
	q := floorDiv(i, HistPerOctave)
	r := i - q*HistPerOctave
	f := new(big.Float).SetPrec(prec).SetInt64(1)
	for k := int32(0); k < r; k++ {
		f.Mul(f, root)
	}
	f.SetMantExp(f, int(q))
	return f.Mul(f, new(big.Float).SetPrec(prec).SetUint64(factor))
}

// TestIndexIsPrometheusSchema6 checks the integer index against the
// definition of a schema-6 bucket, S*2^((i-1)/64) < v <= S*2^(i/64), computed
// with 300-bit floats, for values around every bound from 1 ns to 10^4 s and
// random values up to 2^63 for metrics.
func TestIndexIsPrometheusSchema6(t *testing.T) {
	check := func(name string, factor uint64, index func(uint64) int32, v uint64) {
		t.Helper()
		i := index(v)
		bv := new(big.Float).SetPrec(300).SetUint64(v)
		if bv.Cmp(bigBound(factor, i)) > 0 || bv.Cmp(bigBound(factor, i-1)) <= 0 {
			t.Fatalf("%s(%d) = %d, but bucket %d is (%s, %s]", name, v, i, i, bigBound(factor, i-1).Text('g', 25), bigBound(factor, i).Text('g', 25))
		}
	}
	// Every integer on either side of every bound, 1 ns to ~1.1e13 ns.
	for i := DurationIndex(1); i <= DurationIndex(1e13); i++ {
		b, _ := bigBound(1e9, i).Uint64()
		for _, v := range []uint64{b - 1, b, b + 1} {
			if v >= 1 {
				check("DurationIndex", 1e9, DurationIndex, v)
			}
		}
	}
	for i := int32(0); i <= 62*HistPerOctave; i++ {
		b, _ := bigBound(1, i).Uint64()
		for _, v := range []uint64{b - 1, b, b + 1} {
			if v >= 1 && v <= 1<<62 {
				check("ValueIndex", 1, ValueIndex, v)
			}
		}
	}
	rng := rand.New(rand.NewSource(1))
	for n := 0; n < 20000; n++ {
		v := rng.Uint64() >> uint(rng.Intn(64))
		if v == 0 {
			continue
		}
		if v <= 1<<62 {
			check("DurationIndex", 1e9, DurationIndex, v)
			check("ValueIndex", 1, ValueIndex, v)
		} else if DurationIndex(v) != DurationIndex(1<<62) || ValueIndex(v) != ValueIndex(1<<62) {
			t.Fatalf("%d above 2^62 is not in 2^62's bucket", v)
		}
	}
	if got := DurationIndex(1e9); got != 0 {
		t.Errorf("DurationIndex(1s) = %d, want 0 (bucket (2^(-1/64), 1] s)", got)
	}
	if got := DurationIndex(2e9); got != 64 {
		t.Errorf("DurationIndex(2s) = %d, want 64", got)
	}
	if got := ValueIndex(1); got != 0 {
		t.Errorf("ValueIndex(1) = %d, want 0", got)
	}
	if got := ValueIndex(1024); got != 640 {
		t.Errorf("ValueIndex(1024) = %d, want 640", got)
	}
}

// TestBoundsTile checks that the integer bounds of consecutive buckets
// tile the integers: each bucket starts where the previous one ends, and
// the index of a bucket's first and last integer is the bucket.
func TestBoundsTile(t *testing.T) {
	for _, sc := range []struct {
		name   string
		index  func(uint64) int32
		bounds func(int32) (uint64, uint64)
		first  int32
		last   int32
	}{
		{"duration", DurationIndex, DurationBounds, DurationIndex(1), DurationIndex(1 << 62)},
		{"value", ValueIndex, ValueBounds, 0, 60 * HistPerOctave},
	} {
		var prevHigh uint64
		for i := sc.first; i <= sc.last; i++ {
			lo, hi := sc.bounds(i)
			if i > sc.first && lo != prevHigh {
				t.Fatalf("%s bucket %d starts at %d, previous ended at %d", sc.name, i, lo, prevHigh)
			}
			prevHigh = hi
			if lo == hi {
				continue // narrower than one integer
			}
			if got := sc.index(lo); got != i {
				t.Fatalf("%s index(%d) = %d, want %d", sc.name, lo, got, i)
			}
			if got := sc.index(hi - 1); got != i {
				t.Fatalf("%s index(%d) = %d, want %d", sc.name, hi-1, got, i)
			}
		}
	}
}

// TestQuantilePrecision checks the promise made to rules: every quantile
// within 1% of the exact nearest-rank quantile of the window (in fact
// within 0.55%), and never outside the window's [min, max].
func TestQuantilePrecision(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for _, tc := range []struct {
		name string
		gen  func() uint64
	}{
		{"constant-1us", func() uint64 { return 1000 }},
		{"constant-100s", func() uint64 { return 100e9 }},
		{"uniform-1us-1ms", func() uint64 { return 1000 + uint64(rng.Int63n(999_000)) }},
		{"lognormal", func() uint64 { return uint64(math.Exp(rng.NormFloat64()*2+13)) + 1000 }},
		{"bimodal", func() uint64 {
			if rng.Intn(100) < 97 {
				return 2e6 + uint64(rng.Int63n(1e6))
			}
			return 250e6 + uint64(rng.Int63n(50e6))
		}},
		{"narrow-just-under-bound", func() uint64 { return 180_700_000 + uint64(rng.Int63n(1000)) }},
		{"few", func() uint64 { return 1e6 * uint64(1+rng.Intn(3)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range []int{1, 2, 3, 10, 101, 20000} {
				vals := make([]uint64, n)
				var h []Bucket
				for i := range vals {
					vals[i] = tc.gen()
					h = MergeHistogram(h, []Bucket{DurationBucket(vals[i], 1)})
				}
				sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
				lo, hi := float64(vals[0]), float64(vals[n-1])
				for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999, 1} {
					exact := float64(vals[int(math.Ceil(q*float64(n)-1e-9))-1])
					got := Quantile(h, q, lo, hi)
					if got < lo || got > hi {
						t.Fatalf("n=%d q%.3f = %.0f outside the window's [%.0f, %.0f]", n, q, got, lo, hi)
					}
					if rel := math.Abs(got-exact) / exact; rel > 0.0055 {
						t.Errorf("n=%d q%.3f = %.0f, exact %.0f: relative error %.4f > 0.0055", n, q, got, exact, rel)
					}
				}
			}
		})
	}
}

func TestQuantileEmpty(t *testing.T) {
	if got := Quantile(nil, 0.99, 0, 0); got != 0 {
		t.Fatalf("Quantile(empty) = %v, want 0", got)
	}
}

func TestMergeHistogram(t *testing.T) {
	a := []Bucket{ValueBucketAt(3, true, 1), {Zero: true, High: 1, Count: 2}, ValueBucketAt(5, false, 1), ValueBucketAt(9, false, 4)}
	b := []Bucket{ValueBucketAt(7, true, 1), ValueBucketAt(3, true, 2), ValueBucketAt(5, false, 10), ValueBucketAt(6, false, 1)}
	got := MergeHistogram(a, b)
	var s []string
	for _, x := range got {
		switch {
		case x.Zero:
			s = append(s, "z:"+itoa(x.Count))
		case x.Negative:
			s = append(s, "-"+itoa(uint64(x.Index))+":"+itoa(x.Count))
		default:
			s = append(s, "+"+itoa(uint64(x.Index))+":"+itoa(x.Count))
		}
	}
	if want := "-7:1 -3:3 z:2 +5:11 +6:1 +9:4"; strings.Join(s, " ") != want {
		t.Fatalf("merged %s, want %s", strings.Join(s, " "), want)
	}
	// The same buckets sorted by SortBuckets from any order.
	shuffled := append([]Bucket(nil), got...)
	rand.New(rand.NewSource(3)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	SortBuckets(shuffled)
	for i := range got {
		if got[i] != shuffled[i] {
			t.Fatalf("SortBuckets: %v, want %v", shuffled, got)
		}
	}
}

func itoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

// TestCells checks the shortcut the BPF programs take into the table: for
// every value of an octave around each cell's edges and bucket bounds,
// cell[j] or cell[j]+1 (decided by one comparison) is the bucket the
// binary search finds, and no cell holds two bounds.
func TestCells(t *testing.T) {
	for _, sc := range []struct {
		name string
		s    *scale
	}{{"duration", durationScale}, {"value", valueScale}} {
		cell, shift := sc.s.cells()
		f := sc.s.table
		search := func(l uint64) int {
			r := 1
			for l > f[r] {
				r++
			}
			return r
		}
		via := func(l uint64) int {
			c := int(cell[(l-f[0])>>shift])
			if l > f[c] {
				c++
			}
			return c
		}
		var ls []uint64
		for j := 0; uint64(j)<<shift <= f[HistPerOctave]-f[0]; j++ {
			base := f[0] + uint64(j)<<shift
			ls = append(ls, base, base+1, base+1<<shift-1)
		}
		for r := 0; r <= HistPerOctave; r++ {
			ls = append(ls, f[r]-1, f[r], f[r]+1)
		}
		for _, l := range ls {
			if l <= f[0] || l > f[HistPerOctave] {
				continue
			}
			if got, want := via(l), search(l); got != want {
				t.Fatalf("%s: L=%d: cell gives bucket %d, search %d", sc.name, l, got, want)
			}
		}
		if (f[HistPerOctave]-f[0])>>shift >= uint64(len(cell)) {
			t.Fatalf("%s: %d cells needed, table has %d", sc.name, (f[HistPerOctave]-f[0])>>shift+1, len(cell))
		}
	}
}
