package snapshot

import (
	"math"
	"time"
)

// Quantiles are the quantiles a series carries, in the order of its
// fields: P50, P90, P99 (P50Ns, P90Ns, P99Ns for a span).
var Quantiles = [3]float64{0.50, 0.90, 0.99}

// HistogramQuantiles returns the Quantiles of the values h holds, clamped
// to the exact extremes [min, max] (Quantile; min > max: not clamped).
func HistogramQuantiles(h []Bucket, min, max float64) [3]float64 {
	return walkQuantiles(h, Quantiles[:], min, max)
}

// SetQuantiles sets s's quantile fields to q (in the order of Quantiles):
// P50, P90 and P99 for an argument metric, P50Ns, P90Ns and P99Ns rounded
// to the nanosecond for a span. Every series, a window's or a range's,
// gets its quantiles here.
func (s *Series) SetQuantiles(q [3]float64) {
	if s.IsMetric() {
		s.P50, s.P90, s.P99 = q[0], q[1], q[2]
		return
	}
	s.P50Ns, s.P90Ns, s.P99Ns = uint64(math.Round(q[0])), uint64(math.Round(q[1])), uint64(math.Round(q[2]))
}

// SetHistogramQuantiles sets s's quantiles from its own histogram,
// clamped to its exact extremes (MinNs and MaxNs for a span, Min and Max
// for an argument metric): what a window's series holds.
func (s *Series) SetHistogramQuantiles() {
	if s.IsMetric() {
		s.SetQuantiles(HistogramQuantiles(s.Histogram, float64(s.Min), float64(s.Max)))
		return
	}
	s.SetQuantiles(HistogramQuantiles(s.Histogram, float64(s.MinNs), float64(s.MaxNs)))
}

// SetRates sets s.Rate, its count per second over covered (the time its
// windows cover), and s.ErrorRatio, its errors over its count; each is 0
// where there is nothing to divide by.
func (s *Series) SetRates(covered time.Duration) {
	s.Rate, s.ErrorRatio = 0, 0
	if s.Count == 0 {
		return
	}
	if covered > 0 {
		s.Rate = float64(s.Count) / covered.Seconds()
	}
	s.ErrorRatio = float64(s.Errors) / float64(s.Count)
}
