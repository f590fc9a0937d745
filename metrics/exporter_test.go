package metrics

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
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
		Span: span, Identity: snapshot.Identity{Cgroup: cgroup}, Count: uint64(len(durs)), Errors: errs, OverBudget: over,
		SumNs: sum, MaxNs: mx, Histogram: snapshot.DurationHistogram(durs),
	}
}

// scrape GETs /metrics as text, or as protobuf (what a Prometheus with
// native histograms asks for), and parses it.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	return scrapeAs(t, h, false)
}

func scrapeAs(t *testing.T, h http.Handler, protobuf bool) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, err := http.NewRequest("GET", srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if protobuf {
		req.Header.Set("Accept", `application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited`)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	if !protobuf {
		p := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := p.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatalf("parse /metrics: %v", err)
		}
		return mfs
	}
	if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, "protobuf") {
		t.Fatalf("asked for protobuf, got %s", ct)
	}
	mfs := map[string]*dto.MetricFamily{}
	dec := expfmt.NewDecoder(resp.Body, expfmt.NewFormat(expfmt.TypeProtoDelim))
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); err == io.EOF {
			return mfs
		} else if err != nil {
			t.Fatalf("decode protobuf /metrics: %v", err)
		}
		mfs[mf.GetName()] = mf
	}
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
		name     string
		bounds   []time.Duration
		protobuf bool
	}{
		{"default", nil, false},
		{"default/protobuf", nil, true},
		{"fine", boundaries(-1280, -1279, -1000, -640, 0, 1, 64, 448), false},
		// Round figures, snapped to the nearest boundaries.
		{"snapped", []time.Duration{time.Microsecond, 100 * time.Microsecond, time.Millisecond, 5 * time.Millisecond, 250 * time.Millisecond, time.Second, 10 * time.Second}, true},
		{"no classic buckets", []time.Duration{}, true},
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
					QuotaOther: 7, NamesFull: 8, RecursionMisses: 9, OverrunsQueueDropped: 10, ExtremesDropped: 12, SeriesLive: 2, SeriesCapacity: 131072, BPFMapBytes: 201070684,
					SourceEvents: map[string]uint64{"eventheader/bad_time": 3}, UserFiles: map[string]uint64{"symlink": 2, "timeout": 1}, SymbolizerBytes: 4096,
					Sources: []snapshot.SourceHealth{{Source: "usdt", Name: "query", Declared: "r.yaml:3:7", Sites: 2, Hits: 40, Unpaired: 3, NestOverflow: 1},
						{Source: "usdt", Name: "hotspot:method__entry arg1", Declared: "r.yaml:9:7", Sites: 2, Silent: true, Hint: "-XX:+ExtendedDTraceProbes"}}},
			})
			e.Observe(&snapshot.Snapshot{
				Version: snapshot.Version, Time: t0.Add(10 * time.Second), WindowNs: int64(10 * time.Second),
				Series: []snapshot.Series{window("checkout", "/system.slice/shop.service", checkout2, 5, 11)},
				Stats: snapshot.Stats{Events: 3000, RingbufDrops: 1, OverrunsQueueDropped: 1, ReadNs: 2e6, UserFiles: map[string]uint64{"symlink": 1}, SymbolizerBytes: 8192,
					Sources: []snapshot.SourceHealth{{Source: "usdt", Name: "query", Declared: "r.yaml:3:7", Sites: 2, Hits: 2, Unpaired: 2}}},
			})
			e.ObserveEvaluation(4 * time.Millisecond)
			e.RuleError("CheckoutSlow")
			mfs := scrapeAs(t, e.Handler(), tc.protobuf)

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
				checkClassic(t, s.span, h, bounds, s.durs, tc.protobuf)
				if tc.protobuf {
					checkNative(t, s.span, h, s.durs)
				} else if h.Schema != nil || len(h.GetPositiveSpan()) > 0 {
					t.Errorf("%s: the text form carries a native histogram", s.span)
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
				"spanwatch_events_total":                 8700,
				"spanwatch_ringbuf_drops_total":          3,
				"spanwatch_stats_map_full_total":         1,
				"spanwatch_overruns_total":               4,
				"spanwatch_snapshots_total":              2,
				"spanwatch_read_errors_total":            4,
				"spanwatch_histogram_full_total":         5,
				"spanwatch_span_names_truncated_total":   6,
				"spanwatch_series_quota_overflow_total":  7,
				"spanwatch_names_full_total":             8,
				"spanwatch_recursion_misses_total":       9,
				"spanwatch_overruns_queue_dropped_total": 11,
				"spanwatch_extremes_dropped_total":       12,
			} {
				if got := mfs[name].GetMetric()[0].GetCounter().GetValue(); got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
			if se := mfs["spanwatch_source_events_total"]; se == nil || se.GetMetric()[0].GetCounter().GetValue() != 3 ||
				labelsOf(se.GetMetric()[0])["source"] != "eventheader" || labelsOf(se.GetMetric()[0])["reason"] != "bad_time" {
				t.Errorf("spanwatch_source_events_total = %v", se)
			}
			// The hits add up over snapshots; silent is the last
			// snapshot's: the JVM source left with its tracer.
			hits := map[string]float64{}
			for _, m := range mfs["spanwatch_source_hits_total"].GetMetric() {
				l := labelsOf(m)
				hits[l["source"]+" "+l["name"]+" "+l["declared"]] = m.GetCounter().GetValue()
			}
			if len(hits) != 2 || hits["usdt query r.yaml:3:7"] != 42 || hits["usdt hotspot:method__entry arg1 r.yaml:9:7"] != 0 {
				t.Errorf("spanwatch_source_hits_total = %v, want query 42, the JVM's 0", hits)
			}
			lost := map[string]float64{}
			for _, m := range mfs["spanwatch_source_lost_total"].GetMetric() {
				lost[labelsOf(m)["name"]+" "+labelsOf(m)["reason"]] = m.GetCounter().GetValue()
			}
			if len(lost) != 2 || lost["query unpaired_end"] != 5 || lost["query nest_overflow"] != 1 {
				t.Errorf("spanwatch_source_lost_total = %v, want query's unpaired_end 5, nest_overflow 1", lost)
			}
			if ss := mfs["spanwatch_source_silent"].GetMetric(); len(ss) != 1 || labelsOf(ss[0])["name"] != "query" || ss[0].GetGauge().GetValue() != 0 {
				t.Errorf("spanwatch_source_silent = %v, want query 0 alone", ss)
			}
			files := map[string]float64{}
			for _, m := range mfs["spanwatch_user_file_limits_total"].GetMetric() {
				files[labelsOf(m)["reason"]] = m.GetCounter().GetValue()
			}
			if len(files) != 2 || files["symlink"] != 3 || files["timeout"] != 1 {
				t.Errorf("spanwatch_user_file_limits_total = %v, want symlink 3, timeout 1", files)
			}
			if got := mfs["spanwatch_symbolizer_bytes"].GetMetric()[0].GetGauge().GetValue(); got != 8192 {
				t.Errorf("spanwatch_symbolizer_bytes = %v, want 8192", got)
			}
			for name, want := range map[string]float64{"spanwatch_series_capacity": 131072, "spanwatch_series_live": 2, "spanwatch_bpf_map_bytes": 201070684} {
				if got := mfs[name].GetMetric()[0].GetGauge().GetValue(); got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
			if got := mfs["spanwatch_series"].GetMetric()[0].GetGauge().GetValue(); got != 2 {
				t.Errorf("spanwatch_series = %v, want 2", got)
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
		{time.Second, time.Millisecond}, // not increasing
		{time.Second, time.Second},      // not increasing
		{0},                             // not positive
		{-time.Second},
	} {
		if _, err := NewExporter(Config{Bounds: b}); err == nil {
			t.Errorf("NewExporter(bounds %v) succeeded, want an error", b)
		}
	}
}

// TestSnapBound checks that a bound moves to the nearest schema-6 bucket
// boundary, by at most half a bucket (0.55%), and that the boundaries
// Prometheus itself computes for schema 6 are what the exporter writes.
func TestSnapBound(t *testing.T) {
	for _, tc := range []struct {
		d     time.Duration
		index int32
		le    float64
	}{
		{time.Second, 0, 1},
		{250 * time.Millisecond, -128, 0.25},
		{time.Millisecond, -638, 0.0009979464342325358},
		{1500 * time.Millisecond, 37, 1.4929077282912648},
		{time.Minute, 378, 59.9733642915296},
		{953, -1280, 9.5367431640625e-07}, // the largest whole ns of 2^-20 s's bucket
	} {
		i, le := SnapBound(tc.d)
		if i != tc.index || math.Abs(le-tc.le) > 1e-15*tc.le {
			t.Errorf("SnapBound(%v) = %d, %v; want %d, %v", tc.d, i, le, tc.index, tc.le)
		}
	}
	rng := rand.New(rand.NewSource(3))
	for range 10000 {
		d := time.Duration(1 + rng.Int63n(int64(time.Hour)))
		i, le := SnapBound(d)
		if r := le / d.Seconds(); r < 1/1.0055 || r > 1.0055 {
			t.Fatalf("SnapBound(%v) = %v s: moved by %.3f%%", d, le, 100*(r-1))
		}
		// le is Prometheus' upper bound of native bucket i: the
		// integer nanoseconds at or below it are exactly those of
		// spanwatch's bucket i and below.
		if _, hi := snapshot.DurationBounds(i); hi > 1 && (float64(hi-1)/1e9 > le*(1+1e-15) || float64(hi)/1e9 <= le) {
			t.Fatalf("bucket %d holds up to %d ns, le %v", i, hi-1, le)
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

// checkClassic checks the classic buckets: one per configured bound (after
// snapping), each counting exactly the durations at or below its le, then
// +Inf (in the text form; the protobuf form leaves +Inf implicit).
func checkClassic(t *testing.T, span string, h *dto.Histogram, bounds []time.Duration, durs []uint64, protobuf bool) {
	t.Helper()
	c := snapBounds(bounds)
	got := h.GetBucket()
	if n := len(got); !protobuf && len(c.index) > 0 {
		if n == 0 || !math.IsInf(got[n-1].GetUpperBound(), 1) || got[n-1].GetCumulativeCount() != uint64(len(durs)) {
			t.Errorf("%s: no +Inf bucket counting all %d spans: %v", span, len(durs), got)
			return
		}
		got = got[:n-1]
	}
	if !protobuf && len(c.index) == 0 {
		got = nil // the text form always writes +Inf
	}
	if len(got) != len(c.index) {
		t.Fatalf("%s: %d classic buckets, want %d", span, len(got), len(c.index))
	}
	for k, b := range got {
		_, hi := snapshot.DurationBounds(c.index[k])
		var want uint64
		for _, d := range durs {
			if d <= hi-1 {
				want++
			}
		}
		if b.GetUpperBound() != c.le[k] {
			t.Errorf("%s: bucket %d le = %v, want %v", span, k, b.GetUpperBound(), c.le[k])
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("%s: le=%v count = %d, want %d (durations up to %d ns)", span, b.GetUpperBound(), b.GetCumulativeCount(), want, hi-1)
		}
	}
}

// checkNative decodes the native histogram (schema, zero bucket, spans and
// deltas) and checks that it holds exactly the durations' schema-6 buckets.
func checkNative(t *testing.T, span string, h *dto.Histogram, durs []uint64) {
	t.Helper()
	if h.GetSchema() != 6 {
		t.Fatalf("%s: schema %d, want 6", span, h.GetSchema())
	}
	want := map[int32]uint64{}
	var zero uint64
	for _, d := range durs {
		if d == 0 {
			zero++
		} else {
			want[snapshot.DurationIndex(d)]++
		}
	}
	if h.GetZeroCount() != zero || h.GetZeroThreshold() <= 0 || h.GetZeroThreshold() >= 1e-9 {
		t.Errorf("%s: zero bucket %d (threshold %v), want %d below 1 ns", span, h.GetZeroCount(), h.GetZeroThreshold(), zero)
	}
	got := map[int32]uint64{}
	var idx int32
	var count int64
	k := 0
	for si, sp := range h.GetPositiveSpan() {
		if si == 0 {
			idx = sp.GetOffset()
		} else {
			idx += sp.GetOffset()
		}
		for range sp.GetLength() {
			count += h.GetPositiveDelta()[k]
			k++
			got[idx] = uint64(count)
			idx++
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: native buckets\n got  %v\n want %v", span, got, want)
	}
}

// TestExporterLabels checks the labels of the span metrics: the names
// people know, the cgroup, and a source's labels (each set of label names
// its own series), and that argument metrics and clashing source labels
// stay out.
func TestExporterLabels(t *testing.T) {
	e, err := NewExporter(Config{})
	if err != nil {
		t.Fatal(err)
	}
	base := window("GET", "/kubepods.slice/x.scope", []uint64{1e6}, 0, 0)
	base.Namespace, base.Pod, base.Container, base.Process, base.Unit = "shop", "web-0", "server", "web", ""
	base.ContainerID, base.PodUID = "3f4b8c2a9d1e", "0d1c2b3a-4f5e-6d7c-8b9a-a1b2c3d4e5f6"
	a, b, c := base, base, base
	a.SourceLabels = map[string]string{"route": "/a"}
	b.SourceLabels = map[string]string{"route": "/b", "pod": "clash", "bad-name": "x"}
	metric := base
	metric.Kind, metric.Span = snapshot.KindMetric, "queue.depth"
	e.Observe(&snapshot.Snapshot{Time: time.Now(), Series: []snapshot.Series{a, b, c, metric}})

	mfs := scrape(t, e.Handler())
	var got []string
	for _, m := range mfs["spanwatch_spans_total"].GetMetric() {
		l := labelsOf(m)
		got = append(got, fmt.Sprintf("%s %s/%s/%s process=%s route=%q ids=%q%q", l["span"], l["namespace"], l["pod"], l["container"], l["process"], l["route"], l["container_id"], l["pod_uid"]))
	}
	sort.Strings(got)
	want := []string{
		`GET shop/web-0/server process=web route="" ids=""""`,
		`GET shop/web-0/server process=web route="/a" ids=""""`,
		`GET shop/web-0/server process=web route="/b" ids=""""`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("series\n got  %q\n want %q", got, want)
	}
	bi := mfs["spanwatch_build_info"]
	if bi == nil || len(bi.GetMetric()) != 1 || bi.GetMetric()[0].GetGauge().GetValue() != 1 || labelsOf(bi.GetMetric()[0])["version"] == "" {
		t.Errorf("spanwatch_build_info = %v", bi)
	}
}

// TestPackedHistogram checks the exporter's packed cumulative histograms:
// merging a window into them and the round trip through the packing,
// negative indexes (durations under a second) included.
func TestPackedHistogram(t *testing.T) {
	b := func(pairs ...int) []bucketCount {
		var h []bucketCount
		for i := 0; i+1 < len(pairs); i += 2 {
			h = append(h, bucketCount{int32(pairs[i]), uint64(pairs[i+1])})
		}
		return h
	}
	for _, tc := range []struct{ dst, add, want []bucketCount }{
		{b(1, 1, 5, 2, 9, 3), b(5, 10), b(1, 1, 5, 12, 9, 3)},
		{b(1, 1, 5, 2, 9, 3), b(1, 1, 9, 1), b(1, 2, 5, 2, 9, 4)},
		{b(1, 1, 5, 2), b(3, 7), b(1, 1, 3, 7, 5, 2)},
		{b(-700, 1, -638, 1<<40), b(-700, 2, 400, 3), b(-700, 3, -638, 1<<40, 400, 3)},
		{nil, b(4, 4), b(4, 4)},
		{b(4, 4), nil, b(4, 4)},
	} {
		got := mergeCounts(nil, tc.dst, tc.add)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("mergeCounts(%v, %v) = %v, want %v", tc.dst, tc.add, got, tc.want)
		}
		p := appendPacked([]byte{0xff}, got)
		back := unpack(nil, p[1:], uint32(len(got)))
		if fmt.Sprint(back) != fmt.Sprint(got) {
			t.Errorf("unpack(appendPacked(%v)) = %v", got, back)
		}
		v := &view{buckets: p}
		it := v.iter(packedRef{off: 1, len: uint32(len(p) - 1), n: uint32(len(got))})
		var walked []bucketCount
		for it.Next() {
			walked = append(walked, bucketCount{it.idx, it.cnt})
		}
		if fmt.Sprint(walked) != fmt.Sprint(got) {
			t.Errorf("iterating %v gave %v", got, walked)
		}
	}
}

// TestExporterConcurrentScrape observes and scrapes at once (run with
// -race): a scrape copies the histograms Observe adds to in place.
func TestExporterConcurrentScrape(t *testing.T) {
	e, err := NewExporter(Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := manySeries(200)
	e.Observe(s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			e.Observe(s)
		}
	}()
	for range 5 {
		scrapeAs(t, e.Handler(), true)
	}
	<-done
	mfs := scrapeAs(t, e.Handler(), true)
	for _, m := range mfs["spanwatch_span_duration_seconds"].GetMetric() {
		if h := m.GetHistogram(); h.GetSampleCount() != 51*20 {
			t.Fatalf("count %d, want %d", h.GetSampleCount(), 51*20)
		}
	}
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

// TestExporterArgumentMetrics checks that an argument metric's values are
// exported as spanwatch_metric_values: exact count and signed sum over two
// windows, and a native histogram with its negative, zero and positive
// buckets, apart from any span of the same name.
func TestExporterArgumentMetrics(t *testing.T) {
	e, err := NewExporter(Config{})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(vals ...int64) snapshot.Series {
		sr := snapshot.Series{Kind: snapshot.KindMetric, Span: "bytes.delta", Identity: snapshot.Identity{Cgroup: "/x"}, Count: uint64(len(vals))}
		for _, v := range vals {
			sr.Sum += v
			var b snapshot.Bucket
			switch {
			case v == 0:
				b = snapshot.Bucket{Zero: true, High: 1, Count: 1}
			case v < 0:
				b = snapshot.ValueBucketAt(snapshot.ValueIndex(uint64(-v)), true, 1)
			default:
				b = snapshot.ValueBucketAt(snapshot.ValueIndex(uint64(v)), false, 1)
			}
			sr.Histogram = snapshot.MergeHistogram(sr.Histogram, []snapshot.Bucket{b})
		}
		return sr
	}
	span := window("bytes.delta", "/x", []uint64{1e6}, 0, 0)
	e.Observe(&snapshot.Snapshot{Time: time.Now(), Series: []snapshot.Series{mk(-5, 0, 12, -5), span}})
	e.Observe(&snapshot.Snapshot{Time: time.Now(), Series: []snapshot.Series{mk(1 << 40)}})
	for _, protobuf := range []bool{false, true} {
		mfs := scrapeAs(t, e.Handler(), protobuf)
		mf := mfs["spanwatch_metric_values"]
		if mf == nil || len(mf.GetMetric()) != 1 {
			t.Fatalf("protobuf=%v: spanwatch_metric_values = %v", protobuf, mf)
		}
		h := mf.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != 5 || h.GetSampleSum() != float64(-5+12-5+(1<<40)) {
			t.Errorf("protobuf=%v: count %d sum %v, want 5 and %v", protobuf, h.GetSampleCount(), h.GetSampleSum(), float64(-5+12-5+(1<<40)))
		}
		if protobuf {
			var neg, pos int64
			for _, d := range h.GetNegativeDelta() {
				neg += d
			}
			for _, d := range h.GetPositiveDelta() {
				pos += d
			}
			// Deltas sum to the last bucket's count; two negative values
			// share one bucket (-5), the positives have one each.
			if h.GetSchema() != snapshot.HistSchema || h.GetZeroCount() != 1 || len(h.GetNegativeSpan()) != 1 || neg != 2 || pos != 1 {
				t.Errorf("native form: schema %d zero %d negative spans %v (deltas sum %d) positive deltas sum %d",
					h.GetSchema(), h.GetZeroCount(), h.GetNegativeSpan(), neg, pos)
			}
		}
		if got := find(t, mfs, "spanwatch_spans_total", "bytes.delta").GetCounter().GetValue(); got != 1 {
			t.Errorf("the span of the same name: %v spans, want 1", got)
		}
	}
}

// TestExporterDropAbsent: while the memory budget sheds stale exports,
// a series a snapshot no longer holds stops being exported at the next
// Observe; otherwise it stays until the series TTL.
func TestExporterDropAbsent(t *testing.T) {
	e, err := NewExporter(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	both := &snapshot.Snapshot{Time: t0, Series: []snapshot.Series{window("a", "/x", []uint64{1e6}, 0, 0), window("b", "/x", []uint64{2e6}, 0, 0)}}
	onlyA := &snapshot.Snapshot{Time: t0.Add(10 * time.Second), Series: []snapshot.Series{window("a", "/x", []uint64{1e6}, 0, 0)}}
	spans := func() []string {
		var out []string
		for _, m := range scrape(t, e.Handler())["spanwatch_spans_total"].GetMetric() {
			out = append(out, labelsOf(m)["span"])
		}
		sort.Strings(out)
		return out
	}
	e.Observe(both)
	e.Observe(onlyA)
	if got := spans(); fmt.Sprint(got) != "[a b]" {
		t.Fatalf("without shedding: %v, want both (b until the TTL)", got)
	}
	e.SetDropAbsent(true)
	e.Observe(&snapshot.Snapshot{Time: t0.Add(20 * time.Second), Series: onlyA.Series})
	if got := spans(); fmt.Sprint(got) != "[a]" {
		t.Errorf("shedding stale exports: %v, want only a", got)
	}
	if m := find(t, scrape(t, e.Handler()), "spanwatch_spans_total", "a"); m.GetCounter().GetValue() != 3 {
		t.Errorf("a's count %v, want 3: counts are never shed", m.GetCounter().GetValue())
	}
}

// TestExemplars follows one series' exemplar over snapshots: the newest
// overrun with a trace id wins, an older one never replaces it, an
// overrun finds its series when its span was counted in an earlier
// window, ids that are not ids give none, and the exemplar leaves with
// its series; with NoExemplars there are none.
func TestExemplars(t *testing.T) {
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	ov := func(at time.Duration, trace, span string, d time.Duration) snapshot.Overrun {
		return snapshot.Overrun{Time: t0.Add(at), Span: "pay", Identity: snapshot.Identity{Cgroup: "/shop", Process: "shop"}, DurationNs: uint64(d), TraceID: trace, SpanID: span}
	}
	series := func() []snapshot.Series {
		sr := window("pay", "/shop", []uint64{1e6, 400e6}, 0, 1)
		sr.Process = "shop"
		return []snapshot.Series{sr, window("other", "/shop", []uint64{2e6}, 0, 0)}
	}
	const (
		a = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		b = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
		c = "cccccccccccccccccccccccccccccccc"
		d = "dddddddddddddddddddddddddddddddd"
	)
	steps := []struct {
		name     string
		series   []snapshot.Series
		overruns []snapshot.Overrun
		want     string // the trace id on pay, "" for none
		wantSpan string
		wantSec  float64
	}{
		{"newest of a window", series(), []snapshot.Overrun{ov(2*time.Second, b, "0000000000000b0b", 400*time.Millisecond), ov(time.Second, a, "0000000000000a0a", 300*time.Millisecond)},
			b, "0000000000000b0b", 0.4},
		{"an older one does not replace it", series(), []snapshot.Overrun{ov(1500*time.Millisecond, c, "", time.Second)}, b, "0000000000000b0b", 0.4},
		{"not ids", series(), []snapshot.Overrun{
			ov(20*time.Second, strings.Repeat("0", 32), "", time.Second), ov(21*time.Second, "xyz", "", time.Second),
			ov(22*time.Second, a[:31], "", time.Second), ov(23*time.Second, strings.Repeat("g", 32), "", time.Second),
		}, b, "0000000000000b0b", 0.4},
		{"series absent from the window", nil, []snapshot.Overrun{ov(30*time.Second, d, "00000000000000zz", 2*time.Second)}, d, "", 2},
		{"kept while no overrun comes", series(), nil, d, "", 2},
	}
	e, err := NewExporter(Config{})
	if err != nil {
		t.Fatal(err)
	}
	off, err := NewExporter(Config{NoExemplars: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range steps {
		s := &snapshot.Snapshot{Time: t0.Add(time.Duration(i) * 10 * time.Second), Series: st.series, Overruns: st.overruns}
		e.Observe(s)
		off.Observe(s)
		for _, exp := range []*Exporter{e, off} {
			h := scrapeAs(t, exp.Handler(), true)["spanwatch_span_duration_seconds"]
			found := false
			for _, m := range h.GetMetric() {
				span := ""
				for _, l := range m.GetLabel() {
					if l.GetName() == "span" {
						span = l.GetValue()
					}
				}
				exs := m.GetHistogram().GetExemplars()
				if span != "pay" || exp == off {
					if len(exs) != 0 {
						t.Errorf("%s: %s has exemplars %v (exemplars off: %v)", st.name, span, exs, exp == off)
					}
					continue
				}
				found = true
				if len(exs) != 1 {
					t.Fatalf("%s: pay has %d exemplars, want 1", st.name, len(exs))
				}
				got := map[string]string{}
				for _, l := range exs[0].GetLabel() {
					got[l.GetName()] = l.GetValue()
				}
				if got["trace_id"] != st.want || got["span_id"] != st.wantSpan || exs[0].GetValue() != st.wantSec {
					t.Errorf("%s: exemplar %v %v, want trace %s span %q value %v", st.name, got, exs[0].GetValue(), st.want, st.wantSpan, st.wantSec)
				}
				// On the classic bucket the value is in, too (the
				// one place Prometheus 2.42 reads).
				var on []float64
				for _, bk := range m.GetHistogram().GetBucket() {
					if bk.GetExemplar() != nil {
						on = append(on, bk.GetUpperBound())
					}
				}
				if len(on) != 1 || on[0] < st.wantSec || on[0] >= 2*st.wantSec {
					t.Errorf("%s: classic buckets with the exemplar: %v, want the one bucket of %v", st.name, on, st.wantSec)
				}
			}
			if !found && exp == e {
				t.Errorf("%s: no pay series", st.name)
			}
		}
	}
	if n := len(e.view.Load().exemplars); n != 1 {
		t.Errorf("%d exemplars kept for one series", n)
	}
	// Past the TTL the series leaves, and its exemplar with it.
	e.Observe(&snapshot.Snapshot{Time: t0.Add(2 * time.Hour), Series: []snapshot.Series{window("other", "/shop", []uint64{2e6}, 0, 0)}})
	if v := e.view.Load(); len(v.series) != 1 || len(v.exemplars) != 0 {
		t.Errorf("after the TTL: %d series, %d exemplars; want 1 and 0", len(v.series), len(v.exemplars))
	}
}
