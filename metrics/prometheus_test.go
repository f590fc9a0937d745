package metrics

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// promServer is Debian's Prometheus on loopback, scraping the given
// targets (job name -> host:port) every second, with native histograms
// enabled (Prometheus 2.40+: --enable-feature=native-histograms; it then
// asks for protobuf).
type promServer struct {
	t    *testing.T
	addr string
}

func startPrometheus(t *testing.T, targets map[string]string) *promServer {
	return startPrometheusWith(t, targets, true)
}

// startPrometheusWith starts Prometheus with or without native histograms
// (without, it asks for the text format, as most Prometheus servers do).
func startPrometheusWith(t *testing.T, targets map[string]string, nativeHistograms bool) *promServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("no prometheus on PATH: install Debian's prometheus package (.ci/install-deps.sh does)")
	}
	dir := t.TempDir()
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n")
	if len(targets) == 1 { // one big target: give it time
		cfg.Reset()
		cfg.WriteString("global:\n  scrape_interval: 15s\n  scrape_timeout: 14s\nscrape_configs:\n")
	}
	jobs := make([]string, 0, len(targets))
	for j := range targets {
		jobs = append(jobs, j)
	}
	slices.Sort(jobs)
	for _, j := range jobs {
		fmt.Fprintf(&cfg, "  - job_name: %s\n    static_configs: [{targets: [%q]}]\n", j, targets[j])
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	args := []string{
		"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
		"--log.level=warn",
	}
	if nativeHistograms {
		args = append(args, "--enable-feature=native-histograms")
	}
	cmd := exec.Command(bin, args...)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	p := &promServer{t: t, addr: addr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus on %s not ready after 30s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// query evaluates an instant PromQL query now and returns its single
// value; ok is false when the result is empty.
func (p *promServer) query(q string) (v float64, ok bool) {
	p.t.Helper()
	resp, err := http.Get("http://" + p.addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		p.t.Fatalf("query %s: %v", q, err)
	}
	if r.Status != "success" {
		p.t.Fatalf("query %s: %s", q, r.Error)
	}
	if len(r.Data.Result) == 0 {
		return 0, false
	}
	if len(r.Data.Result) > 1 {
		p.t.Fatalf("query %s: %d results, want 1", q, len(r.Data.Result))
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err = strconv.ParseFloat(s, 64)
	if err != nil {
		p.t.Fatalf("query %s: value %q: %v", q, s, err)
	}
	return v, true
}

// await polls q until it returns want (within a relative 1e-9), for up to
// 30 s.
func (p *promServer) await(q string, want float64) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, ok := p.query(q)
		if ok && math.Abs(v-want) <= 1e-9*math.Abs(want) {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s = %v (present %v), want %v after 30s", q, v, ok, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

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
	prom := startPrometheus(t, map[string]string{"native": serve(t, native), "classic": serve(t, classic)})

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
			prom.await(fmt.Sprintf(`spanwatch_spans_total{job=%q,span=%q}`, job, sp.name), windows*4000)
		}
	}

	for _, sp := range spans {
		durs := slices.Clone(all[sp.name])
		slices.Sort(durs)
		mn, mx := float64(durs[0]), float64(durs[len(durs)-1])
		for _, q := range []float64{0.5, 0.9, 0.99} {
			own := snapshot.Quantile(hist[sp.name], q, mn, mx) / 1e9
			exact := float64(durs[int(math.Ceil(q*float64(len(durs))))-1]) / 1e9
			n, ok := prom.query(fmt.Sprintf(`histogram_quantile(%g, spanwatch_span_duration_seconds{job="native",span=%q})`, q, sp.name))
			if !ok {
				t.Fatalf("%s p%g: no native histogram in Prometheus", sp.name, q*100)
			}
			c, ok := prom.query(fmt.Sprintf(`histogram_quantile(%g, spanwatch_span_duration_seconds_bucket{job="classic",span=%q})`, q, sp.name))
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
	if n, _ := prom.query(`count(spanwatch_span_duration_seconds{job="native"})`); n != float64(len(spans)) {
		t.Errorf("native: %v histogram series, want %d", n, len(spans))
	}
	if n, _ := prom.query(`count(spanwatch_span_duration_seconds_bucket{job="native"})`); n != 0 {
		t.Errorf("native: %v classic bucket series stored beside the native histograms, want 0", n)
	}
	if n, _ := prom.query(`count(spanwatch_span_duration_seconds_bucket{job="classic"})`); n != float64(len(spans)*29) {
		t.Errorf("classic: %v bucket series, want %d", n, len(spans)*29)
	}
}

// TestPrometheusScrape10k has a real Prometheus scrape 10,000 span series,
// as classic histograms in the text format (what /metrics served before:
// 28 power-of-two buckets) and as native histograms over protobuf, and
// reports what each scrape cost: Prometheus' own scrape_duration_seconds,
// scrape_samples_scraped (series stored per scrape) and the body size. It
// asserts the series count; the times are printed, for BENCHMARKS.md.
func TestPrometheusScrape10k(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 10,000-series scrape takes a while")
	}
	const n = 10000
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
		{"native-only/protobuf", Config{Bounds: []time.Duration{}}, true, 4 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := NewExporter(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			e.Observe(s)
			prom := startPrometheusWith(t, map[string]string{"spanwatch": serve(t, e)}, tc.native)
			deadline := time.Now().Add(60 * time.Second)
			var samples float64
			for {
				var ok bool
				if samples, ok = prom.query(`scrape_samples_scraped{job="spanwatch"}`); ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no scrape after 60s")
				}
				time.Sleep(500 * time.Millisecond)
			}
			dur, _ := prom.query(`scrape_duration_seconds{job="spanwatch"}`)
			up, _ := prom.query(`up{job="spanwatch"}`)
			if up != 1 {
				t.Fatalf("up = %v: the scrape failed", up)
			}
			own, _ := prom.query(`count({job="spanwatch",__name__=~"spanwatch_span.*|spanwatch_spans_total"})`)
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
