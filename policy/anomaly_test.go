package policy

import (
	"math"
	"math/rand"
	"testing"
)

// feed observes values and returns the indexes at which the rule fired.
func feed(a *Anomaly, b *Baseline, vals []float64) []int {
	var fired []int
	for i, v := range vals {
		if _, f := a.Observe(b, v); f {
			fired = append(fired, i)
		}
	}
	return fired
}

func noisy(rng *rand.Rand, n int, mean, sd float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = mean + rng.NormFloat64()*sd
	}
	return out
}

func TestAnomalyWarmup(t *testing.T) {
	a := &Anomaly{Metric: MetricP99, Sensitivity: 3, Warmup: 5, Alpha: 0.1, Direction: DirectionUp}
	var b Baseline
	// A wild series during warm-up never fires, however far it jumps.
	if fired := feed(a, &b, []float64{1, 1000, 1, 1000, 1}); len(fired) != 0 {
		t.Errorf("fired during warm-up at %v", fired)
	}
	if b.N != 5 {
		t.Errorf("N = %d, want 5", b.N)
	}
}

func TestAnomalySpike(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	a := &Anomaly{Metric: MetricP99, Sensitivity: 3, Warmup: 10, Alpha: 0.1, Direction: DirectionUp}
	var b Baseline
	base := noisy(rng, 100, 100e6, 5e6) // p99 around 100ms ± 5ms
	if fired := feed(a, &b, base); len(fired) > 1 {
		t.Errorf("steady noise fired %d times: %v", len(fired), fired)
	}
	if math.Abs(b.Mean-100e6) > 5e6 {
		t.Errorf("baseline mean %v, want about 100ms", b.Mean)
	}
	meanBefore := b.Mean
	// A 3x spike fires at once ...
	if _, f := a.Observe(&b, 300e6); !f {
		t.Error("a 3x spike did not fire")
	}
	// ... but moves the baseline only a little (clamped influence).
	if moved := b.Mean - meanBefore; moved > 0.1*3*b.Scale()+1 || moved <= 0 {
		t.Errorf("one outlier moved the mean by %v (scale %v)", moved, b.Scale())
	}
	// A drop does not fire a rule watching for rises.
	if _, f := a.Observe(&b, 10e6); f {
		t.Error("a drop fired an up rule")
	}
}

func TestAnomalyDirections(t *testing.T) {
	for _, tc := range []struct {
		dir      Direction
		up, down bool
	}{
		{DirectionUp, true, false},
		{DirectionDown, false, true},
		{DirectionBoth, true, true},
	} {
		a := &Anomaly{Metric: MetricRate, Sensitivity: 3, Warmup: 3, Alpha: 0.2, Direction: tc.dir}
		var b Baseline
		feed(a, &b, []float64{100, 102, 98, 101, 99, 100})
		cp := b
		if _, f := a.Observe(&cp, 200); f != tc.up {
			t.Errorf("%s: rise fired=%v, want %v", tc.dir, f, tc.up)
		}
		cp = b
		if _, f := a.Observe(&cp, 20); f != tc.down {
			t.Errorf("%s: drop fired=%v, want %v", tc.dir, f, tc.down)
		}
	}
}

// TestAnomalyLevelShift checks the baseline learns a lasting change: the
// alert fires at the shift and stops after a bounded number of windows.
func TestAnomalyLevelShift(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	a := &Anomaly{Metric: MetricP99, Sensitivity: 3, Warmup: 10, Alpha: 0.1, Direction: DirectionUp}
	var b Baseline
	feed(a, &b, noisy(rng, 50, 100e6, 2e6))
	fired := feed(a, &b, noisy(rng, 60, 200e6, 2e6))
	if len(fired) == 0 || fired[0] != 0 {
		t.Fatalf("level shift fired at %v, want from window 0", fired)
	}
	last := fired[len(fired)-1]
	if last > 40 {
		t.Errorf("still firing %d windows after the shift: baseline did not adapt (mean %v)", last, b.Mean)
	}
	if math.Abs(b.Mean-200e6) > 10e6 {
		t.Errorf("mean after shift = %v, want about 200ms", b.Mean)
	}
}

// TestAnomalyFlat checks the relative floor: a perfectly flat series does
// not fire on a 1% wobble, but does on a doubling.
func TestAnomalyFlat(t *testing.T) {
	a := &Anomaly{Metric: MetricCount, Sensitivity: 3, Warmup: 5, Alpha: 0.1, Direction: DirectionBoth}
	var b Baseline
	feed(a, &b, []float64{1000, 1000, 1000, 1000, 1000, 1000})
	cp := b
	if score, f := a.Observe(&cp, 1010); f {
		t.Errorf("1%% wobble fired (score %v)", score)
	}
	cp = b
	if _, f := a.Observe(&cp, 2000); !f {
		t.Error("doubling did not fire")
	}
	// Zero baseline: the absolute floor keeps the score finite.
	var z Baseline
	feed(a, &z, []float64{0, 0, 0, 0, 0, 0})
	score, f := a.Observe(&z, 1)
	if !f || math.IsInf(score, 0) || math.IsNaN(score) {
		t.Errorf("from 0 to 1: score %v fired %v", score, f)
	}
}
