package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/snapshot"
)

// Rules over what third-party sources add to series (docs/sources.md):
// label values taken from probe arguments or event fields, matched by
// match:, and argument metrics (series of kind "metric"), selected by
// metric: instead of span:, whose conditions compare values, not
// durations.

// Metrics of argument-metric series, beside count, rate, errors and
// error_ratio: the window's signed sum, its extremes, mean and quantiles,
// all in the values' own unit.
const (
	MetricSum Metric = "sum"
	MetricMin Metric = "min"
)

// ValueMetrics lists the metrics a rule over argument metrics can test.
var ValueMetrics = []Metric{MetricCount, MetricRate, MetricErrors, MetricErrorRatio, MetricSum, MetricMean, MetricMin, MetricMax, MetricP50, MetricP90, MetricP99}

// valueOf returns a metric of an argument-metric series: values for
// sum, mean, min, max and the quantiles, counts and rates as for spans.
// An empty window gives 0.
func valueOf(m Metric, s *snapshot.Series) float64 {
	switch m {
	case MetricSum:
		return float64(s.Sum)
	case MetricMean:
		if s.Count == 0 {
			return 0
		}
		return float64(s.Sum) / float64(s.Count)
	case MetricMin:
		return float64(s.Min)
	case MetricMax:
		return float64(s.Max)
	case MetricP50:
		return finite(s.P50)
	case MetricP90:
		return finite(s.P90)
	case MetricP99:
		return finite(s.P99)
	case MetricOverBudget:
		return 0
	}
	return m.spanValue(s)
}

// addValueFields adds an argument metric's kind and values to its Rego
// input object.
func addValueFields(obj ast.Object, s *snapshot.Series) {
	obj.Insert(ast.StringTerm("kind"), ast.StringTerm(s.Kind))
	obj.Insert(ast.StringTerm("sum"), ast.IntNumberTerm(int(s.Sum)))
	obj.Insert(ast.StringTerm("min"), ast.IntNumberTerm(int(s.Min)))
	obj.Insert(ast.StringTerm("max"), ast.IntNumberTerm(int(s.Max)))
	obj.Insert(ast.StringTerm("p50"), ast.FloatNumberTerm(finite(s.P50)))
	obj.Insert(ast.StringTerm("p90"), ast.FloatNumberTerm(finite(s.P90)))
	obj.Insert(ast.StringTerm("p99"), ast.FloatNumberTerm(finite(s.P99)))
}

func valueMetricList() string {
	names := make([]string, len(ValueMetrics))
	for i, m := range ValueMetrics {
		names[i] = string(m)
	}
	return strings.Join(names, ", ")
}

// parseValueCondition parses the when: of a rule over argument metrics:
// "sum > 1000", "p99 >= -5 and count > 10". Values are plain numbers,
// negative ones included; rate and error_ratio take their usual forms.
func parseValueCondition(text string) (*Condition, error) {
	c := &Condition{Text: text}
	if strings.TrimSpace(text) == "" {
		return nil, fmt.Errorf("empty condition: want \"METRIC OP VALUE\", e.g. sum > 1000")
	}
	segs, cerr := splitComparisons(text)
	if cerr != nil {
		return nil, cerr
	}
	for _, sg := range segs {
		s := strings.TrimSpace(text[sg.start:sg.end])
		i := 0
		for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= '0' && s[i] <= '9' || s[i] == '_') {
			i++
		}
		m := Metric(s[:i])
		known := false
		for _, x := range ValueMetrics {
			known = known || x == m
		}
		if !known {
			return nil, fmt.Errorf("unknown metric %q for an argument metric: want one of %s", m, valueMetricList())
		}
		rest := strings.TrimLeft(s[i:], " \t")
		var op Op
		for _, o := range []Op{OpGE, OpLE, OpEQ, OpNE, OpGT, OpLT} {
			if strings.HasPrefix(rest, string(o)) {
				op = o
				break
			}
		}
		if op == "" {
			return nil, fmt.Errorf("comparison %q: want an operator (>, >=, <, <=, ==, !=) after %s", s, m)
		}
		val := strings.TrimSpace(rest[len(op):])
		if val == "" {
			return nil, fmt.Errorf("comparison %q: missing value after %s", s, op)
		}
		var t float64
		var err error
		switch m {
		case MetricRate, MetricErrorRatio, MetricCount, MetricErrors:
			// parseThreshold's error is a *ConditionError: keep a nil
			// one out of err (a typed nil is a non-nil error).
			var ce *ConditionError
			if t, ce = parseThreshold(m, val); ce != nil {
				err = ce
			}
		default:
			t, err = strconv.ParseFloat(val, 64)
			if err != nil || math.IsNaN(t) || math.IsInf(t, 0) {
				err = fmt.Errorf("%s of an argument metric is a number, not %q", m, val)
			}
		}
		if err != nil {
			return nil, err
		}
		c.Terms = append(c.Terms, Comparison{Metric: m, Op: op, Threshold: t})
	}
	return c, nil
}

// labelMatchers decodes match: {label: glob, ...}: every label (a source's
// label, or any other label of the series: cgroup, container, pod...) must
// match its glob.
func (d *decoder) labelMatchers(n *yaml.Node) map[string]*Glob {
	n = section.Resolve(n)
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "match must be a mapping of label names to globs, like {status: \"5*\"}, not %s", section.KindName(n))
		return nil
	}
	out := map[string]*Glob{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := section.Resolve(n.Content[i]), section.Resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			d.errorf(k, "match: label names must be strings")
			continue
		}
		if k.Value == "span" {
			d.errorf(k, "match: select the span with span: (or metric:), not match:")
			continue
		}
		if _, dup := out[k.Value]; dup {
			d.errorf(k, "match: label %s given twice", k.Value)
			continue
		}
		if v.Kind != yaml.ScalarNode || v.ShortTag() == "!!null" {
			d.errorf(v, "match: label %s: want a glob (a value, or * and ? patterns), not %s", k.Value, section.KindName(v))
			continue
		}
		g, err := CompileGlob(v.Value)
		if err != nil {
			d.errorf(v, "match: label %s: %v", k.Value, err)
			continue
		}
		out[k.Value] = g
	}
	return out
}

// matchLabels reports whether the series' labels match every label glob;
// a label the series lacks is matched as the empty string.
func (m *Matcher) matchLabels(s *snapshot.Series) bool {
	if len(m.Labels) == 0 {
		return true
	}
	for name, g := range m.Labels {
		v, ok := s.SourceLabels[name]
		if !ok {
			v = s.Labels()[name]
		}
		if !g.Match(v) {
			return false
		}
	}
	return true
}
