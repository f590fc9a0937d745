package deploy

import (
	"fmt"
	"math"
	"math/rand"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/internal/promtest"
	"github.com/spanwatch/spanwatch/metrics"
	"github.com/spanwatch/spanwatch/snapshot"
)

const (
	rulesPath     = "prometheus/spanwatch.rules.yml"
	rulesTestPath = "prometheus/spanwatch.rules.test.yml"
	dashboardPath = "grafana/spanwatch.json"
)

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("no promtool: install Debian's prometheus package (.ci/install-deps.sh does)")
	}
	return p
}

// TestRulesPromtool runs promtool's own checks of the shipped rules: the
// syntax and PromQL of every rule, then the unit tests beside them (the
// recorded values and the alerts, with their labels and annotations).
func TestRulesPromtool(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", rulesPath},
		{"test", "rules", rulesTestPath},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestRulesOnNativeHistograms loads the shipped rules into a real
// Prometheus that scrapes two exporters fed the same snapshots, one as
// native histograms and one as classic buckets (promtool's unit tests
// cannot express native histograms before Prometheus 2.44), and checks
// that the latency recording rules answer for both, the native one within
// 2% of spanwatch's own quantiles over the same spans.
func TestRulesOnNativeHistograms(t *testing.T) {
	native, err := metrics.NewExporter(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	classic, err := metrics.NewExporter(metrics.Config{NoNativeHistograms: true})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(e *metrics.Exporter) string {
		srv := httptest.NewServer(e.Handler())
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	prom := promtest.Start(t, promtest.Config{
		Targets:          map[string]string{"native": serve(native), "classic": serve(classic)},
		NativeHistograms: true,
		RuleFiles:        []string{rulesPath},
	})
	rng := rand.New(rand.NewSource(5))
	window := func(n int) (*snapshot.Snapshot, []snapshot.Bucket) {
		durs := make([]uint64, n)
		for i := range durs {
			durs[i] = uint64(float64(30*time.Millisecond) * math.Exp(0.7*rng.NormFloat64()))
		}
		sr := snapshot.Series{Span: "checkout", Identity: snapshot.Identity{Namespace: "shop", Pod: "web-0", Container: "server"}, Count: uint64(n), Histogram: snapshot.DurationHistogram(durs)}
		for _, d := range durs {
			sr.SumNs += d
		}
		return &snapshot.Snapshot{Version: snapshot.Version, Time: time.Now(), Series: []snapshot.Series{sr}}, sr.Histogram
	}
	// A first window, scraped; then the rest, whose spans rate() sees.
	first, _ := window(1000)
	native.Observe(first)
	classic.Observe(first)
	for _, job := range []string{"native", "classic"} {
		prom.Await(fmt.Sprintf(`spanwatch_spans_total{job=%q}`, job), 1000, 30*time.Second)
	}
	var hist []snapshot.Bucket
	for range 5 {
		s, h := window(4000)
		hist = snapshot.MergeHistogram(hist, h)
		native.Observe(s)
		classic.Observe(s)
	}
	for _, job := range []string{"native", "classic"} {
		prom.Await(fmt.Sprintf(`spanwatch_spans_total{job=%q}`, job), 21000, 30*time.Second)
	}
	// The recording rules aggregate over jobs: evaluate their
	// expressions per job, from the file, and the recorded series too.
	exprs := recordingRules(t)
	for _, q := range []float64{0.5, 0.9, 0.99} {
		name := fmt.Sprintf("namespace_span:spanwatch_span_duration_seconds:p%g_rate5m", q*100)
		expr, ok := exprs[name]
		if !ok {
			t.Fatalf("%s: no such recording rule", name)
		}
		own := snapshot.Quantile(hist, q, 0, math.Inf(1)) / 1e9
		for _, job := range []string{"native", "classic"} {
			perJob := strings.ReplaceAll(expr, `rate(spanwatch_span_duration_seconds_bucket[5m])`, fmt.Sprintf(`rate(spanwatch_span_duration_seconds_bucket{job=%q}[5m])`, job))
			perJob = strings.ReplaceAll(perJob, `rate(spanwatch_span_duration_seconds[5m])`, fmt.Sprintf(`rate(spanwatch_span_duration_seconds{job=%q}[5m])`, job))
			v := prom.AwaitAny(perJob, 30*time.Second)
			t.Logf("%s %-7s %.6fs (spanwatch %.6fs, %+.2f%%)", name, job, v, own, 100*(v/own-1))
			if job == "native" && math.Abs(v/own-1) > 0.02 {
				t.Errorf("%s over native histograms = %v s, spanwatch says %v s: more than 2%% apart", name, v, own)
			}
		}
		prom.AwaitAny(fmt.Sprintf(`%s{namespace="shop",span="checkout"}`, name), 30*time.Second)
	}
}

// recordingRules returns the shipped recording rules' expressions by name.
func recordingRules(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Record string `yaml:"record"`
				Alert  string `yaml:"alert"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out[r.Record+r.Alert] = r.Expr
		}
	}
	return out
}

// TestRulesRunbooks checks that every shipped alert links to its own
// section of docs/runbook.md, and that the runbook has no section for an
// alert that is gone.
func TestRulesRunbooks(t *testing.T) {
	b, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if name, ok := strings.CutPrefix(line, "## "); ok {
			sections[name] = true
		}
	}
	const base = "https://github.com/spanwatch/spanwatch/blob/main/docs/runbook.md#"
	alerts := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			if got, want := r.Annotations["runbook_url"], base+strings.ToLower(r.Alert); got != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, want)
			}
			if !sections[r.Alert] {
				t.Errorf("%s: no \"## %s\" section in docs/runbook.md", r.Alert, r.Alert)
			}
		}
	}
	for s := range sections {
		if !alerts[s] {
			t.Errorf("docs/runbook.md has a section for %s, which no rule alerts", s)
		}
	}
	for _, want := range []string{"SpanwatchDown", "SpanwatchNotificationsFailing", "SpanwatchNotificationsLost"} {
		if !alerts[want] {
			t.Errorf("no %s alert: the agents' own failures must page someone", want)
		}
	}
}
