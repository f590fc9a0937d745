package metrics

import (
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
	"time"
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
