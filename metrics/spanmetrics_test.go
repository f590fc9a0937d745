package metrics

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/internal/promtest"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestSpanmetricsNames scrapes an exporter with NamesSpanmetrics as text
// and as protobuf: the calls are split by status_code, the durations are
// traces_span_metrics_duration_seconds, the span is span_name, the
// process stands in for service_name when its processes declare no
// OpenTelemetry service (and the declared one is service_name when they
// do), the other families keep their names with those labels, and a
// source label spelled like one of them is not exported.
func TestSpanmetricsNames(t *testing.T) {
	e, err := NewExporter(Config{Names: NamesSpanmetrics})
	if err != nil {
		t.Fatal(err)
	}
	sr := window("checkout", "/system.slice/shop.service", []uint64{1e6, 2e6, 3e6, 40e6, 50e6}, 2, 1)
	sr.Process = "shop"
	sr.BudgetNs = 30e6
	sr.SourceLabels = map[string]string{"status_code": "500", "route": "/pay"}
	e.Observe(&snapshot.Snapshot{Version: snapshot.Version, Time: time.Now(), WindowNs: 10e9, Series: []snapshot.Series{sr}})

	for _, protobuf := range []bool{false, true} {
		mfs := scrapeAs(t, e.Handler(), protobuf)
		for _, gone := range []string{"spanwatch_spans_total", "spanwatch_span_errors_total", "spanwatch_span_duration_seconds"} {
			if mfs[gone] != nil {
				t.Errorf("protobuf %v: %s exported beside the spanmetrics names", protobuf, gone)
			}
		}
		calls := mfs["traces_span_metrics_calls_total"]
		if calls == nil || len(calls.Metric) != 2 {
			t.Fatalf("protobuf %v: calls %v", protobuf, calls)
		}
		got := map[string]float64{}
		for _, m := range calls.Metric {
			l := labelsOf(m)
			want := map[string]string{"span_name": "checkout", "service_name": "shop", "process": "shop", "cgroup": "/system.slice/shop.service", "route": "/pay", "status_code": l["status_code"]}
			if fmt.Sprint(l) != fmt.Sprint(want) {
				t.Errorf("protobuf %v: calls labels %v, want %v", protobuf, l, want)
			}
			got[l["status_code"]] = m.GetCounter().GetValue()
		}
		if got["STATUS_CODE_ERROR"] != 2 || got["STATUS_CODE_UNSET"] != 3 {
			t.Errorf("protobuf %v: calls by status %v, want 2 errors and 3 others", protobuf, got)
		}
		d := mfs["traces_span_metrics_duration_seconds"]
		if d == nil || len(d.Metric) != 1 || d.Metric[0].GetHistogram().GetSampleCount() != 5 || labelsOf(d.Metric[0])["span_name"] != "checkout" {
			t.Fatalf("protobuf %v: duration %v", protobuf, d)
		}
		if protobuf && d.Metric[0].GetHistogram().GetSchema() != snapshot.HistSchema {
			t.Errorf("duration: native schema %d", d.Metric[0].GetHistogram().GetSchema())
		}
		for _, name := range []string{"spanwatch_span_over_budget_total", "spanwatch_span_budget_seconds", "spanwatch_span_max_duration_seconds"} {
			if f := mfs[name]; f == nil || len(f.Metric) != 1 || labelsOf(f.Metric[0])["span_name"] != "checkout" || labelsOf(f.Metric[0])["service_name"] != "shop" {
				t.Errorf("protobuf %v: %s: %v", protobuf, name, f)
			}
		}
	}

	// The default names are unchanged, the source's status_code label
	// included.
	def, err := NewExporter(Config{})
	if err != nil {
		t.Fatal(err)
	}
	def.Observe(&snapshot.Snapshot{Version: snapshot.Version, Time: time.Now(), WindowNs: 10e9, Series: []snapshot.Series{sr}})
	mfs := scrape(t, def.Handler())
	if m := find(t, mfs, "spanwatch_spans_total", "checkout"); labelsOf(m)["status_code"] != "500" || labelsOf(m)["process"] != "shop" || labelsOf(m)["service"] != "" {
		t.Errorf("default names: labels %v", labelsOf(m))
	}

	// A declared service: service_name in spanmetrics, service by default;
	// the process keeps its own label.
	sr.Service = "payments"
	for _, names := range []Names{NamesSpanmetrics, NamesSpanwatch} {
		e, err := NewExporter(Config{Names: names})
		if err != nil {
			t.Fatal(err)
		}
		e.Observe(&snapshot.Snapshot{Version: snapshot.Version, Time: time.Now(), WindowNs: 10e9, Series: []snapshot.Series{sr}})
		label, family := "service", "spanwatch_spans_total"
		if names == NamesSpanmetrics {
			label, family = "service_name", "traces_span_metrics_calls_total"
		}
		f := scrape(t, e.Handler())[family]
		if f == nil || len(f.Metric) == 0 {
			t.Fatalf("%s: no %s", names, family)
		}
		for _, m := range f.Metric {
			if l := labelsOf(m); l[label] != "payments" || l["process"] != "shop" {
				t.Errorf("%s: a declared service: labels %v, want %s=payments and process=shop", names, l, label)
			}
		}
	}
	if _, err := NewExporter(Config{Names: "otel"}); err == nil || !strings.Contains(err.Error(), "spanmetrics") {
		t.Errorf("names otel: %v", err)
	}
}

// TestPrometheusSpanmetrics has a real Prometheus scrape an exporter with
// NamesSpanmetrics (protobuf, native histograms) and asks it the
// questions spanmetrics dashboards ask: the error ratio by service and
// span from traces_span_metrics_calls_total, and a quantile from
// traces_span_metrics_duration_seconds, each against what was fed.
func TestPrometheusSpanmetrics(t *testing.T) {
	e, err := NewExporter(Config{Names: NamesSpanmetrics})
	if err != nil {
		t.Fatal(err)
	}
	prom := promtest.Start(t, promtest.Config{Targets: map[string]string{"spanmetrics": serve(t, e)}, NativeHistograms: true})
	rng := rand.New(rand.NewSource(5))
	var all []uint64
	var hist []snapshot.Bucket
	var count, errs uint64
	t0 := time.Now()
	for w := range 4 {
		durs := latencies(rng, 3000, 20*time.Millisecond, 0.5)
		sr := window("checkout", "/system.slice/shop.service", durs, uint64(100*(w+1)), 0)
		sr.Process = "shop"
		all, hist = append(all, durs...), snapshot.MergeHistogram(hist, sr.Histogram)
		count, errs = count+sr.Count, errs+sr.Errors
		e.Observe(&snapshot.Snapshot{Version: snapshot.Version, Time: t0.Add(time.Duration(w) * 10 * time.Second), WindowNs: 10e9, Series: []snapshot.Series{sr}})
	}
	prom.Await(`sum(traces_span_metrics_calls_total{service_name="shop",span_name="checkout"})`, float64(count), 30*time.Second)
	ratio, ok := prom.Value(`sum by (service_name, span_name) (traces_span_metrics_calls_total{status_code="STATUS_CODE_ERROR"}) / sum by (service_name, span_name) (traces_span_metrics_calls_total)`)
	if want := float64(errs) / float64(count); !ok || math.Abs(ratio-want) > 1e-9 {
		t.Errorf("error ratio %v (%v), want %v", ratio, ok, want)
	}
	slices.Sort(all)
	own := snapshot.Quantile(hist, 0.99, float64(all[0]), float64(all[len(all)-1])) / 1e9
	p99, ok := prom.Value(`histogram_quantile(0.99, sum by (service_name, span_name) (traces_span_metrics_duration_seconds))`)
	if !ok || math.Abs(p99/own-1) > 0.02 {
		t.Errorf("p99 %v s (%v), spanwatch %v s: more than 2%% apart", p99, ok, own)
	}
	t.Logf("error ratio %.4f, p99 %.6fs (spanwatch %.6fs)", ratio, p99, own)
}
