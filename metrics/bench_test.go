package metrics

import (
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// BenchmarkScrape measures one /metrics scrape (gathering and encoding as
// text) with n series of 20 non-empty buckets each, against Observe of the
// same snapshot. Figures are in BENCHMARKS.md.
func BenchmarkScrape(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		e, err := NewExporter(Config{})
		if err != nil {
			b.Fatal(err)
		}
		s := &snapshot.Snapshot{Time: time.Now()}
		for i := range n {
			durs := make([]uint64, 20)
			for j := range durs {
				durs[j] = uint64(1000) << (j % 20)
			}
			s.Series = append(s.Series, window(fmt.Sprintf("span-%d", i%50), fmt.Sprintf("/kubepods.slice/pod-%d/ctr-%d", i/50, i), durs, 1, 1))
		}
		e.Observe(s)
		h := e.Handler()
		b.Run(fmt.Sprintf("series=%d", n), func(b *testing.B) {
			var bytes int
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
				bytes = rec.Body.Len()
				io.Discard.Write(rec.Body.Bytes())
			}
			b.ReportMetric(float64(bytes), "bytes/scrape")
		})
		b.Run(fmt.Sprintf("observe/series=%d", n), func(b *testing.B) {
			for b.Loop() {
				e.Observe(s)
			}
		})
	}
}
