package detector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/policy"
	"github.com/spanwatch/spanwatch/snapshot"
)

// recorder is a Notifier that keeps what it was given.
type recorder struct {
	mu     sync.Mutex
	alerts []*alert.Alert
	calls  int
	err    error
}

func (r *recorder) Notify(ctx context.Context, alerts ...*alert.Alert) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	r.alerts = append(r.alerts, alerts...)
	return r.err != nil, r.err
}

func (r *recorder) take() []*alert.Alert {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.alerts
	r.alerts = nil
	return out
}

func mustParse(t testing.TB, src string) *policy.Config {
	t.Helper()
	cfg, err := policy.Parse("test.yaml", []byte(src), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func snap(step int, series ...snapshot.Series) *snapshot.Snapshot {
	return &snapshot.Snapshot{Version: snapshot.Version, Time: t0.Add(time.Duration(step) * 10 * time.Second), WindowNs: 10e9, Series: series}
}

func checkout(p99 time.Duration) snapshot.Series {
	return snapshot.Series{Span: "checkout", Identity: snapshot.Identity{Container: "web-1"}, CgroupID: 42, Count: 100, Rate: 10, P99Ns: uint64(p99)}
}

// states renders changed alerts as "name:state" for comparison.
func states(alerts []*alert.Alert) string {
	var s []string
	for _, a := range alerts {
		s = append(s, a.Labels["alertname"]+":"+string(a.State))
	}
	return strings.Join(s, ",")
}

func TestLifecycle(t *testing.T) {
	const rules = `
rules:
  - name: Slow
    span: checkout
    when: p99 > 200ms
    over: 0s
    for: 30s
    keep_firing_for: %s
    annotations: {summary: "p99 {{ .Value }}"}
`
	ms := time.Millisecond
	type step struct {
		p99     time.Duration // 0: the series is absent
		changed string
		sent    string
	}
	for _, tc := range []struct {
		name  string
		keep  string
		steps []step
	}{
		{"exact threshold does not hold", "0s", []step{
			{200 * ms, "", ""}, {200 * ms, "", ""}, {200 * ms, "", ""}, {200 * ms, "", ""},
		}},
		{"pending then firing then resolved", "0s", []step{
			{201 * ms, "Slow:pending", ""},
			{300 * ms, "", ""},
			{300 * ms, "", ""},
			{300 * ms, "Slow:firing", "Slow:firing"}, // 30s after activation
			{300 * ms, "", ""},
			{100 * ms, "Slow:resolved", "Slow:resolved"},
			{100 * ms, "", ""},
		}},
		{"pending cleared before for", "0s", []step{
			{300 * ms, "Slow:pending", ""},
			{300 * ms, "", ""},
			{100 * ms, "Slow:inactive", ""},
			{300 * ms, "Slow:pending", ""},
		}},
		{"series disappears", "0s", []step{
			{300 * ms, "Slow:pending", ""}, {300 * ms, "", ""}, {300 * ms, "", ""},
			{300 * ms, "Slow:firing", "Slow:firing"},
			{0, "Slow:resolved", "Slow:resolved"},
		}},
		// keep_firing_for counts from the first evaluation at which the
		// rule no longer holds, as in Prometheus.
		{"keep_firing_for bridges a gap", "25s", []step{
			{300 * ms, "Slow:pending", ""}, {300 * ms, "", ""}, {300 * ms, "", ""},
			{300 * ms, "Slow:firing", "Slow:firing"},
			{100 * ms, "", ""},                           // stops holding: kept
			{300 * ms, "", ""},                           // holds again: still the same alert
			{100 * ms, "", ""},                           // stops holding again: 0s
			{100 * ms, "", ""},                           // 10s
			{100 * ms, "", ""},                           // 20s
			{100 * ms, "Slow:resolved", "Slow:resolved"}, // 30s >= 25s
		}},
		{"keep_firing_for after disappearing", "15s", []step{
			{300 * ms, "Slow:pending", ""}, {300 * ms, "", ""}, {300 * ms, "", ""},
			{300 * ms, "Slow:firing", "Slow:firing"},
			{0, "", ""},
			{0, "", ""},
			{0, "Slow:resolved", "Slow:resolved"},
		}},
		{"keep_firing_for shorter than the interval keeps one evaluation", "1s", []step{
			{300 * ms, "Slow:pending", ""}, {300 * ms, "", ""}, {300 * ms, "", ""},
			{300 * ms, "Slow:firing", "Slow:firing"},
			{100 * ms, "", ""},
			{100 * ms, "Slow:resolved", "Slow:resolved"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			d := New(Config{Notifier: rec})
			d.SetRules(mustParse(t, fmt.Sprintf(rules, tc.keep)))
			var startsAt time.Time
			for i, st := range tc.steps {
				var s *snapshot.Snapshot
				if st.p99 == 0 {
					s = snap(i)
				} else {
					s = snap(i, checkout(st.p99))
				}
				changed, err := d.Evaluate(context.Background(), s)
				if err != nil {
					t.Fatal(err)
				}
				if got := states(changed); got != st.changed {
					t.Errorf("step %d: changed %q, want %q", i, got, st.changed)
				}
				sent := rec.take()
				if got := states(sent); got != st.sent {
					t.Errorf("step %d: sent %q, want %q", i, got, st.sent)
				}
				for _, a := range sent {
					// Firing: valid for 4 x max(resend 1m, interval 10s).
					if a.State == alert.StateFiring && !a.EndsAt.Equal(s.Time.Add(4*time.Minute)) {
						t.Errorf("step %d: sent firing alert with EndsAt %v, want %v", i, a.EndsAt, s.Time.Add(4*time.Minute))
					}
				}
				for _, a := range changed {
					// Pending: since the condition first held; firing and
					// after: since it fired (Prometheus' FiredAt).
					if a.State == alert.StatePending || a.State == alert.StateFiring {
						startsAt = s.Time
					}
					if !a.StartsAt.Equal(startsAt) {
						t.Errorf("step %d: %s StartsAt %v, want %v", i, a.State, a.StartsAt, startsAt)
					}
					if a.State == alert.StateResolved && !a.EndsAt.Equal(s.Time) {
						t.Errorf("step %d: EndsAt %v, want %v", i, a.EndsAt, s.Time)
					}
					if a.Fingerprint != alert.Fingerprint(a.Labels) {
						t.Errorf("fingerprint %s does not match labels %v", a.Fingerprint, a.Labels)
					}
				}
			}
		})
	}
}

func TestAlertContent(t *testing.T) {
	rec := &recorder{}
	d := New(Config{Notifier: rec})
	d.SetRules(mustParse(t, `
rules:
  - name: Slow
    span: checkout
    when: p99 > 200ms
    labels: {severity: page}
    annotations: {summary: "{{ .Labels.span }} in {{ .Labels.container }}: p99 {{ .Value }} > {{ .Threshold }}"}
`))
	changed, err := d.Evaluate(context.Background(), snap(0, checkout(250*time.Millisecond), snapshot.Series{Span: "other", P99Ns: 1e9}))
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 1 {
		t.Fatalf("changed = %d alerts, want 1", len(changed))
	}
	a := changed[0]
	wantLabels := map[string]string{"alertname": "Slow", "span": "checkout", "container": "web-1", "cgroup_id": "42", "severity": "page", "node": NodeName()}
	if fmt.Sprint(a.Labels) != fmt.Sprint(wantLabels) {
		t.Errorf("labels = %v, want %v", a.Labels, wantLabels)
	}
	if a.Annotations["summary"] != "checkout in web-1: p99 250ms > 200ms" || a.Value != "250ms" || a.State != alert.StateFiring {
		t.Errorf("alert = %+v", a)
	}
	// The detector's copy is not shared with the caller.
	a.Labels["alertname"] = "Mutated"
	if got := d.Alerts(); len(got) != 1 || got[0].Name() != "Slow" {
		t.Errorf("Alerts() = %v", got)
	}
}

func TestPerSeriesAlerts(t *testing.T) {
	d := New(Config{})
	d.SetRules(mustParse(t, "rules:\n  - {name: Errors, when: error_ratio >= 5%}\n"))
	series := []snapshot.Series{
		{Span: "a", CgroupID: 1, Count: 100, Errors: 5, ErrorRatio: 0.05},
		{Span: "a", CgroupID: 2, Count: 100, Errors: 1, ErrorRatio: 0.01},
		{Span: "b", CgroupID: 1, Count: 10, Errors: 10, ErrorRatio: 1},
		{Span: "c", CgroupID: 1}, // empty window: error ratio 0
	}
	changed, _ := d.Evaluate(context.Background(), snap(0, series...))
	var got []string
	for _, a := range changed {
		got = append(got, a.Labels["span"]+"/"+a.Labels["cgroup_id"])
	}
	if strings.Join(sortStr(got), ",") != "a/1,b/1" {
		t.Errorf("fired for %v, want a/1 and b/1", got)
	}
	// a/1 goes away, b/1 stays: exactly one resolution.
	changed, _ = d.Evaluate(context.Background(), snap(1, series[1:]...))
	if states(changed) != "Errors:resolved" || changed[0].Labels["span"] != "a" {
		t.Errorf("changed = %v", changed)
	}
	if st := d.Stats(); st.Firing != 1 || st.Pending != 0 || st.RuleEvaluations != 2 {
		t.Errorf("stats = %+v", st)
	}
}

func sortStr(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

func TestReloadKeepsState(t *testing.T) {
	rec := &recorder{}
	d := New(Config{Notifier: rec})
	d.SetRules(mustParse(t, `
rules:
  - {name: Slow, span: checkout, when: p99 > 200ms, for: 20s}
  - {name: Busy, span: checkout, when: rate > 5/s}
`))
	d.Evaluate(context.Background(), snap(0, checkout(300*time.Millisecond)))
	d.Evaluate(context.Background(), snap(1, checkout(300*time.Millisecond)))
	rec.take()
	// Reload: Slow changes its threshold but keeps its name; Busy is gone.
	d.SetRules(mustParse(t, "rules:\n  - {name: Slow, span: checkout, when: p99 > 250ms, for: 20s}\n"))
	changed, _ := d.Evaluate(context.Background(), snap(2, checkout(300*time.Millisecond)))
	// Slow was pending since step 0: it fires at step 2 (20s), not 20s after the reload.
	if got := states(changed); got != "Slow:firing,Busy:resolved" {
		t.Errorf("after reload: changed %q", got)
	}
	if got := states(rec.take()); got != "Slow:firing,Busy:resolved" {
		t.Errorf("after reload: sent %q", got)
	}
}

func TestAnomalyRuleAndReload(t *testing.T) {
	const rules = `
rules:
  - name: CheckoutAnomalous
    span: checkout
    anomaly: {metric: p99, sensitivity: 3, warmup: 5}
    over: 0s
    annotations: {summary: "p99 {{ .Value }}, baseline {{ .Threshold }}"}
`
	d := New(Config{})
	d.SetRules(mustParse(t, rules))
	ctx := context.Background()
	step := 0
	for _, p := range []time.Duration{100, 102, 98, 101, 99, 100, 103, 97} {
		changed, _ := d.Evaluate(ctx, snap(step, checkout(p*time.Millisecond)))
		if len(changed) != 0 {
			t.Fatalf("step %d: fired during normal traffic: %v", step, states(changed))
		}
		step++
	}
	// Empty windows neither fire nor teach the baseline (min_count 1).
	empty := checkout(0)
	empty.Count = 0
	for i := 0; i < 3; i++ {
		if changed, _ := d.Evaluate(ctx, snap(step, empty)); len(changed) != 0 {
			t.Fatalf("empty window changed %v", states(changed))
		}
		step++
	}
	// A reload with the same rule keeps the learned baseline: the spike
	// fires at once instead of starting a new warm-up.
	d.SetRules(mustParse(t, rules))
	changed, _ := d.Evaluate(ctx, snap(step, checkout(400*time.Millisecond)))
	if states(changed) != "CheckoutAnomalous:firing" {
		t.Fatalf("spike after reload: %q", states(changed))
	}
	if s := changed[0].Annotations["summary"]; !strings.HasPrefix(s, "p99 400ms, baseline 100") {
		t.Errorf("summary = %q", s)
	}
	step++
	changed, _ = d.Evaluate(ctx, snap(step, checkout(100*time.Millisecond)))
	if states(changed) != "CheckoutAnomalous:resolved" {
		t.Errorf("back to normal: %q", states(changed))
	}
	if st := d.Stats(); st.Baselines != 1 {
		t.Errorf("baselines = %d, want 1", st.Baselines)
	}
	// Removing the rule drops its baselines.
	d.SetRules(mustParse(t, "rules: []\n"))
	d.Evaluate(ctx, snap(step+1, checkout(100*time.Millisecond)))
	if st := d.Stats(); st.Baselines != 0 {
		t.Errorf("baselines after removing the rule = %d", st.Baselines)
	}
}

func TestTemplateErrorKeepsState(t *testing.T) {
	var reported []string
	d := New(Config{OnRuleError: func(rule string, err error) { reported = append(reported, rule+": "+err.Error()) }})
	d.SetRules(mustParse(t, "rules:\n  - {name: Slow, when: p99 > 1ms, annotations: {a: \"{{ .Series.Span }}\"}}\n"))
	d.Evaluate(context.Background(), snap(0, checkout(5*time.Millisecond)))
	// The same rule name with a template that fails at execution time.
	d.SetRules(mustParse(t, "rules:\n  - {name: Slow, when: p99 > 1ms, annotations: {a: \"{{ .Series.Nope }}\"}}\n"))
	changed, err := d.Evaluate(context.Background(), snap(1, checkout(5*time.Millisecond)))
	if err != nil || len(changed) != 0 {
		t.Errorf("a failing rule changed state: %v", states(changed))
	}
	if st := d.Stats(); st.RuleErrors != 1 || st.Firing != 1 {
		t.Errorf("stats = %+v", st)
	}
	if len(reported) != 1 || !strings.Contains(reported[0], "Slow: rule Slow: annotation a: template: a:1:10: executing \"a\" at <.Series.Nope>: can't evaluate field Nope") {
		t.Errorf("OnRuleError got %q", reported)
	}
}

func writeFiles(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestPolicyTimeoutIsReported(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"rules.yaml": "rules:\n  - {name: Slow, when: p99 > 1ms}\npolicies:\n  - file: slow.rego\n  - file: fast.rego\n",
		"slow.rego": `package spanwatch

alerts contains {"labels": {"alertname": "Never"}} if {
	some x in numbers.range(1, 1000)
	some y in numbers.range(1, 1000)
	some z in numbers.range(1, 1000)
	x * y * z < 0
}
`,
		"fast.rego": `package spanwatch

alerts contains {"labels": {"alertname": "Many", "span": s.span}} if {
	some s in input.series
	s.count > 10
}
`,
	})
	cfg, err := policy.LoadFile(filepath.Join(dir, "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d := New(Config{PolicyTimeout: 30 * time.Millisecond})
	d.SetRules(cfg)
	start := time.Now()
	changed, err := d.Evaluate(context.Background(), snap(0, checkout(5*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("evaluation took %v with a 30ms policy limit", el)
	}
	if got := states(changed); got != "Slow:firing,Many:firing" {
		t.Errorf("changed = %q: the other rule and policy must still run", got)
	}
	st := d.Stats()
	if st.PolicyTimeouts != 1 || st.PolicyErrors != 1 || st.PolicyEvaluations != 2 {
		t.Errorf("stats = %+v", st)
	}
}

func TestNotifierError(t *testing.T) {
	rec := &recorder{err: errors.New("503 from receiver")}
	d := New(Config{Notifier: rec})
	d.SetRules(mustParse(t, "rules:\n  - {name: Slow, when: p99 > 1ms}\n"))
	changed, err := d.Evaluate(context.Background(), snap(0, checkout(5*time.Millisecond)))
	if err == nil || !strings.Contains(err.Error(), "503") || len(changed) != 1 {
		t.Errorf("changed %v, err %v", states(changed), err)
	}
	if st := d.Stats(); st.NotifyErrors != 1 || st.Notified != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestResend(t *testing.T) {
	rec := &recorder{}
	d := New(Config{Notifier: rec, ResendInterval: 25 * time.Second})
	d.SetRules(mustParse(t, "rules:\n  - {name: Slow, when: p99 > 1ms}\n"))
	var sent []int
	for i := 0; i < 7; i++ {
		d.Evaluate(context.Background(), snap(i, checkout(5*time.Millisecond)))
		if n := len(rec.take()); n > 0 {
			sent = append(sent, i)
		}
	}
	if fmt.Sprint(sent) != "[0 3 6]" {
		t.Errorf("sent at steps %v, want [0 3 6]", sent)
	}
}

// TestPoliciesInParallel evaluates several policies on several workers
// over one shared input (run with -race), and checks the outputs keep
// policy order and match a sequential run.
func TestPoliciesInParallel(t *testing.T) {
	files := map[string]string{}
	conf := "policies:\n"
	for i := 0; i < 6; i++ {
		name := fmt.Sprintf("p%d.rego", i)
		files[name] = fmt.Sprintf(`package spanwatch

alerts contains {"labels": object.union(s.labels, {"alertname": "P%d"})} if {
	some s in input.series
	s.p99_ns > %d
}
`, i, i*1000000)
		conf += "  - " + name + "\n"
	}
	files["rules.yaml"] = conf
	dir := writeFiles(t, files)
	cfg, err := policy.LoadFile(filepath.Join(dir, "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var series []snapshot.Series
	for i := 0; i < 200; i++ {
		series = append(series, snapshot.Series{Span: fmt.Sprintf("s%d", i), Count: 1, P99Ns: uint64(i) * 50000})
	}
	run := func(workers int) string {
		d := New(Config{PolicyWorkers: workers})
		d.SetRules(cfg)
		changed, err := d.Evaluate(context.Background(), snap(0, series...))
		if err != nil {
			t.Fatal(err)
		}
		counts := map[string]int{}
		for _, a := range changed {
			counts[a.Name()]++
		}
		return fmt.Sprint(counts)
	}
	seq, par := run(1), run(4)
	if seq != par {
		t.Errorf("parallel %s, sequential %s", par, seq)
	}
	// s_i has p99 = i*50µs: P_k fires for i*50000 > k*1e6, i.e. i > 20k.
	if want := "map[P0:199 P1:179 P2:159 P3:139 P4:119 P5:99]"; seq != want {
		t.Errorf("alerts per policy = %s, want %s", seq, want)
	}
}

func TestPolicyFor(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"rules.yaml": "policies:\n  - {file: p.rego, over: 0s, for: 20s, keep_firing_for: 10s}\n",
		"p.rego":     "package spanwatch\n\nalerts contains {\"labels\": {\"alertname\": \"Busy\", \"span\": s.span}, \"annotations\": {\"value\": sprintf(\"%d\", [s.count])}} if {\n\tsome s in input.series\n\ts.count > 50\n}\n",
	})
	cfg, err := policy.LoadFile(filepath.Join(dir, "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d := New(Config{})
	d.SetRules(cfg)
	busy := snapshot.Series{Span: "a", Count: 100}
	var got []string
	for i, s := range [][]snapshot.Series{{busy}, {busy}, {busy}, {}, {}, {}} {
		changed, _ := d.Evaluate(context.Background(), snap(i, s...))
		got = append(got, states(changed))
		if i == 2 && (len(changed) != 1 || changed[0].Value != "100") {
			t.Errorf("firing alert value = %+v", changed)
		}
	}
	want := []string{"Busy:pending", "", "Busy:firing", "", "Busy:resolved", ""}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("states %q, want %q", got, want)
	}
}
