package policy

import (
	"context"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/snapshot"
)

// TestSourceSeriesRules checks rules over a source's labels (match:) and
// over argument metrics (metric:, whose conditions compare values), and
// that span rules leave metric series alone.
func TestSourceSeriesRules(t *testing.T) {
	cfg, err := Parse("r.yaml", []byte(`
rules:
  - name: ServerErrors
    span: "GET *"
    match: {status: "5*"}
    when: count > 2
  - name: QueueDraining
    metric: queue_delta
    when: sum < -5 and min <= -3
  - name: AnySpanBusy
    when: count > 0
  - name: DepthTwo
    span: rec
    match: {depth: "2", container: ""}
    when: p99 > 1ms
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	series := []snapshot.Series{
		{Span: "GET /a", Count: 5, SourceLabels: map[string]string{"status": "503"}},
		{Span: "GET /a", Count: 9, SourceLabels: map[string]string{"status": "200"}},
		{Span: "GET /b", Count: 2, SourceLabels: map[string]string{"status": "500"}},
		{Span: "GET /c", Count: 7, SourceLabels: map[string]string{"status": "other"}},
		{Span: "GET /d", Count: 7},
		{Kind: snapshot.KindMetric, Span: "queue_delta", Count: 10, Sum: -6, Min: -3, Max: 3},
		{Kind: snapshot.KindMetric, Span: "other_metric", Count: 10, Sum: -60, Min: -30},
		{Span: "rec", Count: 4, P99Ns: 5e6, SourceLabels: map[string]string{"depth": "2"}},
		{Span: "rec", Count: 4, P99Ns: 9e6, SourceLabels: map[string]string{"depth": "3"}},
	}
	holds := map[string][]string{}
	for _, r := range cfg.Rules {
		for i := range series {
			s := &series[i]
			if !r.Match.Match(s) {
				continue
			}
			if _, ok := r.When.Holds(s); ok {
				holds[r.Name] = append(holds[r.Name], s.Span+"/"+s.SourceLabels["status"]+s.SourceLabels["depth"])
			}
		}
	}
	want := map[string]string{
		"ServerErrors":  "GET /a/503",
		"QueueDraining": "queue_delta/",
		"AnySpanBusy":   "GET /a/503 GET /a/200 GET /b/500 GET /c/other GET /d/ rec/2 rec/3",
		"DepthTwo":      "rec/2",
	}
	for name, w := range want {
		if got := strings.Join(holds[name], " "); got != w {
			t.Errorf("%s holds for %q, want %q", name, got, w)
		}
	}
}

func TestSourceSeriesRuleErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"rules:\n  - name: X\n    metric: m\n    when: p99 > 200ms\n", `r.yaml:4:11: when: p99 of an argument metric is a number, not "200ms"`},
		{"rules:\n  - name: X\n    metric: m\n    when: over_budget > 1\n", `unknown metric "over_budget" for an argument metric`},
		{"rules:\n  - name: X\n    span: a\n    metric: m\n    when: count > 1\n", `rule "X": has both span and metric`},
		{"rules:\n  - name: X\n    match: [a]\n    when: count > 1\n", "r.yaml:3:12: match must be a mapping"},
		{"rules:\n  - name: X\n    match: {span: a}\n    when: count > 1\n", "select the span with span: (or metric:)"},
	} {
		_, err := Parse("r.yaml", []byte(tc.doc), Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.doc, err, tc.want)
		}
	}
}

// TestRegoSourceSeries checks that policies see a source's labels and an
// argument metric's kind and values.
func TestRegoSourceSeries(t *testing.T) {
	cfg, err := writePolicy(t, `package spanwatch

alerts contains {"labels": {"alertname": "Bad", "route": s.span}} if {
	some s in input.series
	s.labels.status == "503"
}

alerts contains {"labels": {"alertname": "Drain", "sum": sprintf("%d", [s.sum])}} if {
	some s in input.series
	s.kind == "metric"
	s.sum < -5
	s.min == -3
}
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := Input(&snapshot.Snapshot{Series: []snapshot.Series{
		{Span: "GET /a", Count: 5, SourceLabels: map[string]string{"status": "503"}},
		{Span: "GET /b", Count: 5, SourceLabels: map[string]string{"status": "200"}},
		{Kind: snapshot.KindMetric, Span: "queue_delta", Count: 10, Sum: -6, Min: -3, Max: 3},
	}})
	got, err := cfg.Policies[0].Eval(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range got {
		names = append(names, a.Labels["alertname"]+":"+a.Labels["route"]+a.Labels["sum"])
	}
	if strings.Join(names, " ") != "Bad:GET /a Drain:-6" && strings.Join(names, " ") != "Drain:-6 Bad:GET /a" {
		t.Errorf("alerts %v, want Bad:GET /a and Drain:-6", names)
	}
}
