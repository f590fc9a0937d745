package policy

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/snapshot"
)

func TestParseThreshold(t *testing.T) {
	for _, tc := range []struct {
		metric Metric
		in     string
		want   float64
		err    string
	}{
		{MetricP99, "200ms", 200e6, ""},
		{MetricP99, "1.5s", 1.5e9, ""},
		{MetricP99, "250us", 250e3, ""},
		{MetricP99, "250µs", 250e3, ""},
		{MetricP99, "10ns", 10, ""},
		{MetricP99, "2m", 120e9, ""},
		{MetricP99, "1h", 3600e9, ""},
		{MetricP99, "1m30s", 90e9, ""},
		{MetricP99, "0", 0, ""},
		{MetricMax, "200", 0, "needs a unit"},
		{MetricMean, "fast", 0, "is not a duration"},
		{MetricP99, "200xs", 0, `unknown unit "xs"`},
		{MetricP99, "200 ms", 0, "no space allowed"},
		{MetricP99, "5%", 0, "p99 is a duration, not a percentage"},
		{MetricP50, "-5ms", 0, "negative duration"},
		{MetricRate, "100/s", 100, ""},
		{MetricRate, "6000/m", 100, ""},
		{MetricRate, "7200/h", 2, ""},
		{MetricRate, "12.5", 12.5, ""},
		{MetricRate, "10/d", 0, `unknown unit "/d"`},
		{MetricRate, "200ms", 0, "not a duration"},
		{MetricRate, "many/s", 0, "is not a number"},
		{MetricErrorRatio, "5%", 0.05, ""},
		{MetricErrorRatio, "0.5%", 0.005, ""},
		{MetricErrorRatio, "0.05", 0.05, ""},
		{MetricErrorRatio, "1", 1, ""},
		{MetricErrorRatio, "5", 0, "above 1"},
		{MetricErrorRatio, "150%", 0, "above 100%"},
		{MetricErrorRatio, "100%", 1, ""},
		{MetricCount, "100", 100, ""},
		{MetricCount, "1e3", 1000, ""},
		{MetricErrors, "0", 0, ""},
		{MetricOverBudget, "3", 3, ""},
		{MetricCount, "100ms", 0, "plain number"},
		{MetricCount, "NaN", 0, "plain number"},
		{MetricCount, "-1", 0, "negative number"},
		{MetricCount, "5%", 0, "not a percentage"},
	} {
		got, err := parseThreshold(tc.metric, tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseThreshold(%s, %q) = %v, %v; want error containing %q", tc.metric, tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || math.Abs(got-tc.want) > 1e-9*math.Max(1, tc.want) {
			t.Errorf("parseThreshold(%s, %q) = %v, %v; want %v", tc.metric, tc.in, got, err, tc.want)
		}
	}
}

// series is a window with 100 spans, 5 errors, p99 exactly 200ms.
func testSeries() *snapshot.Series {
	return &snapshot.Series{
		Span: "checkout", Count: 100, Rate: 10, Errors: 5, ErrorRatio: 0.05,
		SumNs: 100 * 50e6, P50Ns: 40e6, P90Ns: 120e6, P99Ns: 200e6, MaxNs: 300e6,
		OverBudget: 2, BudgetNs: 250e6,
	}
}

// TestConditionOperators checks every metric and operator at, just below
// and just above the series' exact value.
func TestConditionOperators(t *testing.T) {
	s := testSeries()
	exact := map[Metric]string{
		MetricCount: "100", MetricRate: "10/s", MetricErrors: "5", MetricErrorRatio: "5%",
		MetricP50: "40ms", MetricP90: "120ms", MetricP99: "200ms", MetricMax: "300ms",
		MetricMean: "50ms", MetricOverBudget: "2",
	}
	below := map[Metric]string{
		MetricCount: "99", MetricRate: "599/m", MetricErrors: "4", MetricErrorRatio: "4.9%",
		MetricP50: "39.999ms", MetricP90: "119ms", MetricP99: "199999999ns", MetricMax: "299ms",
		MetricMean: "49ms", MetricOverBudget: "1",
	}
	above := map[Metric]string{
		MetricCount: "101", MetricRate: "10.5", MetricErrors: "6", MetricErrorRatio: "0.051",
		MetricP50: "41ms", MetricP90: "121ms", MetricP99: "200000001ns", MetricMax: "301ms",
		MetricMean: "51ms", MetricOverBudget: "3",
	}
	// want[op] = holds at (below, exact, above) thresholds.
	want := map[Op][3]bool{
		OpGT: {true, false, false},
		OpGE: {true, true, false},
		OpLT: {false, false, true},
		OpLE: {false, true, true},
		OpEQ: {false, true, false},
		OpNE: {true, false, true},
	}
	for _, m := range Metrics {
		for op, w := range want {
			for i, th := range []string{below[m], exact[m], above[m]} {
				expr := string(m) + " " + string(op) + " " + th
				c, err := ParseCondition(expr)
				if err != nil {
					t.Fatalf("%s: %v", expr, err)
				}
				_, got := c.Holds(s)
				if got != w[i] {
					t.Errorf("%s on %s=%v: holds=%v, want %v", expr, m, m.Value(s), got, w[i])
				}
			}
		}
	}
}

// TestConditionErrors checks that each malformed condition is refused with
// a message that names the problem, at the offset of the offending part.
func TestConditionErrors(t *testing.T) {
	for _, tc := range []struct {
		text string
		off  int
		msg  string
	}{
		{"", 0, "empty condition"},
		{"p99 >> 200ms", 4, `unknown operator ">>"`},
		{"p99 = 200ms", 4, "did you mean ==?"},
		{"p99 => 200ms", 4, "did you mean >=?"},
		{"p99 <> 200ms", 4, "did you mean !=?"},
		{"p99 >", 5, "missing value after p99 >"},
		{"p99 200ms", 4, "missing operator between p99 and \"200ms\""},
		{"p99", 3, "missing operator and value"},
		{"> 1s", 0, "missing metric"},
		{"1s > p99", 0, "starts with the metric"},
		{"latency > 1s", 0, "did you mean p99?"},
		{"eror_ratio > 5%", 0, "did you mean error_ratio?"},
		{"p99 > 200xs", 9, `unknown unit "xs"`},
		{"p99 > 200 ms", 9, "no space allowed"},
		{"p99 > 200ms foo", 12, `unexpected "foo"`},
		{"p99 > fast", 6, "is not a duration"},
		{"rate > 10/d", 9, `unknown unit "/d"`},
		{"p99 > 1s or count > 3", 9, `"or" is not supported`},
		{"p99 > 1s || count > 3", 9, `"||" is not supported`},
		{"p99 > 1s and", 9, "the one after it is missing"},
		{"and p99 > 1s", 0, "the one before it is missing"},
		{"p99 > 1s and and count > 1", 9, "the one after it is missing"},
		{"p99>1s&&count>", 14, "missing value after count >"},
		{"count >> 3", 6, "unknown operator"},
	} {
		_, err := ParseCondition(tc.text)
		var ce *ConditionError
		if !errors.As(err, &ce) {
			t.Errorf("ParseCondition(%q) = %v, want a *ConditionError", tc.text, err)
			continue
		}
		if ce.Offset != tc.off || !strings.Contains(ce.Msg, tc.msg) {
			t.Errorf("ParseCondition(%q): offset %d %q, want offset %d and %q", tc.text, ce.Offset, ce.Msg, tc.off, tc.msg)
		}
	}
}

func TestConditionEmptyWindow(t *testing.T) {
	empty := &snapshot.Series{Span: "checkout", MaxNs: 5e9, ErrorRatio: math.NaN(), Rate: math.Inf(1)}
	for _, m := range Metrics {
		v := m.Value(empty)
		if v != 0 {
			t.Errorf("%s over an empty window = %v, want 0 (never NaN, never the running max)", m, v)
		}
	}
	for _, tc := range []struct {
		expr string
		want bool
	}{
		{"p99 > 0", false},
		{"p99 == 0", true},
		{"count < 1", true},
		{"error_ratio > 0%", false},
		{"rate < 1/s", true},
		{"max > 1s", false},
	} {
		c, err := ParseCondition(tc.expr)
		if err != nil {
			t.Fatal(err)
		}
		if _, got := c.Holds(empty); got != tc.want {
			t.Errorf("%s on an empty window: %v, want %v", tc.expr, got, tc.want)
		}
	}
}

func TestConditionAnd(t *testing.T) {
	s := testSeries()
	for _, tc := range []struct {
		expr  string
		want  bool
		value float64
	}{
		{"error_ratio >= 5% and count > 100", false, 0.05},
		{"error_ratio >= 5% and count >= 100", true, 0.05},
		{"p99>200ms && p50<1s", false, 200e6},
		{"p99>=200ms && p50<1s and rate > 1", true, 200e6},
	} {
		c, err := ParseCondition(tc.expr)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		v, got := c.Holds(s)
		if got != tc.want || v != tc.value {
			t.Errorf("%s: holds=%v value=%v, want %v %v", tc.expr, got, v, tc.want, tc.value)
		}
	}
	for _, bad := range []string{"", "and", "p99 > 1s and", "> 1s", "p99 >", "count >> 3"} {
		if _, err := ParseCondition(bad); err == nil {
			t.Errorf("ParseCondition(%q) succeeded", bad)
		}
	}
}

func TestMetricFormat(t *testing.T) {
	for _, tc := range []struct {
		m    Metric
		v    float64
		want string
	}{
		{MetricP99, 212e6, "212ms"},
		{MetricP99, 1.5e9, "1.5s"},
		{MetricP99, 850e3, "850µs"},
		{MetricP99, 12, "12ns"},
		{MetricP99, 0, "0s"},
		{MetricMean, 1234567, "1.235ms"},
		{MetricRate, 12.5, "12.5/s"},
		{MetricErrorRatio, 0.0523, "5.23%"},
		{MetricCount, 17, "17"},
	} {
		if got := tc.m.Format(tc.v); got != tc.want {
			t.Errorf("%s.Format(%v) = %q, want %q", tc.m, tc.v, got, tc.want)
		}
	}
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"checkout", "checkout", true},
		{"checkout", "checkout2", false},
		{"db.*", "db.query", true},
		{"db.*", "db.", true},
		{"db.*", "cache.get", false},
		{"*", "", true},
		{"*", "anything/at/all", true},
		{"/sys/*/docker-*.scope", "/sys/fs/cgroup/system.slice/docker-abc.scope", true},
		{"GET /api/*/items", "GET /api/v1/items", true},
		{"GET /api/*/items", "GET /api/v1/things", false},
		{"a?c", "abc", true},
		{"a?c", "aéc", true},
		{"a?c", "ac", false},
		{`a\*c`, "a*c", true},
		{`a\*c`, "abc", false},
		{"!curl", "curl", false},
		{"!curl", "nginx", true},
		{"!web-*", "web-1", false},
		{"*a*a*a*a*a*b", strings.Repeat("a", 200), false},
		{"*.*", "a.b.c", true},
	} {
		g, err := CompileGlob(tc.pattern)
		if err != nil {
			t.Fatalf("CompileGlob(%q): %v", tc.pattern, err)
		}
		if got := g.Match(tc.s); got != tc.want {
			t.Errorf("%q.Match(%q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
	if _, err := CompileGlob(`a\`); err == nil {
		t.Error(`CompileGlob("a\\") succeeded`)
	}
}

func TestMatcher(t *testing.T) {
	s := &snapshot.Series{Span: "checkout", Identity: snapshot.Identity{Container: "web-1", Process: "nginx", Service: "shop"}}
	mk := func(p string) *Glob { g, _ := CompileGlob(p); return g }
	for _, tc := range []struct {
		m    Matcher
		want bool
	}{
		{Matcher{}, true},
		{Matcher{Span: mk("checkout")}, true},
		{Matcher{Span: mk("checkout"), Container: mk("web-*")}, true},
		{Matcher{Span: mk("checkout"), Container: mk("db-*")}, false},
		{Matcher{Pod: mk("*")}, true},   // absent field matches as ""
		{Matcher{Pod: mk("?*")}, false}, // ... so requiring one char fails
		{Matcher{Process: mk("!nginx")}, false},
		{Matcher{Unit: mk("!*.service")}, true},
		{Matcher{Service: mk("sh*")}, true},
		{Matcher{Service: mk("cart")}, false},
	} {
		if got := tc.m.Match(s); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.m, got, tc.want)
		}
	}
}
