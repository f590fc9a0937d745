package policy

import (
	"fmt"
	"strings"

	"github.com/spanwatch/spanwatch/snapshot"
)

// An Op is a comparison operator.
type Op string

const (
	OpGT Op = ">"
	OpGE Op = ">="
	OpLT Op = "<"
	OpLE Op = "<="
	OpEQ Op = "=="
	OpNE Op = "!="
)

func (o Op) compare(v, t float64) bool {
	switch o {
	case OpGT:
		return v > t
	case OpGE:
		return v >= t
	case OpLT:
		return v < t
	case OpLE:
		return v <= t
	case OpEQ:
		return v == t
	case OpNE:
		return v != t
	}
	return false
}

// A Comparison is one "metric op threshold" test, e.g. p99 > 200ms.
type Comparison struct {
	Metric    Metric
	Op        Op
	Threshold float64 // in the metric's base unit: ns, spans/s, ratio, count
}

// Holds reports whether the series passes the comparison, and the value it
// compared.
func (c Comparison) Holds(s *snapshot.Series) (float64, bool) {
	v := c.Metric.Value(s)
	return v, c.Op.compare(v, c.Threshold)
}

func (c Comparison) String() string {
	return fmt.Sprintf("%s %s %s", c.Metric, c.Op, c.Metric.Format(c.Threshold))
}

// A Condition is a rule's "when": one comparison or several joined by
// "and". The first comparison is the rule's value ({{ .Value }}).
type Condition struct {
	Text  string
	Terms []Comparison
}

// Holds reports whether every comparison holds for the series, and the
// value of the first.
func (c *Condition) Holds(s *snapshot.Series) (float64, bool) {
	var first float64
	for i, t := range c.Terms {
		v, ok := t.Holds(s)
		if i == 0 {
			first = v
		}
		if !ok {
			return first, false
		}
	}
	return first, true
}

// ParseCondition parses "p99 > 200ms" or "error_ratio >= 5% and count > 100".
func ParseCondition(text string) (*Condition, error) {
	c := &Condition{Text: text}
	if strings.TrimSpace(text) == "" {
		return nil, fmt.Errorf("empty condition: want \"METRIC OP VALUE\", e.g. p99 > 200ms")
	}
	for _, part := range splitAnd(text) {
		t, err := parseComparison(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		c.Terms = append(c.Terms, t)
	}
	return c, nil
}

// splitAnd splits on the word "and" between comparisons.
func splitAnd(s string) []string {
	fields := strings.Fields(s)
	var parts []string
	var cur []string
	for _, f := range fields {
		if f == "and" || f == "&&" {
			parts = append(parts, strings.Join(cur, " "))
			cur = nil
			continue
		}
		cur = append(cur, f)
	}
	return append(parts, strings.Join(cur, " "))
}

func parseComparison(s string) (Comparison, error) {
	if s == "" {
		return Comparison{}, fmt.Errorf("empty comparison: \"and\" must join two comparisons")
	}
	i := 0
	for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= '0' && s[i] <= '9' || s[i] == '_') {
		i++
	}
	m := Metric(s[:i])
	if m == "" {
		return Comparison{}, fmt.Errorf("comparison %q: want a metric first (%s)", s, metricList())
	}
	if !m.valid() {
		return Comparison{}, fmt.Errorf("unknown metric %q: want one of %s", m, metricList())
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
		return Comparison{}, fmt.Errorf("comparison %q: want an operator (>, >=, <, <=, ==, !=) after %s", s, m)
	}
	val := strings.TrimSpace(rest[len(op):])
	if val == "" {
		return Comparison{}, fmt.Errorf("comparison %q: missing value after %s", s, op)
	}
	t, err := parseThreshold(m, val)
	if err != nil {
		return Comparison{}, err
	}
	return Comparison{Metric: m, Op: op, Threshold: t}, nil
}

func metricList() string {
	names := make([]string, len(Metrics))
	for i, m := range Metrics {
		names[i] = string(m)
	}
	return strings.Join(names, ", ")
}
