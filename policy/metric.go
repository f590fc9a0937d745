package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spanwatch/spanwatch/internal/duration"
	"github.com/spanwatch/spanwatch/snapshot"
)

// A Metric is one per-series figure a rule can test.
type Metric string

const (
	MetricCount      Metric = "count"       // spans that ended in the window
	MetricRate       Metric = "rate"        // spans per second
	MetricErrors     Metric = "errors"      // spans that ended with an error
	MetricErrorRatio Metric = "error_ratio" // errors / count, 0 when count is 0
	MetricP50        Metric = "p50"         // latency quantiles over the window
	MetricP90        Metric = "p90"
	MetricP99        Metric = "p99"
	MetricMax        Metric = "max"         // the histogram's largest value in the window
	MetricMean       Metric = "mean"        // sum / count
	MetricOverBudget Metric = "over_budget" // spans slower than their budget
)

// Metrics lists every metric, in the order the documentation gives them.
var Metrics = []Metric{MetricCount, MetricRate, MetricErrors, MetricErrorRatio, MetricP50, MetricP90, MetricP99, MetricMax, MetricMean, MetricOverBudget}

// unit is what kind of quantity a metric is, which decides the units its
// thresholds accept and how its value is rendered.
type unit int

const (
	unitCount unit = iota
	unitRate
	unitRatio
	unitDuration
)

func (m Metric) unit() unit {
	switch m {
	case MetricRate:
		return unitRate
	case MetricErrorRatio:
		return unitRatio
	case MetricP50, MetricP90, MetricP99, MetricMax, MetricMean:
		return unitDuration
	default:
		return unitCount
	}
}

func (m Metric) valid() bool {
	for _, x := range Metrics {
		if m == x {
			return true
		}
	}
	return false
}

// IsLatency reports whether the metric is a duration computed from the
// window's spans, meaningless (and 0) when the window is empty.
func (m Metric) IsLatency() bool { return m.unit() == unitDuration }

// Value returns the metric's value for a series: durations in nanoseconds,
// rates per second, ratios in [0, 1]; for an argument metric (series of
// kind "metric"), values in their own unit (valueOf). It is never NaN: an
// empty window gives 0 for every metric.
func (m Metric) Value(s *snapshot.Series) float64 {
	if s.IsMetric() {
		return valueOf(m, s)
	}
	return m.spanValue(s)
}

func (m Metric) spanValue(s *snapshot.Series) float64 {
	switch m {
	case MetricCount:
		return float64(s.Count)
	case MetricRate:
		return finite(s.Rate)
	case MetricErrors:
		return float64(s.Errors)
	case MetricErrorRatio:
		if s.Count == 0 {
			return 0
		}
		return finite(s.ErrorRatio)
	case MetricP50:
		return float64(s.P50Ns)
	case MetricP90:
		return float64(s.P90Ns)
	case MetricP99:
		return float64(s.P99Ns)
	case MetricMax:
		if s.Count == 0 {
			return 0
		}
		return float64(s.MaxNs)
	case MetricMean:
		if s.Count == 0 {
			return 0
		}
		return float64(s.SumNs) / float64(s.Count)
	case MetricOverBudget:
		return float64(s.OverBudget)
	}
	return 0
}

func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// Format renders a value of this metric for people: "212ms", "12.5/s",
// "5.2%", "17".
func (m Metric) Format(v float64) string {
	switch m.unit() {
	case unitDuration:
		return formatDuration(v)
	case unitRate:
		return strconv.FormatFloat(round(v, 3), 'f', -1, 64) + "/s"
	case unitRatio:
		return strconv.FormatFloat(round(v*100, 3), 'f', -1, 64) + "%"
	default:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// formatDuration renders nanoseconds with three significant decimals in the
// largest unit that keeps the number at least 1, the way people write
// thresholds: 212ms, 1.5s, 850µs.
func formatDuration(ns float64) string {
	switch a := math.Abs(ns); {
	case a == 0:
		return "0s"
	case a < 1e3:
		return strconv.FormatFloat(round(ns, 3), 'f', -1, 64) + "ns"
	case a < 1e6:
		return strconv.FormatFloat(round(ns/1e3, 3), 'f', -1, 64) + "µs"
	case a < 1e9:
		return strconv.FormatFloat(round(ns/1e6, 3), 'f', -1, 64) + "ms"
	default:
		return strconv.FormatFloat(round(ns/1e9, 3), 'f', -1, 64) + "s"
	}
}

// parseThreshold parses a threshold for metric m: a duration for latency
// metrics ("200ms", "1.5s"), a rate for rate ("100/s", "6000/m", or a plain
// number per second), a ratio for error_ratio ("5%" or "0.05"), a plain
// number otherwise. The result is in the metric's base unit.
func parseThreshold(m Metric, s string) (float64, error) {
	switch m.unit() {
	case unitDuration:
		if s == "0" {
			return 0, nil
		}
		if _, err := strconv.ParseFloat(s, 64); err == nil {
			return 0, fmt.Errorf("%s is a duration: %q needs a unit (%s), e.g. %sms", m, s, duration.Units, s)
		}
		d, err := parseDuration(s)
		if err != nil {
			return 0, err
		}
		return float64(d), nil
	case unitRate:
		num, per, hasPer := strings.Cut(s, "/")
		f, err := parseNumber(strings.TrimSpace(num))
		if err != nil {
			return 0, fmt.Errorf("rate %q: want a number of spans per second or minute, e.g. 100/s or 6000/m", s)
		}
		if hasPer {
			switch strings.TrimSpace(per) {
			case "s":
			case "m":
				f /= 60
			case "h":
				f /= 3600
			default:
				return 0, fmt.Errorf("rate %q: unit must be /s, /m or /h", s)
			}
		}
		return f, nil
	case unitRatio:
		if p, ok := strings.CutSuffix(s, "%"); ok {
			f, err := parseNumber(strings.TrimSpace(p))
			if err != nil {
				return 0, fmt.Errorf("percentage %q: want a number followed by %%, e.g. 5%%", s)
			}
			return f / 100, nil
		}
		f, err := parseNumber(s)
		if err != nil {
			return 0, fmt.Errorf("ratio %q: want a fraction (0.05) or a percentage (5%%)", s)
		}
		if f > 1 {
			return 0, fmt.Errorf("ratio %q is above 1: write a percentage as %s%%", s, s)
		}
		return f, nil
	default:
		f, err := parseNumber(s)
		if err != nil {
			return 0, fmt.Errorf("%s is a plain number, not %q", m, s)
		}
		return f, nil
	}
}

func parseNumber(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("not a number: %q", s)
	}
	if f < 0 {
		return 0, fmt.Errorf("negative number: %q", s)
	}
	return f, nil
}

// parseDuration reads spanwatch's one duration syntax (internal/duration:
// Go's units plus d, w, y; never negative), with a message that names the
// accepted units.
func parseDuration(s string) (time.Duration, error) {
	d, err := duration.Parse(s)
	if err != nil {
		switch {
		case s == "":
			return 0, fmt.Errorf("empty duration")
		case strings.HasPrefix(s, "-"):
			return 0, fmt.Errorf("negative duration %q", s)
		}
		return 0, fmt.Errorf("bad duration %q: want a number with a unit (%s), e.g. 250ms, 1m30s or 1d", s, duration.Units)
	}
	return d, nil
}
