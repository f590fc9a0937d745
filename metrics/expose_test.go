package metrics

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/spanwatch/spanwatch/snapshot"
)

// exposeSnapshot is a snapshot with every kind of series the exporter
// writes: spans with and without budgets, zero-length spans, label values
// that need escaping, empty labels, source labels, and an argument metric
// with negative values.
func exposeSnapshot(at time.Time) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Time: at, WindowNs: int64(10 * time.Second)}
	add := func(sr snapshot.Series, durs ...uint64) {
		for _, d := range durs {
			sr.Count++
			sr.SumNs += d
			sr.MaxNs = max(sr.MaxNs, d)
		}
		sr.Histogram = snapshot.DurationHistogram(durs)
		s.Series = append(s.Series, sr)
	}
	add(snapshot.Series{Span: "checkout", Identity: snapshot.Identity{Cgroup: "/kubepods/pod1/c1", Namespace: "shop", Pod: "web-0", Container: "server", Process: "web"}, BudgetNs: 250e6, OverBudget: 1, Errors: 2},
		1e6, 2e6, 2e6, 3e6, 300e6, 0)
	add(snapshot.Series{Span: `quote " back \ slash` + "\nnewline", Identity: snapshot.Identity{Unit: "x.service"}}, 5e3, 7e9)
	add(snapshot.Series{Span: "empty window"})
	add(snapshot.Series{Span: "labelled", SourceLabels: map[string]string{"route": "/a", "status": "200"}}, 42e6)
	add(snapshot.Series{Span: "labelled", SourceLabels: map[string]string{"route": "/b"}}, 43e6, 44e6)
	vals := []int64{-5, 3, 0, 1 << 40, -(1 << 33), 7, -5}
	m := snapshot.Series{Kind: snapshot.KindMetric, Span: "bytes.delta", Identity: snapshot.Identity{Cgroup: "/x"}}
	for _, v := range vals {
		m.Count++
		m.Sum += v
		var b snapshot.Bucket
		switch {
		case v == 0:
			b = snapshot.Bucket{Zero: true, High: 1, Count: 1}
		case v < 0:
			b = snapshot.ValueBucketAt(snapshot.ValueIndex(uint64(-v)), true, 1)
		default:
			b = snapshot.ValueBucketAt(snapshot.ValueIndex(uint64(v)), false, 1)
		}
		m.Histogram = snapshot.MergeHistogram(m.Histogram, []snapshot.Bucket{b})
	}
	s.Series = append(s.Series, m)
	// Overruns: of checkout (the newest of two wins; 300ms, in a middle
	// bucket), of the escaped name (7s, above the last of some bounds;
	// no span id), of a labelled series; and two that give no
	// exemplar: one without a trace id, one of a series not exported.
	checkout := s.Series[0]
	s.Overruns = []snapshot.Overrun{
		{Time: at.Add(-2 * time.Second), Span: "checkout", Identity: snapshot.Identity{Cgroup: checkout.Cgroup, Namespace: "shop", Pod: "web-0", Container: "server", Process: "web"},
			DurationNs: 280e6, TraceID: "0af7651916cd43dd8448eb211c80319c", SpanID: "b7ad6b7169203331"},
		{Time: at.Add(-time.Second), Span: "checkout", Identity: snapshot.Identity{Cgroup: checkout.Cgroup, Namespace: "shop", Pod: "web-0", Container: "server", Process: "web"},
			DurationNs: 300e6, TraceID: fmt.Sprintf("4bf92f3577b34da6a3ce929d0e0e%04x", at.Second()), SpanID: "00f067aa0ba902b7"},
		{Time: at.Add(-time.Second), Span: s.Series[1].Span, Identity: snapshot.Identity{Unit: "x.service"}, DurationNs: 7e9, TraceID: "5b8efff798038103d269b633813fc60c"},
		{Time: at.Add(-time.Second), Span: "labelled", SourceLabels: map[string]string{"route": "/b"}, DurationNs: 44e6,
			TraceID: "00000000000000000000000000000001", SpanID: "0000000000000002"},
		{Time: at.Add(-time.Second), Span: "checkout", Identity: snapshot.Identity{Cgroup: checkout.Cgroup, Namespace: "shop", Pod: "web-0", Container: "server", Process: "web"},
			DurationNs: 900e6, SpanID: "00f067aa0ba902b7"},
		{Time: at, Span: "checkout", Identity: snapshot.Identity{Cgroup: "/elsewhere"}, DurationNs: 900e6, TraceID: "6b8efff798038103d269b633813fc60c"},
	}
	return s
}

// referenceExemplar is an exemplar as client_golang makes it (labels in
// the order given, the value in seconds, the timestamp).
func referenceExemplar(ex *exemplar) *dto.Exemplar {
	labels := []*dto.LabelPair{{Name: proto.String("trace_id"), Value: proto.String(hex.EncodeToString(ex.traceID[:]))}}
	if ex.hasSpan {
		labels = append(labels, &dto.LabelPair{Name: proto.String("span_id"), Value: proto.String(hex.EncodeToString(ex.spanID[:]))})
	}
	return &dto.Exemplar{Label: labels, Value: proto.Float64(float64(ex.valueNs) / 1e9), Timestamp: timestamppb.New(time.Unix(0, ex.unixNs))}
}

// referenceFamilies builds the span families of a view as client_golang
// Metrics, the way the exporter did before it wrote them itself.
func referenceFamilies(e *Exporter) []*dto.MetricFamily {
	v := e.view.Load()
	var out []*dto.MetricFamily
	for _, f := range e.families() {
		mf := &dto.MetricFamily{Name: proto.String(f.name), Help: proto.String(f.help), Type: f.typ.Enum()}
		for i := range v.series {
			s := &v.series[i]
			if s.meta.metric != f.metric {
				continue
			}
			var labels []*dto.LabelPair
			for k, n := range s.meta.names {
				labels = append(labels, &dto.LabelPair{Name: proto.String(n), Value: proto.String(s.meta.values[k])})
			}
			m := &dto.Metric{Label: labels}
			switch f.typ {
			case dto.MetricType_COUNTER, dto.MetricType_GAUGE:
				val, ok := f.value(s)
				if !ok {
					continue
				}
				if f.typ == dto.MetricType_COUNTER {
					m.Counter = &dto.Counter{Value: proto.Float64(val)}
				} else {
					m.Gauge = &dto.Gauge{Value: proto.Float64(val)}
				}
			default:
				h := &durationHistogram{zero: s.zero, native: e.native, created: s.meta.created}
				if s.ex != 0 {
					h.exemplar = referenceExemplar(&v.exemplars[s.ex-1])
				}
				for _, b := range unpack(nil, v.buckets[s.hist.off:s.hist.off+s.hist.len], s.hist.n) {
					h.buckets = append(h.buckets, snapshot.Bucket{Index: b.index, Count: b.count})
					h.count += b.count
				}
				for _, b := range unpack(nil, v.buckets[s.neg.off:s.neg.off+s.neg.len], s.neg.n) {
					h.negative = append(h.negative, snapshot.Bucket{Index: b.index, Count: b.count, Negative: true})
					h.count += b.count
				}
				h.count += s.zero
				if s.meta.metric {
					h.sumSec = float64(s.sumVal)
				} else {
					h.sumSec = float64(s.sumNs) / 1e9
					h.classic = e.classic
				}
				if err := h.Write(m); err != nil {
					panic(err)
				}
				m.Label = labels
			}
			mf.Metric = append(mf.Metric, m)
		}
		if len(mf.Metric) > 0 {
			out = append(out, mf)
		}
	}
	return out
}

// TestExpositionMatchesExpfmt holds the streaming encoder of the span
// families to client_golang's: for the text formats, byte for byte what
// expfmt writes for the same families; for protobuf, the same messages.
// It runs over several windows (cumulative histograms that grow) and
// every histogram configuration.
func TestExpositionMatchesExpfmt(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{NoNativeHistograms: true},
		{Bounds: []time.Duration{}},
		{Bounds: []time.Duration{time.Millisecond, 250 * time.Millisecond, 3 * time.Second}},
		{NoExemplars: true},
	} {
		e, err := NewExporter(cfg)
		if err != nil {
			t.Fatal(err)
		}
		at := time.Date(2026, 1, 2, 3, 4, 5, 6789, time.UTC)
		for w := 0; w < 3; w++ {
			e.Observe(exposeSnapshot(at.Add(time.Duration(w) * 10 * time.Second)))
		}
		ref := referenceFamilies(e)
		if len(ref) != 7 {
			t.Fatalf("%d reference families, want all 7", len(ref))
		}
		for _, format := range []expfmt.Format{expfmt.FmtText, expfmt.FmtOpenMetrics_1_0_0} {
			var want bytes.Buffer
			for _, mf := range ref {
				var err error
				if format == expfmt.FmtText {
					_, err = expfmt.MetricFamilyToText(&want, mf)
				} else {
					_, err = expfmt.MetricFamilyToOpenMetrics(&want, mf)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			got := spanSection(t, scrapeRaw(t, e, string(format), false))
			if got != want.String() {
				t.Errorf("%+v %s:\n got:\n%s\nwant:\n%s", cfg, format, got, want.String())
			}
			// The three series with overruns carry their exemplars
			// in OpenMetrics, nowhere else.
			wantEx := 0
			if format == expfmt.FmtOpenMetrics_1_0_0 && !cfg.NoExemplars {
				wantEx = 3
			}
			if n := strings.Count(got, " # {trace_id="); n != wantEx {
				t.Errorf("%+v %s: %d exemplars, want %d", cfg, format, n, wantEx)
			}
		}
		body := scrapeRaw(t, e, string(expfmt.FmtProtoDelim), true)
		got := map[string]*dto.MetricFamily{}
		r := bytes.NewReader(body)
		for {
			mf := &dto.MetricFamily{}
			if err := protodelim.UnmarshalFrom(r, mf); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%+v: decode protobuf: %v", cfg, err)
			}
			got[mf.GetName()] = mf
		}
		for _, want := range ref {
			if !proto.Equal(got[want.GetName()], want) {
				t.Errorf("%+v: protobuf %s:\n got %v\nwant %v", cfg, want.GetName(), got[want.GetName()], want)
			}
		}
	}
}

// scrapeRaw scrapes e accepting format, with gzip or not, and returns
// the body, uncompressed.
func scrapeRaw(t testing.TB, e *Exporter, format string, gz bool) []byte {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept", format)
	if gz {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	rec := httptest.NewRecorder()
	e.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, strings.SplitN(format, ";", 2)[0]) {
		t.Fatalf("Content-Type %q for Accept %q", ct, format)
	}
	body := rec.Body.Bytes()
	if gz {
		if rec.Header().Get("Content-Encoding") != "gzip" {
			t.Fatal("gzip accepted but not used")
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	return body
}

// spanSection cuts the span families out of a text exposition: from the
// first "# HELP spanwatch_span" or "# HELP spanwatch_metric_values" line
// on, without OpenMetrics' final "# EOF".
func spanSection(t *testing.T, body []byte) string {
	t.Helper()
	s := string(body)
	i := strings.Index(s, "# HELP spanwatch_spans ")
	if i < 0 {
		i = strings.Index(s, "# HELP spanwatch_spans_total ")
	}
	if i < 0 {
		t.Fatalf("no span families in\n%s", s)
	}
	return strings.TrimSuffix(s[i:], "# EOF\n")
}

// TestExpositionParses checks that each format's whole body, the
// registry's families and the span families together, is one exposition
// the formats' own parsers read: no family twice, OpenMetrics ending in
// "# EOF".
func TestExpositionParses(t *testing.T) {
	e, err := NewExporter(Config{})
	if err != nil {
		t.Fatal(err)
	}
	e.Observe(exposeSnapshot(time.Now()))
	body := scrapeRaw(t, e, string(expfmt.FmtText), true)
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("text: %v", err)
	}
	if len(mfs["spanwatch_spans_total"].GetMetric()) != 5 || mfs["go_goroutines"] == nil || mfs["spanwatch_snapshots_total"] == nil {
		t.Errorf("text exposition lacks families: %d span series, go_goroutines %v", len(mfs["spanwatch_spans_total"].GetMetric()), mfs["go_goroutines"] != nil)
	}
	om := string(scrapeRaw(t, e, string(expfmt.FmtOpenMetrics_1_0_0), false))
	if !strings.HasSuffix(om, "\n# EOF\n") || strings.Count(om, "# EOF") != 1 {
		t.Errorf("OpenMetrics does not end in one # EOF: ...%s", om[max(0, len(om)-200):])
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(om, "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name = strings.Fields(name)[0]
			// (client_golang's go_memstats_alloc_bytes gauge and
			// _total counter share a name in OpenMetrics: not ours.)
			if seen[name] && strings.HasPrefix(name, "spanwatch_") {
				t.Errorf("OpenMetrics: family %s twice", name)
			}
			seen[name] = true
		}
	}
	// name[] keeps the families asked for, span families included.
	req := httptest.NewRequest("GET", "/metrics?name[]=spanwatch_span_errors_total&name[]=go_goroutines", nil)
	rec := httptest.NewRecorder()
	e.Handler().ServeHTTP(rec, req)
	var names []string
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if n, ok := strings.CutPrefix(line, "# TYPE "); ok {
			names = append(names, strings.Fields(n)[0])
		}
	}
	sort.Strings(names)
	if fmt.Sprint(names) != "[go_goroutines spanwatch_span_errors_total]" {
		t.Errorf("name[] filter: families %v", names)
	}
}

// TestExposeFloat checks the value formatting against expfmt's for the
// values the span families hold.
func TestExposeFloat(t *testing.T) {
	for _, v := range []float64{0, 1, -1, 0.25, 1e-9, 123456789, 1 << 53, math.Inf(1), 2.5e-7, 0.1 + 0.2} {
		for _, format := range []expfmt.Format{expfmt.FmtText, expfmt.FmtOpenMetrics_1_0_0} {
			mf := &dto.MetricFamily{Name: proto.String("x"), Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: proto.Float64(v)}}}}
			var want bytes.Buffer
			if format == expfmt.FmtText {
				expfmt.MetricFamilyToText(&want, mf)
			} else {
				expfmt.MetricFamilyToOpenMetrics(&want, mf)
			}
			x := &exposer{kind: kindOf(format)}
			got := "x " + string(x.appendFloat(nil, v)) + "\n"
			if w := strings.SplitN(want.String(), "\n", 2)[1]; got != w {
				t.Errorf("%s %v: %q, expfmt %q", format, v, got, w)
			}
		}
	}
	_ = prometheus.DefNativeHistogramZeroThreshold
}
