package policy

import "math"

// Defaults of an anomaly rule.
const (
	DefaultWarmup = 10  // windows observed before the rule may fire
	DefaultAlpha  = 0.1 // weight of the newest window: about a 10-window memory
)

// Direction says which departures from the baseline count.
type Direction string

const (
	DirectionUp   Direction = "up" // only higher than usual (slower, more errors)
	DirectionDown Direction = "down"
	DirectionBoth Direction = "both"
)

// An Anomaly rule compares a series' metric with the series' own baseline.
type Anomaly struct {
	Metric Metric
	// Sensitivity is how many deviations from the baseline fire the rule.
	Sensitivity float64
	// Warmup is how many windows the baseline learns before the rule may
	// fire.
	Warmup int
	// Alpha is the weight of the newest window in the moving averages.
	Alpha     float64
	Direction Direction
	// MinCount skips windows with fewer spans: they neither update the
	// baseline nor fire. It defaults to 1 for latency metrics, whose value
	// over an empty window means nothing.
	MinCount uint64
}

// A Baseline is one series' learned normal: an exponentially weighted mean
// of the metric and of its absolute deviation from that mean. The detector
// keeps baselines (keyed by rule name and series labels) so they survive
// rule reloads.
type Baseline struct {
	Mean float64
	Dev  float64
	N    int // windows observed
}

// Floors of the deviation used as the scale: without them a perfectly flat
// series (deviation 0) would flag the first tiny wobble.
const (
	relFloor = 0.05 // 5% of the mean
	absFloor = 1e-9
	// clampK bounds how far one window can move the baseline, in
	// deviations: an outlier pulls the mean by at most alpha*clampK
	// deviations, yet a lasting shift is learned within a few windows
	// because the deviation grows with it.
	clampK = 3.0
)

// Scale is the deviation the score divides by.
func (b *Baseline) Scale() float64 {
	return math.Max(b.Dev, math.Max(relFloor*math.Abs(b.Mean), absFloor))
}

// Observe scores x against the baseline, then learns from it. It reports
// the score (signed deviations from the mean, before learning) and whether
// the rule fires: only after the warm-up, and only in the rule's direction.
func (a *Anomaly) Observe(b *Baseline, x float64) (score float64, fire bool) {
	if b.N == 0 {
		b.Mean, b.Dev, b.N = x, 0, 1
		return 0, false
	}
	scale := b.Scale()
	r := x - b.Mean
	score = r / scale
	if b.N >= a.Warmup {
		switch a.Direction {
		case DirectionDown:
			fire = score < -a.Sensitivity
		case DirectionBoth:
			fire = math.Abs(score) > a.Sensitivity
		default:
			fire = score > a.Sensitivity
		}
	}
	alpha := a.Alpha
	if w := 1 / float64(b.N+1); w > alpha {
		// Early on, a plain running average: the first window alone is no
		// baseline.
		alpha = w
	}
	if b.N >= a.Warmup {
		// Once warm, an outlier's influence is clamped (a Huber-style
		// robust update).
		lim := clampK * scale
		r = math.Max(-lim, math.Min(lim, r))
	}
	b.Mean += alpha * r
	b.Dev += alpha * (math.Abs(r) - b.Dev)
	b.N++
	return score, fire
}
