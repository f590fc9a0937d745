package metrics

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spanwatch/spanwatch/snapshot"
)

// BenchmarkScrape measures one /metrics scrape (gathering and encoding)
// of n series of 20 non-empty buckets each, in the forms scrapers get:
// classic buckets as text (what /metrics served before native
// histograms, and what a Prometheus without them still asks for), native
// plus classic as protobuf (the default, to a Prometheus with native
// histograms), and native only (metrics: buckets: []); and Observe of the
// same snapshot. Figures are in BENCHMARKS.md.
func BenchmarkScrape(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		s := manySeries(n)
		for _, v := range []struct {
			name     string
			cfg      Config
			protobuf bool
		}{
			{"classic-text", Config{NoNativeHistograms: true}, false},
			{"native+classic-protobuf", Config{}, true},
			{"native-protobuf", Config{Bounds: []time.Duration{}}, true},
		} {
			e, err := NewExporter(v.cfg)
			if err != nil {
				b.Fatal(err)
			}
			e.Observe(s)
			h := e.Handler()
			b.Run(fmt.Sprintf("%s/series=%d", v.name, n), func(b *testing.B) {
				var bytes int
				for b.Loop() {
					rec := httptest.NewRecorder()
					req := httptest.NewRequest("GET", "/metrics", nil)
					if v.protobuf {
						req.Header.Set("Accept", protobufAccept)
					}
					h.ServeHTTP(rec, req)
					bytes = rec.Body.Len()
					io.Discard.Write(rec.Body.Bytes())
				}
				b.ReportMetric(float64(bytes), "bytes/scrape")
			})
		}
		e, err := NewExporter(Config{})
		if err != nil {
			b.Fatal(err)
		}
		e.Observe(s) // the series exist: what every later window costs
		b.Run(fmt.Sprintf("observe/series=%d", n), func(b *testing.B) {
			for b.Loop() {
				e.Observe(s)
			}
		})
	}
}

// discard is an http.ResponseWriter that keeps nothing but a byte count,
// so that a benchmark's allocations are the handler's own.
type discard struct {
	h http.Header
	n int
}

func (d *discard) Header() http.Header {
	if d.h == nil {
		d.h = http.Header{}
	}
	return d.h
}
func (d *discard) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// plainCollector is the peer of the exporter: the same series as plain
// client_golang metrics (CounterVecs, GaugeVecs and a HistogramVec with
// native schema-6 buckets and the default classic bounds), each series
// fed the same 20 values, served by promhttp.
func plainCollector(s *snapshot.Snapshot) http.Handler {
	reg := prometheus.NewRegistry()
	labels := []string{"span", "namespace", "pod", "container", "process", "cgroup"}
	cv := func(name string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: name}, labels)
		reg.MustRegister(c)
		return c
	}
	gv := func(name string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: name}, labels)
		reg.MustRegister(g)
		return g
	}
	spans, errs, over := cv("plain_spans_total"), cv("plain_span_errors_total"), cv("plain_span_over_budget_total")
	maxd := gv("plain_span_max_duration_seconds")
	var bounds []float64
	for _, d := range DefaultBounds() {
		bounds = append(bounds, d.Seconds())
	}
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "plain_span_duration_seconds", Help: "d", Buckets: bounds,
		NativeHistogramBucketFactor: math.Exp2(1.0 / 64), NativeHistogramMaxBucketNumber: 1000}, labels)
	reg.MustRegister(hist)
	for i := range s.Series {
		sr := &s.Series[i]
		lv := []string{sr.Span, sr.Namespace, sr.Pod, sr.Container, sr.Process, sr.Cgroup}
		spans.WithLabelValues(lv...).Add(float64(sr.Count))
		errs.WithLabelValues(lv...).Add(float64(sr.Errors))
		over.WithLabelValues(lv...).Add(float64(sr.OverBudget))
		maxd.WithLabelValues(lv...).Set(float64(sr.MaxNs) / 1e9)
		h := hist.WithLabelValues(lv...)
		for _, b := range sr.Histogram {
			for k := uint64(0); k < b.Count; k++ {
				h.Observe(float64(b.High) / 1e9)
			}
		}
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// BenchmarkScrapeVsClientGolang compares one /metrics scrape of the
// exporter with one of a plain client_golang registry holding the same
// series (5 metrics each, a native + classic histogram of 20 buckets),
// both as Prometheus asks with native histograms (protobuf) and as text,
// in one run: time, bytes allocated per scrape (B/op: what a scrape
// costs the heap), and the body's size. SPANWATCH_SCRAPE_SERIES sets the
// series (default 10000).
func BenchmarkScrapeVsClientGolang(b *testing.B) {
	n := 10000
	if v := os.Getenv("SPANWATCH_SCRAPE_SERIES"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	s := manySeries(n)
	e, err := NewExporter(Config{})
	if err != nil {
		b.Fatal(err)
	}
	e.Observe(s)
	handlers := map[string]http.Handler{"spanwatch": e.Handler(), "client_golang": plainCollector(s)}
	for _, format := range []string{"protobuf", "text"} {
		for _, who := range []string{"spanwatch", "client_golang"} {
			b.Run(fmt.Sprintf("%s/%s/series=%d", format, who, n), func(b *testing.B) {
				h := handlers[who]
				var size int
				b.ReportAllocs()
				for b.Loop() {
					req := httptest.NewRequest("GET", "/metrics", nil)
					if format == "protobuf" {
						req.Header.Set("Accept", protobufAccept)
					}
					w := &discard{}
					h.ServeHTTP(w, req)
					size = w.n
				}
				b.ReportMetric(float64(size), "bytes/scrape")
			})
		}
	}
}

// overrunsFor returns one overrun with a trace id for each series of s
// from first to first+n, at the snapshot's time.
func overrunsFor(s *snapshot.Snapshot, first, n int) []snapshot.Overrun {
	ovs := make([]snapshot.Overrun, 0, n)
	for i := first; i < first+n && i < len(s.Series); i++ {
		sr := &s.Series[i]
		ovs = append(ovs, snapshot.Overrun{Time: s.Time, Span: sr.Span, Identity: snapshot.Identity{Cgroup: sr.Cgroup, Namespace: sr.Namespace, Pod: sr.Pod, Container: sr.Container, Process: sr.Process}, DurationNs: 300e6, BudgetNs: 250e6,
			TraceID: fmt.Sprintf("%032x", i+1), SpanID: fmt.Sprintf("%016x", i+1)})
	}
	return ovs
}

// BenchmarkExemplars compares the exporter with exemplars (the default)
// and without (metrics: exemplars: false) at the same series count, in
// one run: a scrape as protobuf (native + classic) and as OpenMetrics
// with an exemplar on every series (what a node where every series
// overran its budget since it began exports), and Observe of a window of
// n series carrying 1000 overruns with trace ids (a snapshot's default
// cap, collector.Config.MaxOverrunsPerSnapshot). Each is run three
// times, alternating off and on (-count would run each three times in a
// row). SPANWATCH_SCRAPE_SERIES sets the series (default 10000).
func BenchmarkExemplars(b *testing.B) {
	n := 10000
	if v := os.Getenv("SPANWATCH_SCRAPE_SERIES"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	s := manySeries(n)
	exporters := map[string]*Exporter{}
	for _, mode := range []string{"off", "on"} {
		e, err := NewExporter(Config{NoExemplars: mode == "off"})
		if err != nil {
			b.Fatal(err)
		}
		// Every series gets an exemplar, 1000 a window.
		for first := 0; first < n; first += 1000 {
			s.Overruns = overrunsFor(s, first, 1000)
			e.Observe(s)
		}
		exporters[mode] = e
		if mode == "on" && len(e.view.Load().exemplars) != n {
			b.Fatalf("%d exemplars, want %d", len(e.view.Load().exemplars), n)
		}
	}
	const rounds = 3
	for round := range rounds {
		for _, format := range []string{"protobuf", "openmetrics"} {
			for _, mode := range []string{"off", "on"} {
				b.Run(fmt.Sprintf("scrape/%s/exemplars=%s/series=%d/round=%d", format, mode, n, round+1), func(b *testing.B) {
					h := exporters[mode].Handler()
					var size int
					b.ReportAllocs()
					for b.Loop() {
						req := httptest.NewRequest("GET", "/metrics", nil)
						if format == "protobuf" {
							req.Header.Set("Accept", protobufAccept)
						} else {
							req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0")
						}
						w := &discard{}
						h.ServeHTTP(w, req)
						size = w.n
					}
					b.ReportMetric(float64(size), "bytes/scrape")
				})
			}
		}
	}
	s.Overruns = overrunsFor(s, 0, 1000)
	for round := range rounds {
		for _, mode := range []string{"off", "on"} {
			b.Run(fmt.Sprintf("observe/exemplars=%s/series=%d/round=%d", mode, n, round+1), func(b *testing.B) {
				e := exporters[mode]
				b.ReportAllocs()
				for b.Loop() {
					for i := range s.Overruns {
						s.Overruns[i].Time = s.Overruns[i].Time.Add(time.Millisecond) // newer each time: each replaces
					}
					e.Observe(s)
				}
			})
		}
	}
}
