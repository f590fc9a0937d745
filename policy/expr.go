package policy

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spanwatch/spanwatch/internal/typo"
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

// A ConditionError is one problem in a condition, at a byte offset into
// the condition's text, so a rule file's error can point at the column.
type ConditionError struct {
	Offset int
	Msg    string
}

func (e *ConditionError) Error() string { return e.Msg }

func condErrorf(off int, format string, a ...any) *ConditionError {
	return &ConditionError{Offset: off, Msg: fmt.Sprintf(format, a...)}
}

// ParseCondition parses "p99 > 200ms" or "error_ratio >= 5% and count > 100".
// Its error is a *ConditionError that says what is wrong and where.
func ParseCondition(text string) (*Condition, error) {
	c := &Condition{Text: text}
	if strings.TrimSpace(text) == "" {
		return nil, condErrorf(0, "empty condition: want METRIC OP VALUE, e.g. p99 > 200ms")
	}
	segs, err := splitComparisons(text)
	if err != nil {
		return nil, err
	}
	for _, sg := range segs {
		t, err := parseComparison(text, sg)
		if err != nil {
			return nil, err
		}
		c.Terms = append(c.Terms, t)
	}
	return c, nil
}

// segment is one comparison's byte range in a condition, and the offset of
// the separator before it (-1 for the first).
type segment struct {
	start, end, sep int
}

// splitComparisons splits a condition on the word "and" and on "&&"
// (which needs no spaces around it), and refuses "or" and "||".
func splitComparisons(text string) ([]segment, *ConditionError) {
	var segs []segment
	start, sep := 0, -1
	for i := 0; i < len(text); {
		switch {
		case strings.HasPrefix(text[i:], "&&"):
			segs = append(segs, segment{start, i, sep})
			start, sep = i+2, i
			i += 2
		case strings.HasPrefix(text[i:], "||"):
			return nil, condErrorf(i, "\"||\" is not supported: a condition is comparisons joined by \"and\"; write one rule per alternative")
		case isWordAt(text, i, "and"):
			segs = append(segs, segment{start, i, sep})
			start, sep = i+3, i
			i += 3
		case isWordAt(text, i, "or"):
			return nil, condErrorf(i, "\"or\" is not supported: a condition is comparisons joined by \"and\"; write one rule per alternative")
		default:
			i++
		}
	}
	return append(segs, segment{start, len(text), sep}), nil
}

// isWordAt reports whether text has the word w at i, delimited by spaces or
// the ends of the text.
func isWordAt(text string, i int, w string) bool {
	if !strings.HasPrefix(text[i:], w) {
		return false
	}
	if i > 0 && !isSpace(text[i-1]) {
		return false
	}
	j := i + len(w)
	return j == len(text) || isSpace(text[j])
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isIdent(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.'
}

func isOpChar(c byte) bool { return c == '<' || c == '>' || c == '=' || c == '!' }

var ops = []Op{OpGT, OpGE, OpLT, OpLE, OpEQ, OpNE}

const opList = ">, >=, <, <=, ==, !="

// opHints are the operators people write from other languages, and what
// they mean here.
var opHints = map[string]string{"=": "==", "=>": ">=", "=<": "<=", "<>": "!=", "=!": "!=", "===": "==", "!==": "!="}

func parseComparison(text string, sg segment) (Comparison, error) {
	i := sg.start
	skip := func() {
		for i < sg.end && isSpace(text[i]) {
			i++
		}
	}
	skip()
	if i == sg.end {
		switch {
		case sg.sep >= 0:
			return Comparison{}, condErrorf(sg.sep, "\"and\" must join two comparisons: the one after it is missing")
		case sg.end < len(text):
			return Comparison{}, condErrorf(sg.end, "\"and\" must join two comparisons: the one before it is missing")
		}
		return Comparison{}, condErrorf(sg.start, "empty comparison: want METRIC OP VALUE, e.g. p99 > 200ms")
	}
	mStart := i
	for i < sg.end {
		r, size := utf8.DecodeRuneInString(text[i:sg.end])
		if !(r < utf8.RuneSelf && isIdent(byte(r)) || r >= utf8.RuneSelf && unicode.IsLetter(r)) {
			break
		}
		i += size
	}
	name := text[mStart:i]
	if name == "" {
		if isOpChar(text[i]) {
			return Comparison{}, condErrorf(mStart, "missing metric before %q: want one of %s", opAt(text, i, sg.end), metricList())
		}
		return Comparison{}, condErrorf(mStart, "want a metric first (one of %s), not %q", metricList(), strings.TrimSpace(text[mStart:sg.end]))
	}
	m := Metric(name)
	if name[0] >= '0' && name[0] <= '9' || name[0] == '.' {
		return Comparison{}, condErrorf(mStart, "a comparison starts with the metric, not a value (%q): write METRIC OP VALUE, e.g. p99 > 200ms", name)
	}
	if !m.valid() {
		if s := suggestMetric(name); s != "" {
			return Comparison{}, condErrorf(mStart, "unknown metric %q (did you mean %s?): want one of %s", name, s, metricList())
		}
		return Comparison{}, condErrorf(mStart, "unknown metric %q: want one of %s", name, metricList())
	}
	skip()
	opStart := i
	op := opAt(text, i, sg.end)
	if op == "" {
		if i == sg.end {
			return Comparison{}, condErrorf(opStart, "missing operator and value after %s: want e.g. %s > %s", m, m, m.example())
		}
		return Comparison{}, condErrorf(opStart, "missing operator between %s and %q: want one of %s", m, strings.TrimSpace(text[i:sg.end]), opList)
	}
	if !slices.Contains(ops, Op(op)) {
		if hint, ok := opHints[op]; ok {
			return Comparison{}, condErrorf(opStart, "unknown operator %q (did you mean %s?): want one of %s", op, hint, opList)
		}
		return Comparison{}, condErrorf(opStart, "unknown operator %q: want one of %s", op, opList)
	}
	i += len(op)
	skip()
	vStart := i
	val := strings.TrimRight(text[i:sg.end], " \t\r\n")
	if val == "" {
		return Comparison{}, condErrorf(vStart, "missing value after %s %s: want e.g. %s %s %s", m, op, m, op, m.example())
	}
	t, err := parseThreshold(m, val)
	if err != nil {
		return Comparison{}, &ConditionError{Offset: vStart + err.Offset, Msg: err.Msg}
	}
	return Comparison{Metric: m, Op: Op(op), Threshold: t}, nil
}

// opAt returns the run of operator characters at i.
func opAt(text string, i, end int) string {
	j := i
	for j < end && isOpChar(text[j]) {
		j++
	}
	return text[i:j]
}

// suggestMetric returns the metric a misspelled name most likely meant, or
// "".
func suggestMetric(name string) string {
	lower := strings.ToLower(name)
	aliases := map[string]Metric{"latency": MetricP99, "duration": MetricP99, "p95": MetricP99, "p999": MetricP99, "median": MetricP50,
		"error_rate": MetricErrorRatio, "errors_ratio": MetricErrorRatio, "err_ratio": MetricErrorRatio, "qps": MetricRate, "rps": MetricRate, "avg": MetricMean, "average": MetricMean}
	if m, ok := aliases[lower]; ok && string(m) != name {
		return string(m)
	}
	best, bestD := "", 3
	for _, m := range Metrics {
		if d := typo.Distance(lower, string(m)); d < bestD {
			best, bestD = string(m), d
		}
	}
	return best
}

func metricList() string {
	names := make([]string, len(Metrics))
	for i, m := range Metrics {
		names[i] = string(m)
	}
	return strings.Join(names, ", ")
}
