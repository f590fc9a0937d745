package policy

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

func TestLoadFull(t *testing.T) {
	cfg, err := LoadFile("testdata/good/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Rules) != 4 || len(cfg.Policies) != 2 || len(cfg.Budgets) != 3 {
		t.Fatalf("got %d rules, %d policies, %d budgets; want 4, 2, 3", len(cfg.Rules), len(cfg.Policies), len(cfg.Budgets))
	}
	r := cfg.Rules[0]
	if r.Name != "CheckoutSlow" || r.Kind != KindThreshold || r.For != 30*time.Second || r.KeepFiringFor != time.Minute {
		t.Errorf("rule 0 = %s %s for %v keep %v", r.Name, r.Kind, r.For, r.KeepFiringFor)
	}
	if c := r.When.Terms[0]; c.Metric != MetricP99 || c.Op != OpGT || c.Threshold != 200e6 {
		t.Errorf("rule 0 when = %+v", c)
	}
	if r.Pos.Line != 15 || r.Pos.Col != 5 {
		t.Errorf("rule 0 at %v, want line 15 col 5", r.Pos)
	}
	// Anchors and aliases work: TrafficDrop reuses ErrorsHigh's labels.
	if got := cfg.Rules[2].Labels["team"].String(); got != "web" {
		t.Errorf("aliased label team = %q, want web", got)
	}
	if len(cfg.Rules[1].When.Terms) != 2 {
		t.Errorf("ErrorsHigh has %d terms, want 2", len(cfg.Rules[1].When.Terms))
	}
	a := cfg.Rules[3].Anomaly
	if cfg.Rules[3].Kind != KindAnomaly || a.Metric != MetricP99 || a.Sensitivity != 3 || a.Warmup != DefaultWarmup || a.Alpha != DefaultAlpha || a.Direction != DirectionUp || a.MinCount != 1 {
		t.Errorf("anomaly = %+v", a)
	}
	if p := cfg.Policies[0]; p.Name != "error_budget" || p.File != "testdata/good/policies/error_budget.rego" || len(p.DataFiles) != 1 {
		t.Errorf("policy 0 = %s %s %v", p.Name, p.File, p.DataFiles)
	}
	if cfg.Policies[1].Name != "error_budget_yaml" {
		t.Errorf("policy 1 name = %s", cfg.Policies[1].Name)
	}
	wantFiles := []string{"testdata/good/full.yaml", "testdata/good/policies/error_budget.rego", "testdata/good/policies/thresholds.json", "testdata/good/policies/thresholds.yaml"}
	if strings.Join(cfg.Files, ",") != strings.Join(wantFiles, ",") {
		t.Errorf("Files = %v, want %v", cfg.Files, wantFiles)
	}
	if r.Over != DefaultOver || cfg.Rules[1].Over != 5*time.Minute || cfg.Policies[0].Over != DefaultOver {
		t.Errorf("ranges %v %v %v, want the default, 5m and the default", r.Over, cfg.Rules[1].Over, cfg.Policies[0].Over)
	}
	if fmt.Sprint(cfg.ExternalLabels) != "map[cluster:eu1]" {
		t.Errorf("external labels %v", cfg.ExternalLabels)
	}
}

func TestBudgetFor(t *testing.T) {
	cfg, err := Parse("b.yaml", []byte(`
budgets:
  - {span: "db.*", budget: 50ms}
  - {span: "db.slow", budget: 2s}
  - {span: "*", budget: 10s, capture_stack: false}
  - {span: "db.query*", budget: 1s}
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		span string
		want time.Duration
	}{
		{"db.slow", 2 * time.Second},        // exact beats an earlier glob
		{"db.query", 50 * time.Millisecond}, // first glob in file order wins
		{"checkout", 10 * time.Second},
	} {
		got, ok := cfg.BudgetFor(tc.span)
		if !ok || got != tc.want {
			t.Errorf("BudgetFor(%q) = %v, %v; want %v", tc.span, got, ok, tc.want)
		}
	}
	if b := cfg.BudgetEntry("checkout"); b.CaptureStack || !b.Alert {
		t.Errorf("catch-all entry capture=%v alert=%v", b.CaptureStack, b.Alert)
	}
	empty, err := Parse("e.yaml", nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := empty.BudgetFor("x"); ok {
		t.Error("empty config has a budget")
	}
	var nilCfg *Config
	if _, ok := nilCfg.BudgetFor("x"); ok {
		t.Error("nil config has a budget")
	}
}

func TestParseEmpty(t *testing.T) {
	for _, src := range []string{"", "# only a comment\n", "---\n", "~\n", "rules:\n", "rules: []\npolicies: []\nbudgets: []\n"} {
		cfg, err := Parse("x.yaml", []byte(src), Options{})
		if err != nil {
			t.Errorf("Parse(%q): %v", src, err)
			continue
		}
		if len(cfg.Rules)+len(cfg.Policies)+len(cfg.Budgets) != 0 {
			t.Errorf("Parse(%q) found rules", src)
		}
	}
}

func TestMergeKeys(t *testing.T) {
	cfg, err := Parse("m.yaml", []byte(`
rules:
  - &base
    name: Base
    span: checkout
    when: p99 > 1s
    for: 1m
  - <<: *base
    name: Derived
    when: p99 > 2s
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Rules[1]
	if d.Name != "Derived" || d.For != time.Minute || d.When.Terms[0].Threshold != 2e9 || d.Match.Span.String() != "checkout" {
		t.Errorf("derived rule = %s for %v threshold %v span %v", d.Name, d.For, d.When.Terms[0].Threshold, d.Match.Span)
	}
}

func TestParseFS(t *testing.T) {
	fsys := fstest.MapFS{
		"conf/rules.yaml":  {Data: []byte("policies:\n  - file: p/slow.rego\n    data: p/d.json\n")},
		"conf/p/slow.rego": {Data: []byte("package spanwatch\n\nalerts contains {\"labels\": {\"alertname\": \"Slow\", \"span\": s.span}} if {\n\tsome s in input.series\n\ts.p99_ns > data.limit_ns\n}\n")},
		"conf/p/d.json":    {Data: []byte(`{"limit_ns": 1000}`)},
	}
	data, _ := fsys.ReadFile("conf/rules.yaml")
	cfg, err := Parse("conf/rules.yaml", data, Options{FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Policies) != 1 || cfg.Policies[0].File != "conf/p/slow.rego" {
		t.Fatalf("policies = %+v", cfg.Policies)
	}
	if len(cfg.Files) != 0 {
		t.Errorf("Files = %v: nothing on disk to watch", cfg.Files)
	}
	got, err := cfg.Policies[0].Eval(t.Context(), Input(&snapshot.Snapshot{Series: []snapshot.Series{{Span: "a", P99Ns: 999}, {Span: "b", P99Ns: 1001}}}))
	if err != nil || len(got) != 1 || got[0].Labels["span"] != "b" {
		t.Errorf("eval = %+v, %v", got, err)
	}
}

func TestRuleExpand(t *testing.T) {
	cfg, err := Parse("t.yaml", []byte(`
rules:
  - name: Slow
    when: p99 > 200ms
    labels: {severity: "{{ if gt .RawValue 1e9 }}page{{ else }}ticket{{ end }}", team: payments}
    annotations:
      summary: "{{ .Labels.span }} p99 is {{ .Value }} (threshold {{ .Threshold }}), severity {{ .Labels.severity }}"
      missing: "[{{ .Labels.nope }}]"
      mean: "{{ duration .Series.SumNs }} {{ upper .Metric }}"
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := testSeries()
	s.P99Ns = 2e9
	v := MetricP99.Value(s)
	data := &TemplateData{Labels: s.Labels(), Value: MetricP99.Format(v), RawValue: v, Threshold: "200ms", Metric: "p99", Series: s}
	labels, ann, err := cfg.Rules[0].Expand(data)
	if err != nil {
		t.Fatal(err)
	}
	if labels["alertname"] != "Slow" || labels["severity"] != "page" || labels["span"] != "checkout" || labels["team"] != "payments" {
		t.Errorf("labels = %v", labels)
	}
	want := map[string]string{
		"summary": "checkout p99 is 2s (threshold 200ms), severity page",
		"missing": "[]",
		"mean":    "5s P99",
	}
	for k, w := range want {
		if ann[k] != w {
			t.Errorf("annotation %s = %q, want %q", k, ann[k], w)
		}
	}
}

func TestFileTooLarge(t *testing.T) {
	big := make([]byte, MaxFileBytes+1)
	_, err := Parse("big.yaml", big, Options{})
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err = %v", err)
	}
}

func TestMergedLabels(t *testing.T) {
	cfg, err := Parse("m.yaml", []byte(`
rules:
  - name: A
    when: count > 1
    labels: &common {team: payments, severity: ticket}
  - name: B
    when: count > 2
    labels:
      <<: *common
      severity: page
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Rules[1].Labels
	if len(l) != 2 || l["team"].String() != "payments" || l["severity"].String() != "page" {
		t.Errorf("merged labels = %v", l)
	}
}
