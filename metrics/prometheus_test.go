package metrics

import (
	"fmt"
	"math"
	"math/rand"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/internal/promtest"
	"github.com/spanwatch/spanwatch/snapshot"
)

// serve serves an exporter's /metrics on loopback and returns host:port.
func serve(t *testing.T, e *Exporter) string {
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// latencies draws n durations from a log-normal distribution around
// median, the shape service latencies usually have.
func latencies(rng *rand.Rand, n int, median time.Duration, sigma float64) []uint64 {
	d := make([]uint64, n)
	for i := range d {
		d[i] = uint64(float64(median) * math.Exp(sigma*rng.NormFloat64()))
	}
	return d
}

// TestPrometheusQuantiles feeds the same snapshots to two exporters, one
// with native histograms (the default) and one with the classic
// power-of-two buckets only (what /metrics served before native
// histograms), lets a real Prometheus scrape both, and compares
// histogram_quantile over each with spanwatch's own quantiles over the
// same spans: the merged histogram of every window, as a snapshot holds
// it. The native histogram must agree within 2%.
func TestPrometheusQuantiles(t *testing.T) {
	native, err := NewExporter(Config{})
	if err != nil {
		t.Fatal(err)
	}
	classic, err := NewExporter(Config{NoNativeHistograms: true})
	if err != nil {
		t.Fatal(err)
	}
	prom := promtest.Start(t, promtest.Config{Targets: map[string]string{"native": serve(t, native), "classic": serve(t, classic)}, NativeHistograms: true})

	rng := rand.New(rand.NewSource(11))
	spans := []struct {
		name   string
		median time.Duration
		sigma  float64
	}{
		{"checkout", 40 * time.Millisecond, 0.6},
		{"db.query", 800 * time.Microsecond, 1.2},
		{"render", 3 * time.Millisecond, 0.3},
	}
	all := map[string][]uint64{}
	hist := map[string][]snapshot.Bucket{}
	t0 := time.Now()
	const windows = 6
	for w := range windows {
		s := &snapshot.Snapshot{Version: snapshot.Version, Time: t0.Add(time.Duration(w) * 10 * time.Second), WindowNs: 10e9}
		for _, sp := range spans {
			durs := latencies(rng, 4000, sp.median, sp.sigma)
			all[sp.name] = append(all[sp.name], durs...)
			sr := window(sp.name, "/system.slice/shop.service", durs, 0, 0)
			hist[sp.name] = snapshot.MergeHistogram(hist[sp.name], sr.Histogram)
			s.Series = append(s.Series, sr)
		}
		native.Observe(s)
		classic.Observe(s)
	}
	for _, job := range []string{"native", "classic"} {
		for _, sp := range spans {
			prom.Await(fmt.Sprintf(`spanwatch_spans_total{job=%q,span=%q}`, job, sp.name), windows*4000, 30*time.Second)
		}
	}

	for _, sp := range spans {
		durs := slices.Clone(all[sp.name])
		slices.Sort(durs)
		mn, mx := float64(durs[0]), float64(durs[len(durs)-1])
		for _, q := range []float64{0.5, 0.9, 0.99} {
			own := snapshot.Quantile(hist[sp.name], q, mn, mx) / 1e9
			exact := float64(durs[int(math.Ceil(q*float64(len(durs))))-1]) / 1e9
			n, ok := prom.Value(fmt.Sprintf(`histogram_quantile(%g, spanwatch_span_duration_seconds{job="native",span=%q})`, q, sp.name))
			if !ok {
				t.Fatalf("%s p%g: no native histogram in Prometheus", sp.name, q*100)
			}
			c, ok := prom.Value(fmt.Sprintf(`histogram_quantile(%g, spanwatch_span_duration_seconds_bucket{job="classic",span=%q})`, q, sp.name))
			if !ok {
				t.Fatalf("%s p%g: no classic histogram in Prometheus", sp.name, q*100)
			}
			t.Logf("%-8s p%-4g exact %9.6fs  spanwatch %9.6fs (%+.2f%%)  prometheus native %9.6fs (%+.2f%% vs spanwatch)  classic %9.6fs (%+.2f%%)",
				sp.name, q*100, exact, own, 100*(own/exact-1), n, 100*(n/own-1), c, 100*(c/own-1))
			if math.Abs(n/own-1) > 0.02 {
				t.Errorf("%s p%g: Prometheus says %v s, spanwatch %v s: more than 2%% apart", sp.name, q*100, n, own)
			}
		}
	}
	// The native histogram is one series in Prometheus; the classic one
	// is a series per bucket.
	if n, _ := prom.Value(`count(spanwatch_span_duration_seconds{job="native"})`); n != float64(len(spans)) {
		t.Errorf("native: %v histogram series, want %d", n, len(spans))
	}
	if n, _ := prom.Value(`count(spanwatch_span_duration_seconds_bucket{job="native"})`); n != 0 {
		t.Errorf("native: %v classic bucket series stored beside the native histograms, want 0", n)
	}
	if n, _ := prom.Value(`count(spanwatch_span_duration_seconds_bucket{job="classic"})`); n != float64(len(spans)*29) {
		t.Errorf("classic: %v bucket series, want %d", n, len(spans)*29)
	}
}

// TestPrometheusScrape has a real Prometheus scrape many span series, as
// classic histograms in the text format (what /metrics served before: 28
// power-of-two buckets) and as native histograms over protobuf, and
// reports what each scrape cost: Prometheus' own scrape_duration_seconds,
// scrape_samples_scraped (series stored per scrape) and the body size. It
// asserts the series stored; the times are printed, for BENCHMARKS.md.
// 1,000 series by default; SPANWATCH_SCRAPE_SERIES=10000 for the figure
// (two minutes on two cores).
func TestPrometheusScrape(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts Prometheus twice")
	}
	n := 1000
	if v := os.Getenv("SPANWATCH_SCRAPE_SERIES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("SPANWATCH_SCRAPE_SERIES=%q: want a positive number", v)
		}
	}
	s := manySeries(n)
	for _, tc := range []struct {
		name   string
		cfg    Config
		native bool
		// series per span series: spans, errors, over budget, max
		// duration, budget (none here), plus the histogram
		perSeries int
	}{
		{"classic/text", Config{NoNativeHistograms: true}, false, 4 + 28 + 3},
		{"native/protobuf", Config{}, true, 4 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := NewExporter(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			e.Observe(s)
			// A scrape of a thousand series takes seconds on a loaded
			// machine: the scrape timeout (the interval) must not fail
			// it; the test is about what is stored, not how fast.
			interval := 10 * time.Second
			if n > 2000 {
				interval = 15 * time.Second
			}
			prom := promtest.Start(t, promtest.Config{Targets: map[string]string{"spanwatch": serve(t, e)}, NativeHistograms: tc.native, Interval: interval})
			samples := prom.AwaitAny(`scrape_samples_scraped{job="spanwatch"}`, 60*time.Second)
			dur, _ := prom.Value(`scrape_duration_seconds{job="spanwatch"}`)
			up, _ := prom.Value(`up{job="spanwatch"}`)
			if up != 1 {
				t.Fatalf("up = %v: the scrape failed", up)
			}
			own, _ := prom.Value(`count({job="spanwatch",__name__=~"spanwatch_spans_total|spanwatch_span_(errors_total|over_budget_total|max_duration_seconds|budget_seconds|duration_seconds.*)"})`)
			if own != float64(n*tc.perSeries) {
				t.Errorf("span series stored = %v, want %d (%d per span series)", own, n*tc.perSeries, tc.perSeries)
			}
			body := scrapeBytes(t, e, tc.native)
			t.Logf("%s: %d span series: %v samples per scrape (%v from spans), scrape %.3fs, body %.1f MB",
				tc.name, n, samples, own, dur, float64(body)/1e6)
		})
	}
}

// manySeries is one snapshot of n span series, each with 20 non-empty
// buckets, spread over 200 pods.
func manySeries(n int) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Version: snapshot.Version, Time: time.Now(), WindowNs: 10e9}
	for i := range n {
		durs := make([]uint64, 20)
		for j := range durs {
			durs[j] = uint64(1000) << (j % 20)
		}
		sr := window(fmt.Sprintf("span-%d", i%50), fmt.Sprintf("/kubepods.slice/pod-%d/ctr-%d", i/50, i), durs, 1, 1)
		sr.Namespace, sr.Pod, sr.Container, sr.Process = "shop", fmt.Sprintf("web-%d", i/50), "server", "web"
		s.Series = append(s.Series, sr)
	}
	return s
}

// scrapeBytes is the size of one /metrics body, as text or protobuf.
func scrapeBytes(t testing.TB, e *Exporter, protobuf bool) int {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/metrics", nil)
	if protobuf {
		req.Header.Set("Accept", protobufAccept)
	}
	e.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	return rec.Body.Len()
}

// protobufAccept is what Prometheus asks for with native histograms on.
const protobufAccept = `application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.8,application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.1`

// TestPrometheusExemplars lets a real Prometheus with exemplar storage on
// scrape an exporter whose snapshots carry overruns with trace ids, and
// finds each overrun's trace id, span id and duration through
// /api/v1/query_exemplars: with native histograms (protobuf; the
// exemplar is read from the classic bucket it sits on, where Prometheus
// 2.42 looks) and without (OpenMetrics text, on a _bucket line), for
// every histogram configuration that has somewhere to put it. A series
// without overruns has no exemplar.
func TestPrometheusExemplars(t *testing.T) {
	for _, tc := range []struct {
		name   string
		native bool
		cfg    Config
		query  string
	}{
		{"native+classic/protobuf", true, Config{}, "spanwatch_span_duration_seconds"},
		{"native only/protobuf", true, Config{Bounds: []time.Duration{}}, "spanwatch_span_duration_seconds"},
		{"classic/openmetrics", false, Config{}, "spanwatch_span_duration_seconds_bucket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := NewExporter(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now().Truncate(time.Millisecond)
			slow := window("checkout", "/system.slice/shop.service", []uint64{2e6, 3e6, 312e6}, 0, 1)
			slow.BudgetNs = 250e6
			s := &snapshot.Snapshot{Version: snapshot.Version, Time: t0, WindowNs: 10e9, Series: []snapshot.Series{
				slow, window("render", "/system.slice/shop.service", []uint64{1e6}, 0, 0)},
				Overruns: []snapshot.Overrun{{Time: t0.Add(-time.Second), Span: "checkout", Identity: snapshot.Identity{Cgroup: "/system.slice/shop.service"},
					DurationNs: 312e6, BudgetNs: 250e6, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7"}}}
			e.Observe(s)
			prom := promtest.Start(t, promtest.Config{Targets: map[string]string{"spanwatch": serve(t, e)}, NativeHistograms: tc.native, Exemplars: true})
			deadline := time.Now().Add(30 * time.Second)
			var got []promtest.Exemplar
			for {
				got = prom.Exemplars(tc.query, t0.Add(-time.Minute), time.Now().Add(time.Minute))
				if len(got) > 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if len(got) != 1 {
				t.Fatalf("%d exemplars of %s, want 1: %+v", len(got), tc.query, got)
			}
			x := got[0]
			// Prometheus keeps milliseconds; OpenMetrics carries the
			// time as float seconds (as expfmt writes it), which
			// Prometheus truncates: up to 1ms early.
			if x.Labels["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || x.Labels["span_id"] != "00f067aa0ba902b7" || len(x.Labels) != 2 ||
				x.Value != 0.312 || x.Time.Sub(t0.Add(-time.Second)).Abs() > time.Millisecond {
				t.Errorf("exemplar %+v, want checkout's overrun (trace 4bf9..., span 00f0..., 0.312 s at %s)", x, t0.Add(-time.Second))
			}
			if x.Series["span"] != "checkout" || x.Series["job"] != "spanwatch" {
				t.Errorf("exemplar of series %v, want checkout's", x.Series)
			}
			if !tc.native && x.Series["le"] != "0.5" {
				t.Errorf("exemplar on the le=%q bucket, want 0.5 (0.312 s falls in (0.25, 0.5])", x.Series["le"])
			}
			// The dashboard's quantile query (deploy/grafana, which
			// asks for exemplars) finds it too: the exemplar API takes
			// the series of every selector in an expression.
			dash := `histogram_quantile(0.99, sum by (span, le) (rate(spanwatch_span_duration_seconds_bucket[5m]))) or histogram_quantile(0.99, sum by (span) (rate(spanwatch_span_duration_seconds[5m])))`
			if d := prom.Exemplars(dash, t0.Add(-time.Minute), time.Now().Add(time.Minute)); len(d) != 1 || d[0].Labels["trace_id"] != x.Labels["trace_id"] {
				t.Errorf("exemplars of the dashboard's query: %+v, want the one above", d)
			}
			t.Logf("%s: %v on %v", tc.name, x.Labels, x.Series)
		})
	}
}
