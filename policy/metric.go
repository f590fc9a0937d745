package policy

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

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

// example is a threshold of the metric's kind, for error messages.
func (m Metric) example() string {
	switch m.unit() {
	case unitDuration:
		return "200ms"
	case unitRate:
		return "100/s"
	case unitRatio:
		return "5%"
	default:
		return "100"
	}
}

// kindOf names what a threshold looks like ("a duration", "a rate", ...),
// for telling a user which kind they wrote where another was wanted.
func kindOf(s string) string {
	switch {
	case strings.HasSuffix(s, "%"):
		return "a percentage"
	case strings.Contains(s, "/"):
		return "a rate"
	case len(s) > 0 && (s[0] >= '0' && s[0] <= '9' || s[0] == '.') && strings.IndexFunc(s, unicode.IsLetter) > 0:
		if _, err := duration.Parse(s); err == nil {
			return "a duration"
		}
	}
	return ""
}

// parseThreshold parses a threshold for metric m: a duration for latency
// metrics ("200ms", "1.5s"), a rate for rate ("100/s", "6000/m", or a plain
// number per second), a ratio for error_ratio ("5%" or "0.05"), a plain
// number otherwise. The result is in the metric's base unit; an error's
// offset is relative to s.
func parseThreshold(m Metric, s string) (float64, *ConditionError) {
	wrongKind := func() *ConditionError {
		if k := kindOf(s); k != "" && !(k == "a duration" && m.unit() == unitDuration) &&
			!(k == "a rate" && m.unit() == unitRate) && !(k == "a percentage" && m.unit() == unitRatio) {
			return condErrorf(0, "%s is %s, not %s (%q): want e.g. %s", m, m.unitName(), k, s, m.example())
		}
		return nil
	}
	if e := wrongKind(); e != nil {
		return 0, e
	}
	switch m.unit() {
	case unitDuration:
		if s == "0" {
			return 0, nil
		}
		if _, err := strconv.ParseFloat(s, 64); err == nil {
			if strings.HasPrefix(s, "-") {
				return 0, condErrorf(0, "negative duration %q: a latency is never below 0", s)
			}
			return 0, condErrorf(0, "%s is a duration: %q needs a unit (%s), e.g. %sms", m, s, duration.Units, s)
		}
		d, err := conditionDuration(s)
		if err != nil {
			return 0, err
		}
		return float64(d), nil
	case unitRate:
		num, per, hasPer := strings.Cut(s, "/")
		numT := strings.TrimSpace(num)
		f, err := parseNumber(numT)
		if err != nil {
			if strings.HasPrefix(numT, "-") {
				return 0, condErrorf(0, "negative rate %q: a rate is never below 0", s)
			}
			return 0, condErrorf(0, "rate %q: %q is not a number: want spans per second, minute or hour, e.g. 100/s or 6000/m", s, numT)
		}
		if hasPer {
			switch strings.TrimSpace(per) {
			case "s":
			case "m":
				f /= 60
			case "h":
				f /= 3600
			default:
				return 0, condErrorf(len(num), "rate %q: unknown unit \"/%s\": want /s, /m or /h", s, strings.TrimSpace(per))
			}
		}
		return f, nil
	case unitRatio:
		if p, ok := strings.CutSuffix(s, "%"); ok {
			p = strings.TrimSpace(p)
			f, err := parseNumber(p)
			if err != nil {
				if strings.HasPrefix(p, "-") {
					return 0, condErrorf(0, "negative percentage %q: a ratio is between 0%% and 100%%", s)
				}
				return 0, condErrorf(0, "percentage %q: %q is not a number: want e.g. 5%%", s, p)
			}
			if f > 100 {
				return 0, condErrorf(0, "percentage %q is above 100%%: an error ratio is between 0%% and 100%%", s)
			}
			return f / 100, nil
		}
		f, err := parseNumber(s)
		if err != nil {
			if strings.HasPrefix(s, "-") {
				return 0, condErrorf(0, "negative ratio %q: a ratio is between 0 and 1", s)
			}
			return 0, condErrorf(0, "ratio %q: want a fraction (0.05) or a percentage (5%%)", s)
		}
		if f > 1 {
			return 0, condErrorf(0, "ratio %q is above 1: write a percentage as %s%%", s, s)
		}
		return f, nil
	default:
		f, err := parseNumber(s)
		if err != nil {
			if strings.HasPrefix(s, "-") {
				return 0, condErrorf(0, "negative number %q: %s is never below 0", s, m)
			}
			return 0, condErrorf(0, "%s is a plain number, not %q", m, s)
		}
		return f, nil
	}
}

// unitName says what kind of quantity the metric is, for messages.
func (m Metric) unitName() string {
	switch m.unit() {
	case unitDuration:
		return "a duration"
	case unitRate:
		return "spans per second"
	case unitRatio:
		return "a ratio"
	default:
		return "a plain number"
	}
}

// durationUnits are the units duration.Parse accepts.
var durationUnits = []string{"ns", "us", "µs", "μs", "ms", "s", "m", "h", "d", "w", "y"}

// conditionDuration parses a condition's duration, saying which part of
// it is wrong: a space inside it, an unknown unit, a missing number, or
// something after it.
func conditionDuration(s string) (time.Duration, *ConditionError) {
	if d, err := duration.Parse(s); err == nil {
		return d, nil
	}
	if strings.HasPrefix(s, "-") {
		return 0, condErrorf(0, "negative duration %q: a latency is never below 0", s)
	}
	i := 0
	if s[0] == '+' {
		i++
	}
	for i < len(s) {
		numStart := i
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		unitStart := i
		for i < len(s) {
			r, size := utf8.DecodeRuneInString(s[i:])
			if !unicode.IsLetter(r) {
				break
			}
			i += size
		}
		num, unit := s[numStart:unitStart], s[unitStart:i]
		switch {
		case num == "" && unit == "" && isSpace(s[i]):
			return 0, condErrorf(i, "duration %q: no space allowed inside a duration (write %s)", s, strings.Join(strings.Fields(s), ""))
		case num == "" && unit == "":
			return 0, condErrorf(i, "duration %q: unexpected %q", s, s[i:])
		case num == "":
			if numStart == 0 {
				return 0, condErrorf(0, "%q is not a duration: want a number with a unit, e.g. 200ms or 1.5s", s)
			}
			return 0, condErrorf(numStart, "duration %q: unit %q has no number before it", s, unit)
		case unit == "" && i < len(s) && isSpace(s[i]):
			rest := strings.TrimSpace(s[i:])
			if slices.Contains(durationUnits, rest) {
				return 0, condErrorf(i, "duration %q: no space allowed between the number and its unit (write %s%s)", s, num, rest)
			}
			return 0, condErrorf(i, "duration %q: %q needs a unit (%s)", s, num, duration.Units)
		case unit == "":
			return 0, condErrorf(unitStart, "duration %q: %q needs a unit (%s)", s, num, duration.Units)
		case !slices.Contains(durationUnits, unit):
			return 0, condErrorf(unitStart, "duration %q: unknown unit %q: want one of %s", s, unit, duration.Units)
		case strings.Count(num, ".") > 1:
			return 0, condErrorf(numStart, "duration %q: %q is not a number", s, num)
		}
		if i < len(s) && isSpace(s[i]) {
			j := i
			for j < len(s) && isSpace(s[j]) {
				j++
			}
			return 0, condErrorf(j, "unexpected %q after the duration %s", s[j:], s[:i])
		}
	}
	// Every part looked right, yet duration.Parse refused: it overflows.
	return 0, condErrorf(0, "duration %q is too long: at most about 292y", s)
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
