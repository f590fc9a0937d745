package metrics

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/spanwatch/spanwatch/snapshot"
)

// window builds one series' window from raw durations, the way the
// collector does: schema-6 buckets (snapshot.DurationHistogram).
func window(span, cgroup string, durs []uint64, errs, over uint64) snapshot.Series {
	var sum, mx uint64
	for _, d := range durs {
		sum += d
		mx = max(mx, d)
	}
	return snapshot.Series{
		Span: span, Cgroup: cgroup, Count: uint64(len(durs)), Errors: errs, OverBudget: over,
		SumNs: sum, MaxNs: mx, Histogram: snapshot.DurationHistogram(durs),
	}
}

func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

func labelsOf(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

func find(t *testing.T, mfs map[string]*dto.MetricFamily, name, span string) *dto.Metric {
	t.Helper()
	mf := mfs[name]
	if mf == nil {
		t.Fatalf("metric %s missing", name)
	}
	for _, m := range mf.GetMetric() {
		if labelsOf(m)["span"] == span {
			return m
		}
	}
	t.Fatalf("metric %s{span=%q} missing", name, span)
	return nil
}

// TestExporterExactHistograms feeds two delta snapshots and checks, from
// the parsed /metrics text, that every exported bucket holds exactly the
// number of raw durations below its bound, summed over both windows.
func TestExporterExactHistograms(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	gen := func(n int) []uint64 {
		d := make([]uint64, n)
		for i := range d {
			switch i % 4 {
			case 0: // exactly on and just below power-of-two bounds
				d[i] = uint64(1) << (10 + rng.Intn(20))
			case 1:
				d[i] = uint64(1)<<(10+rng.Intn(20)) - 1
			case 2: // spread over 1 µs .. 100 ms
				d[i] = 1000 + uint64(rng.Int63n(100e6))
			default: // the extremes: below 1 µs and above the last bound
				d[i] = []uint64{0, 5, 900, 200e9, 1 << 40}[rng.Intn(5)]
			}
		}
		return d
	}
	for _, tc := range []struct {
		name   string
		bounds []time.Duration
	}{
		{"default", nil},
		{"fine", boundaries(-1280, -1279, -1000, -640, 0, 1, 64, 448)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := NewExporter(Config{Bounds: tc.bounds})
			if err != nil {
				t.Fatal(err)
			}
			checkout1, checkout2, search := gen(5000), gen(3000), gen(700)
			t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
			e.Observe(&snapshot.Snapshot{
				Version: snapshot.Version, Time: t0, WindowNs: int64(10 * time.Second),
				Series: []snapshot.Series{
					window("checkout", "/system.slice/shop.service", checkout1, 17, 40),
					window("search", "/system.slice/shop.service", search, 0, 3),
				},
				Overruns: make([]snapshot.Overrun, 4),
				Stats: snapshot.Stats{Events: 5700, RingbufDrops: 2, StatsFull: 1, ReadNs: 3e6, ReadErrors: 4, HistogramFull: 5, NamesTruncated: 6,
					QuotaOther: 7, NamesFull: 8, RecursionMisses: 9, SeriesLive: 2, SeriesCapacity: 131072, BPFMapBytes: 201070684},
			})
			e.Observe(&snapshot.Snapshot{
				Version: snapshot.Version, Time: t0.Add(10 * time.Second), WindowNs: int64(10 * time.Second),
				Series: []snapshot.Series{window("checkout", "/system.slice/shop.service", checkout2, 5, 11)},
				Stats:  snapshot.Stats{Events: 3000, RingbufDrops: 1, ReadNs: 2e6},
			})
			e.ObserveEvaluation(4 * time.Millisecond)
			e.RuleError("CheckoutSlow")
			mfs := scrape(t, e.Handler())

			bounds := tc.bounds
			if bounds == nil {
				bounds = DefaultBounds()
			}
			for _, s := range []struct {
				span       string
				durs       []uint64
				errs, over uint64
			}{
				{"checkout", append(append([]uint64{}, checkout1...), checkout2...), 22, 51},
				{"search", search, 0, 3},
			} {
				m := find(t, mfs, "spanwatch_span_duration_seconds", s.span)
				l := labelsOf(m)
				if l["cgroup"] != "/system.slice/shop.service" {
					t.Errorf("%s: cgroup label %q", s.span, l["cgroup"])
				}
				h := m.GetHistogram()
				if got, want := h.GetSampleCount(), uint64(len(s.durs)); got != want {
					t.Errorf("%s: _count = %d, want %d", s.span, got, want)
				}
				var sum uint64
				for _, d := range s.durs {
					sum += d
				}
				if got, want := h.GetSampleSum(), float64(sum)/1e9; got != want {
					t.Errorf("%s: _sum = %v, want %v", s.span, got, want)
				}
				// The text form lists the +Inf bucket too.
				if got, want := len(h.GetBucket()), len(bounds)+1; got != want {
					t.Fatalf("%s: %d buckets, want %d", s.span, got, want)
				}
				if inf := h.GetBucket()[len(bounds)]; !math.IsInf(inf.GetUpperBound(), 1) || inf.GetCumulativeCount() != uint64(len(s.durs)) {
					t.Errorf("%s: last bucket le=%v count=%d, want +Inf and %d", s.span, inf.GetUpperBound(), inf.GetCumulativeCount(), len(s.durs))
				}
				for i, b := range h.GetBucket()[:len(bounds)] {
					bound := uint64(bounds[i])
					var want uint64
					for _, d := range s.durs {
						if d < bound {
							want++
						}
					}
					if le := b.GetUpperBound(); le != float64(bound-1)/1e9 {
						t.Errorf("%s: bucket %d le = %v, want %v", s.span, i, le, float64(bound-1)/1e9)
					}
					if b.GetCumulativeCount() != want {
						t.Errorf("%s: le=%v count = %d, want %d (durations below %d ns)", s.span, b.GetUpperBound(), b.GetCumulativeCount(), want, bound)
					}
				}
				for name, want := range map[string]uint64{
					"spanwatch_spans_total":            uint64(len(s.durs)),
					"spanwatch_span_errors_total":      s.errs,
					"spanwatch_span_over_budget_total": s.over,
				} {
					if got := find(t, mfs, name, s.span).GetCounter().GetValue(); got != float64(want) {
						t.Errorf("%s{span=%q} = %v, want %d", name, s.span, got, want)
					}
				}
			}
			for name, want := range map[string]float64{
				"spanwatch_events_total":                8700,
				"spanwatch_ringbuf_drops_total":         3,
				"spanwatch_stats_map_full_total":        1,
				"spanwatch_overruns_total":              4,
				"spanwatch_snapshots_total":             2,
				"spanwatch_read_errors_total":           4,
				"spanwatch_histogram_full_total":        5,
				"spanwatch_span_names_truncated_total":  6,
				"spanwatch_series_quota_overflow_total": 7,
				"spanwatch_names_full_total":            8,
				"spanwatch_recursion_misses_total":      9,
			} {
				if got := mfs[name].GetMetric()[0].GetCounter().GetValue(); got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
			if got := mfs["spanwatch_series"].GetMetric()[0].GetGauge().GetValue(); got != 2 {
				t.Errorf("spanwatch_series = %v, want 2", got)
			}
			for name, want := range map[string]float64{"spanwatch_series_capacity": 131072, "spanwatch_series_live": 2, "spanwatch_bpf_map_bytes": 201070684} {
				if got := mfs[name].GetMetric()[0].GetGauge().GetValue(); got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
			if got := mfs["spanwatch_snapshot_read_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleSum(); got != 0.005 {
				t.Errorf("read duration sum = %v, want 0.005", got)
			}
			if got := mfs["spanwatch_evaluation_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount(); got != 1 {
				t.Errorf("evaluation duration count = %v, want 1", got)
			}
			re := mfs["spanwatch_rule_errors_total"].GetMetric()[0]
			if labelsOf(re)["rule"] != "CheckoutSlow" || re.GetCounter().GetValue() != 1 {
				t.Errorf("rule errors = %v", re)
			}
			if got := mfs["spanwatch_last_snapshot_timestamp_seconds"].GetMetric()[0].GetGauge().GetValue(); got != float64(t0.Add(10*time.Second).Unix()) {
				t.Errorf("last snapshot timestamp = %v", got)
			}
		})
	}
}

func TestExporterBadBounds(t *testing.T) {
	for _, b := range [][]time.Duration{
		{1000, 1001},            // 1001 ns is inside a bucket
		{time.Millisecond},      // 1e6 ns is not a boundary
		{1999999999, 999999999}, // not increasing
		{0},                     // not positive
	} {
		if _, err := NewExporter(Config{Bounds: b}); err == nil {
			t.Errorf("NewExporter(bounds %v) succeeded, want an error", b)
		}
	}
}

// TestExporterSeriesTTL checks that a series that stopped appearing is
// dropped after the TTL and one that keeps appearing is not.
func TestExporterSeriesTTL(t *testing.T) {
	e, err := NewExporter(Config{SeriesTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	e.Observe(&snapshot.Snapshot{Time: t0, Series: []snapshot.Series{window("a", "", []uint64{1000}, 0, 0), window("b", "", []uint64{1000}, 0, 0)}})
	e.Observe(&snapshot.Snapshot{Time: t0.Add(2 * time.Minute), Series: []snapshot.Series{window("a", "", []uint64{2000}, 0, 0)}})
	mfs := scrape(t, e.Handler())
	var spans []string
	for _, m := range mfs["spanwatch_spans_total"].GetMetric() {
		spans = append(spans, fmt.Sprintf("%s=%v", labelsOf(m)["span"], m.GetCounter().GetValue()))
	}
	if got := strings.Join(spans, ","); got != "a=2" {
		t.Fatalf("series after TTL: %s, want a=2", got)
	}
}

// TestExporterServe checks that Serve answers on /metrics and returns nil
// once its context ends.
func TestExporterServe(t *testing.T) {
	e, err := NewExporter(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve returned %v after cancel, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

// boundaries returns the largest whole nanosecond of each schema-6 bucket i:
// the bounds the exporter accepts.
func boundaries(idx ...int32) []time.Duration {
	var b []time.Duration
	for _, i := range idx {
		_, hi := snapshot.DurationBounds(i)
		b = append(b, time.Duration(hi-1))
	}
	return b
}

// TestExporterAnyNameBytes checks that names with bytes that are not UTF-8,
// and long UTF-8 names cut by the kernel, never break a scrape: /metrics
// answers 200 with the names made valid, and two names that differ only in
// such bytes are one exported series.
func TestExporterAnyNameBytes(t *testing.T) {
	e, err := NewExporter(Config{})
	if err != nil {
		t.Fatal(err)
	}
	long := snapshot.TruncateName(strings.Repeat("é", 100))
	e.Observe(&snapshot.Snapshot{Version: snapshot.Version, Time: time.Now(), WindowNs: 1e9, Series: []snapshot.Series{
		window("bad\xffname", "/x", []uint64{1000}, 0, 0),
		window("bad\xfename", "/x", []uint64{2000}, 0, 0),
		window(long, "/x\xc3", []uint64{3000}, 0, 0),
	}})
	mfs := scrape(t, e.Handler()) // fails on anything but 200 and valid text
	if got := find(t, mfs, "spanwatch_spans_total", "bad\uFFFDname").GetCounter().GetValue(); got != 2 {
		t.Errorf("merged invalid names: %v spans, want 2", got)
	}
	find(t, mfs, "spanwatch_spans_total", long)
}
