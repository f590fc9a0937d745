package ruletest

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/detector"
	"github.com/spanwatch/spanwatch/internal/duration"
	"github.com/spanwatch/spanwatch/policy"
	"github.com/spanwatch/spanwatch/snapshot"
)

//go:embed schema.json
var schema []byte

// Schema returns the JSON Schema of the test file format.
func Schema() []byte { return bytes.Clone(schema) }

// File is a test file.
type File struct {
	RuleFile string     `yaml:"rule_file"`
	Interval string     `yaml:"interval"`
	Tests    []TestCase `yaml:"tests"`
}

// A TestCase is one sequence of steps with its expectations.
type TestCase struct {
	Name     string   `yaml:"name"`
	Start    string   `yaml:"start"`
	Interval string   `yaml:"interval"`
	Steps    []Step   `yaml:"steps"`
	Expect   []Expect `yaml:"expect"`
}

// A Step is one or more snapshots.
type Step struct {
	Series   []Series  `yaml:"series"`
	Overruns []Overrun `yaml:"overruns"`
	File     string    `yaml:"file"`
	Repeat   int       `yaml:"repeat"`
}

// Series is a snapshot.Series written for people: durations as "250ms".
type Series struct {
	Span        string   `yaml:"span"`
	CgroupID    uint64   `yaml:"cgroup_id"`
	Cgroup      string   `yaml:"cgroup"`
	ContainerID string   `yaml:"container_id"`
	PodUID      string   `yaml:"pod_uid"`
	Unit        string   `yaml:"unit"`
	Namespace   string   `yaml:"namespace"`
	Pod         string   `yaml:"pod"`
	Container   string   `yaml:"container"`
	Process     string   `yaml:"process"`
	Count       uint64   `yaml:"count"`
	Rate        *float64 `yaml:"rate"`
	Errors      uint64   `yaml:"errors"`
	ErrorRatio  *float64 `yaml:"error_ratio"`
	P50         string   `yaml:"p50"`
	P90         string   `yaml:"p90"`
	P99         string   `yaml:"p99"`
	Max         string   `yaml:"max"`
	Mean        string   `yaml:"mean"`
	// Latencies are the window's spans by duration ("10ms": 98): the
	// series gets a real histogram, and its count, sum, extremes and
	// quantiles from it, the way the collector makes them, so it merges
	// exactly over a rule's range. A series given by its quantiles alone
	// has no histogram; over a range of several windows, each such window
	// contributes its own quantile as a bound (the range's is the largest).
	Latencies  map[string]uint64 `yaml:"latencies"`
	OverBudget uint64            `yaml:"over_budget"`
	Budget     string            `yaml:"budget"`
}

// Overrun is a snapshot.Overrun written for people.
type Overrun struct {
	Span        string   `yaml:"span"`
	PID         uint32   `yaml:"pid"`
	TID         uint32   `yaml:"tid"`
	Comm        string   `yaml:"comm"`
	ContainerID string   `yaml:"container_id"`
	PodUID      string   `yaml:"pod_uid"`
	Unit        string   `yaml:"unit"`
	Namespace   string   `yaml:"namespace"`
	Pod         string   `yaml:"pod"`
	Container   string   `yaml:"container"`
	Cgroup      string   `yaml:"cgroup"`
	Duration    string   `yaml:"duration"`
	Budget      string   `yaml:"budget"`
	TraceID     string   `yaml:"trace_id"`
	SpanID      string   `yaml:"span_id"`
	Stack       []string `yaml:"stack"`
}

// Expect is what should be alerting after one step.
type Expect struct {
	At     string          `yaml:"at"`
	Step   *int            `yaml:"step"`
	Alerts []ExpectedAlert `yaml:"alerts"`
}

// ExpectedAlert is one alert.
type ExpectedAlert struct {
	Labels      map[string]string  `yaml:"labels"`
	Annotations *map[string]string `yaml:"annotations"`
	State       alert.State        `yaml:"state"`
}

// A Result is the outcome of one test case.
type Result struct {
	Name string
	// Failures are the differences found, one line each; empty on pass.
	Failures []string
}

// Passed reports whether the test case passed.
func (r Result) Passed() bool { return len(r.Failures) == 0 }

// RunFile loads a test file and runs every test case. The error is for a
// test file that cannot run at all (bad YAML, a rule file that does not
// load); failed expectations are in the results.
func RunFile(ctx context.Context, path string) ([]Result, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read test file: %w", err)
	}
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if f.RuleFile == "" {
		return nil, fmt.Errorf("%s: rule_file is missing", path)
	}
	dir := filepath.Dir(path)
	rulePath := f.RuleFile
	if !filepath.IsAbs(rulePath) {
		rulePath = filepath.Join(dir, rulePath)
	}
	cfg, err := policy.LoadFile(rulePath)
	if err != nil {
		return nil, fmt.Errorf("%s: rule file: %w", path, err)
	}
	if len(f.Tests) == 0 {
		return nil, fmt.Errorf("%s: no tests", path)
	}
	var results []Result
	for i, tc := range f.Tests {
		if tc.Name == "" {
			tc.Name = fmt.Sprintf("test %d", i)
		}
		res, err := run(ctx, cfg, dir, f.Interval, tc)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, tc.Name, err)
		}
		results = append(results, res)
	}
	return results, nil
}

var defaultStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func run(ctx context.Context, cfg *policy.Config, dir, fileInterval string, tc TestCase) (Result, error) {
	res := Result{Name: tc.Name}
	interval := 10 * time.Second
	for _, s := range []string{fileInterval, tc.Interval} {
		if s == "" {
			continue
		}
		d, err := duration.Parse(s)
		if err != nil || d <= 0 {
			return res, fmt.Errorf("interval %q: want a positive duration like 10s (units %s)", s, duration.Units)
		}
		interval = d
	}
	start := defaultStart
	if tc.Start != "" {
		t, err := time.Parse(time.RFC3339Nano, tc.Start)
		if err != nil {
			return res, fmt.Errorf("start %q: want an RFC 3339 time", tc.Start)
		}
		start = t
	}
	snaps, err := expandSteps(dir, tc.Steps, start, interval)
	if err != nil {
		return res, err
	}
	want := map[int]Expect{}
	for _, e := range tc.Expect {
		idx, err := e.index(start, interval, snaps)
		if err != nil {
			return res, err
		}
		if _, dup := want[idx]; dup {
			return res, fmt.Errorf("two expectations for step %d", idx)
		}
		want[idx] = e
	}

	// No node label: a test passes on every machine. The rule file's
	// external_labels still apply.
	d := detector.New(detector.Config{ExternalLabels: map[string]string{}})
	d.SetRules(cfg)
	for i, s := range snaps {
		var got []*alert.Alert
		for _, o := range s.Overruns {
			a, err := d.Overrun(ctx, o)
			if err != nil {
				return res, err
			}
			if a != nil {
				got = append(got, a)
			}
		}
		changed, err := d.Evaluate(ctx, s)
		if err != nil {
			return res, err
		}
		e, ok := want[i]
		if !ok {
			continue
		}
		got = append(got, d.Alerts()...)
		for _, a := range changed {
			if a.State == alert.StateResolved {
				got = append(got, a)
			}
		}
		where := fmt.Sprintf("at %s (step %d)", s.Time.Sub(start), i)
		res.Failures = append(res.Failures, compare(where, e.Alerts, got)...)
	}
	return res, nil
}

func (e Expect) index(start time.Time, interval time.Duration, snaps []*snapshot.Snapshot) (int, error) {
	switch {
	case e.Step != nil && e.At != "":
		return 0, fmt.Errorf("an expectation has both step and at")
	case e.Step != nil:
		if *e.Step < 0 || *e.Step >= len(snaps) {
			return 0, fmt.Errorf("expectation for step %d, but the test has steps 0 to %d", *e.Step, len(snaps)-1)
		}
		return *e.Step, nil
	case e.At != "":
		at, err := duration.Parse(e.At)
		if err != nil {
			return 0, fmt.Errorf("expectation at %q: want a duration from the start, like 30s", e.At)
		}
		for i, s := range snaps {
			if s.Time.Sub(start) == at {
				return i, nil
			}
		}
		return 0, fmt.Errorf("expectation at %s: no step is evaluated then (steps are %s apart)", e.At, interval)
	}
	return 0, fmt.Errorf("an expectation needs step or at")
}

// expandSteps turns steps into snapshots at start, start+interval, ...
// Snapshots from files keep their series but take the step's time, so a
// recording replays on the test's clock.
func expandSteps(dir string, steps []Step, start time.Time, interval time.Duration) ([]*snapshot.Snapshot, error) {
	var out []*snapshot.Snapshot
	next := func(s *snapshot.Snapshot) {
		t := start.Add(time.Duration(len(out)) * interval)
		shift := time.Duration(0)
		if !s.Time.IsZero() {
			shift = t.Sub(s.Time)
		}
		s.Time = t
		s.WindowNs = int64(interval)
		for i := range s.Overruns {
			if s.Overruns[i].Time.IsZero() {
				s.Overruns[i].Time = t
			} else {
				s.Overruns[i].Time = s.Overruns[i].Time.Add(shift)
			}
		}
		out = append(out, s)
	}
	for i, st := range steps {
		repeat := st.Repeat
		if repeat == 0 {
			repeat = 1
		}
		if repeat < 0 || repeat > 100000 {
			return nil, fmt.Errorf("step %d: repeat %d out of range", i, repeat)
		}
		if st.File != "" {
			if len(st.Series) > 0 || len(st.Overruns) > 0 {
				return nil, fmt.Errorf("step %d: file and inline series are exclusive", i)
			}
			p := st.File
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			recorded, err := readSnapshots(p)
			if err != nil {
				return nil, fmt.Errorf("step %d: %w", i, err)
			}
			for r := 0; r < repeat; r++ {
				for _, s := range recorded {
					c := *s
					c.Series = append([]snapshot.Series(nil), s.Series...)
					c.Overruns = append([]snapshot.Overrun(nil), s.Overruns...)
					next(&c)
				}
			}
			continue
		}
		for r := 0; r < repeat; r++ {
			s := &snapshot.Snapshot{Version: snapshot.Version}
			for j, in := range st.Series {
				ser, err := in.series(interval)
				if err != nil {
					return nil, fmt.Errorf("step %d: series %d: %w", i, j, err)
				}
				s.Series = append(s.Series, ser)
			}
			for j, in := range st.Overruns {
				o, err := in.overrun()
				if err != nil {
					return nil, fmt.Errorf("step %d: overrun %d: %w", i, j, err)
				}
				s.Overruns = append(s.Overruns, o)
			}
			next(s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no steps")
	}
	return out, nil
}

// readSnapshots reads one or more concatenated JSON snapshots, joining
// the parts of a snapshot --output split over several lines.
func readSnapshots(path string) ([]*snapshot.Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read snapshots: %w", err)
	}
	defer f.Close()
	// snapshot.Reader decodes every version of the form (a recording
	// made by an older spanwatch keeps working) and refuses unknown
	// fields.
	r := snapshot.NewReader(f)
	var out []*snapshot.Snapshot
	for {
		s, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%s: snapshot %d: %w", path, len(out), err)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no snapshots", path)
	}
	return out, nil
}

func dur(s, what string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	d, err := duration.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want a duration like 250ms (units %s)", what, s, duration.Units)
	}
	return uint64(d), nil
}

func (in Series) series(window time.Duration) (snapshot.Series, error) {
	s := snapshot.Series{
		Span: in.Span, CgroupID: in.CgroupID, Identity: snapshot.Identity{Cgroup: in.Cgroup, ContainerID: in.ContainerID, PodUID: in.PodUID, Unit: in.Unit, Namespace: in.Namespace, Pod: in.Pod, Container: in.Container, Process: in.Process}, Count: in.Count, Errors: in.Errors, OverBudget: in.OverBudget,
	}
	if in.Span == "" {
		return s, fmt.Errorf("span is missing")
	}
	var err error
	for _, f := range []struct {
		dst  *uint64
		src  string
		name string
	}{{&s.P50Ns, in.P50, "p50"}, {&s.P90Ns, in.P90, "p90"}, {&s.P99Ns, in.P99, "p99"}, {&s.MaxNs, in.Max, "max"}, {&s.BudgetNs, in.Budget, "budget"}} {
		if *f.dst, err = dur(f.src, f.name); err != nil {
			return s, err
		}
	}
	mean, err := dur(in.Mean, "mean")
	if err != nil {
		return s, err
	}
	s.SumNs = mean * s.Count
	if len(in.Latencies) > 0 {
		if err := in.latencies(&s); err != nil {
			return s, err
		}
	}
	s.SetRates(window)
	if in.Rate != nil {
		s.Rate = *in.Rate
	}
	if in.ErrorRatio != nil {
		s.ErrorRatio = *in.ErrorRatio
	}
	return s, nil
}

// latencies sets the series' histogram and everything that follows from
// it from the spans' durations.
func (in Series) latencies(s *snapshot.Series) error {
	if in.P50 != "" || in.P90 != "" || in.P99 != "" || in.Max != "" || in.Mean != "" {
		return fmt.Errorf("latencies and p50, p90, p99, max or mean are exclusive: the quantiles come from the latencies")
	}
	var n uint64
	s.MinNs, s.MaxNs, s.SumNs, s.Histogram = math.MaxUint64, 0, 0, nil
	for k, c := range in.Latencies {
		d, err := dur(k, "latency")
		if err != nil {
			return err
		}
		if c == 0 {
			return fmt.Errorf("latencies: %s: a count of 0 spans", k)
		}
		n += c
		s.SumNs += d * c
		s.MinNs, s.MaxNs = min(s.MinNs, d), max(s.MaxNs, d)
		s.Histogram = snapshot.MergeHistogram(s.Histogram, []snapshot.Bucket{snapshot.DurationBucket(d, c)})
	}
	if in.Count != 0 && in.Count != n {
		return fmt.Errorf("count %d, but the latencies add up to %d spans", in.Count, n)
	}
	s.Count = n
	s.SetHistogramQuantiles()
	return nil
}

func (in Overrun) overrun() (snapshot.Overrun, error) {
	o := snapshot.Overrun{
		Span: in.Span, PID: in.PID, TID: in.TID, Comm: in.Comm, Identity: snapshot.Identity{ContainerID: in.ContainerID, PodUID: in.PodUID, Unit: in.Unit, Namespace: in.Namespace, Pod: in.Pod, Container: in.Container, Cgroup: in.Cgroup}, TraceID: in.TraceID, SpanID: in.SpanID,
	}
	if in.Span == "" {
		return o, fmt.Errorf("span is missing")
	}
	var err error
	if o.DurationNs, err = dur(in.Duration, "duration"); err != nil {
		return o, err
	}
	if o.BudgetNs, err = dur(in.Budget, "budget"); err != nil {
		return o, err
	}
	for _, fn := range in.Stack {
		o.UserStack = append(o.UserStack, snapshot.Frame{Function: fn})
	}
	return o, nil
}

// compare diffs expected and actual alerts, matched by labels.
func compare(where string, want []ExpectedAlert, got []*alert.Alert) []string {
	// As promtool compares firing alerts only, a pending alert no
	// expectation names is not unexpected unless the expectation lists
	// pending alerts: a rule whose "for" has not passed yet is not a
	// failure. One it names is compared, state included.
	pendingCounts := slices.ContainsFunc(want, func(w ExpectedAlert) bool { return w.State == alert.StatePending })
	var fails []string
	used := make([]bool, len(got))
	find := func(labels map[string]string) *alert.Alert {
		fp := alert.Fingerprint(labels)
		for i, a := range got {
			if !used[i] && alert.Fingerprint(a.Labels) == fp {
				used[i] = true
				return a
			}
		}
		return nil
	}
	var missing []ExpectedAlert
	for _, w := range want {
		a := find(w.Labels)
		if a == nil {
			missing = append(missing, w)
			continue
		}
		if w.State != "" && a.State != w.State {
			fails = append(fails, fmt.Sprintf("%s: alert %s: state %s, want %s", where, labelString(w.Labels), a.State, w.State))
		}
		if w.Annotations != nil {
			for _, k := range unionKeys(*w.Annotations, a.Annotations) {
				wv, wok := (*w.Annotations)[k]
				gv, gok := a.Annotations[k]
				switch {
				case !gok:
					fails = append(fails, fmt.Sprintf("%s: alert %s: annotation %s missing, want %q", where, labelString(w.Labels), k, wv))
				case !wok:
					fails = append(fails, fmt.Sprintf("%s: alert %s: unexpected annotation %s=%q", where, labelString(w.Labels), k, gv))
				case wv != gv:
					fails = append(fails, fmt.Sprintf("%s: alert %s: annotation %s:\n      got  %q\n      want %q", where, labelString(w.Labels), k, gv, wv))
				}
			}
		}
	}
	// A missing alert and an unexpected one of the same name are most
	// often one alert with a label wrong: name the labels that differ.
	for _, w := range missing {
		state := w.State
		if state == "" {
			state = "firing"
		}
		msg := fmt.Sprintf("%s: missing %s alert %s", where, state, labelString(w.Labels))
		best, bestDiff := -1, []string(nil)
		for i, a := range got {
			if used[i] || a.Labels["alertname"] != w.Labels["alertname"] {
				continue
			}
			if d := labelDiff(w.Labels, a.Labels); best < 0 || len(d) < len(bestDiff) {
				best, bestDiff = i, d
			}
		}
		if best >= 0 {
			used[best] = true
			msg += fmt.Sprintf("; the %s alert %s differs in %s", got[best].State, labelString(got[best].Labels), strings.Join(bestDiff, ", "))
		}
		fails = append(fails, msg)
	}
	var extra []*alert.Alert
	for i, a := range got {
		if !used[i] && (pendingCounts || a.State != alert.StatePending) {
			extra = append(extra, a)
		}
	}
	sort.Slice(extra, func(i, j int) bool { return labelString(extra[i].Labels) < labelString(extra[j].Labels) })
	for _, a := range extra {
		fails = append(fails, fmt.Sprintf("%s: unexpected %s alert %s", where, a.State, labelString(a.Labels)))
	}
	return fails
}

// labelDiff names each label in which got differs from want, with both
// values: `container="web-2", want "web-1"`, `pod="p" not expected`,
// `unit missing, want "shop.service"`.
func labelDiff(want, got map[string]string) []string {
	var d []string
	for _, k := range unionKeys(want, got) {
		wv, wok := want[k]
		gv, gok := got[k]
		switch {
		case !gok:
			d = append(d, fmt.Sprintf("%s missing, want %q", k, wv))
		case !wok:
			d = append(d, fmt.Sprintf("%s=%q not expected", k, gv))
		case wv != gv:
			d = append(d, fmt.Sprintf("%s=%q, want %q", k, gv, wv))
		}
	}
	return d
}

func unionKeys(a, b map[string]string) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range []map[string]string{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}

func labelString(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, l[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
