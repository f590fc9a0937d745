package snapshot

import (
	"math"
	"math/rand"
	"sort"
	"testing"
)

func TestBucketIndexBounds(t *testing.T) {
	for i := 0; i < HistBuckets; i++ {
		lo, hi := BucketBounds(i)
		if lo >= hi {
			t.Fatalf("bucket %d: [%d, %d) is empty", i, lo, hi)
		}
		if got := BucketIndex(lo); got != i {
			t.Fatalf("BucketIndex(%d) = %d, want %d", lo, got, i)
		}
		if i < HistBuckets-1 {
			if got := BucketIndex(hi - 1); got != i {
				t.Fatalf("BucketIndex(%d) = %d, want %d", hi-1, got, i)
			}
			if nlo, _ := BucketBounds(i + 1); nlo != hi {
				t.Fatalf("bucket %d ends at %d but bucket %d starts at %d", i, hi, i+1, nlo)
			}
		}
	}
	if got := BucketIndex(math.MaxUint64); got != HistBuckets-1 {
		t.Fatalf("BucketIndex(max) = %d", got)
	}
}

// TestQuantileError checks the histogram's stated precision: every quantile
// estimate from 1 µs to 100 s is within 10% (in fact 6.25%) of the exact one.
func TestQuantileError(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			counts := make([]uint64, HistBuckets)
			vals := make([]uint64, 20000)
			for i := range vals {
				v := tc.gen()
				if v > 100e9 {
					v = 100e9
				}
				vals[i] = v
				counts[BucketIndex(v)]++
			}
			sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
			for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
				exact := vals[int(math.Ceil(q*float64(len(vals))))-1]
				got := Quantile(counts, q)
				rel := math.Abs(float64(got)-float64(exact)) / float64(exact)
				if rel > 0.0625 {
					t.Errorf("q%.3f = %d, exact %d: relative error %.3f > 0.0625", q, got, exact, rel)
				}
			}
		})
	}
}

func TestQuantileEmpty(t *testing.T) {
	if got := Quantile(make([]uint64, HistBuckets), 0.99); got != 0 {
		t.Fatalf("Quantile(empty) = %d, want 0", got)
	}
}
