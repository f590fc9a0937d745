// Package promtest starts a real Prometheus for tests: Debian's
// prometheus package (or the binary named by $SPANWATCH_PROMETHEUS), on a
// loopback port, with a temporary configuration and storage directory,
// scraping the given targets and evaluating the given rule files.
package promtest

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Config says what the Prometheus scrapes and evaluates.
type Config struct {
	// Targets maps a job name to the host:port it scrapes /metrics from.
	Targets map[string]string
	// NativeHistograms starts Prometheus with
	// --enable-feature=native-histograms (2.40+): it then asks targets
	// for protobuf and stores native histograms. Without it, Prometheus
	// asks for text and stores classic histograms, as most do.
	NativeHistograms bool
	// Exemplars starts Prometheus with --enable-feature=exemplar-storage
	// (2.26+): it keeps the exemplars it scrapes (from OpenMetrics text,
	// or from protobuf), which Exemplars queries.
	Exemplars bool
	// Interval is the scrape and rule evaluation interval; 0 means 1s.
	Interval time.Duration
	// RuleFiles are rule files to evaluate.
	RuleFiles []string
}

// Prometheus is a running Prometheus.
type Prometheus struct {
	// URL is its base URL, e.g. http://127.0.0.1:40123.
	URL string
	t   testing.TB
}

// Binary returns the Prometheus binary to run, or "" when there is none.
func Binary() string {
	if p := os.Getenv("SPANWATCH_PROMETHEUS"); p != "" {
		return p
	}
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	return ""
}

// Start runs Prometheus and stops it when the test ends. It skips the test
// when no Prometheus is installed.
func Start(t testing.TB, cfg Config) *Prometheus {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("no prometheus: install Debian's prometheus package (.ci/install-deps.sh does) or set SPANWATCH_PROMETHEUS")
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	dir := t.TempDir()
	var y strings.Builder
	fmt.Fprintf(&y, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n", cfg.Interval, cfg.Interval, cfg.Interval)
	if len(cfg.RuleFiles) > 0 {
		y.WriteString("rule_files:\n")
		for _, f := range cfg.RuleFiles {
			abs, err := filepath.Abs(f)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&y, "  - %q\n", abs)
		}
	}
	y.WriteString("scrape_configs:\n")
	jobs := make([]string, 0, len(cfg.Targets))
	for j := range cfg.Targets {
		jobs = append(jobs, j)
	}
	slices.Sort(jobs)
	for _, j := range jobs {
		fmt.Fprintf(&y, "  - job_name: %s\n    static_configs: [{targets: [%q]}]\n", j, cfg.Targets[j])
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(y.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for range 3 { // the free port may be taken between probe and bind
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
		var features []string
		if cfg.NativeHistograms {
			features = append(features, "native-histograms")
		}
		if cfg.Exemplars {
			features = append(features, "exemplar-storage")
		}
		if len(features) > 0 {
			args = append(args, "--enable-feature="+strings.Join(features, ","))
		}
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", bin, err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		p := &Prometheus{URL: "http://" + addr, t: t}
		if lastErr = p.waitReady(done); lastErr == nil {
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-done
				logf.Close()
				if t.Failed() {
					b, _ := os.ReadFile(logf.Name())
					t.Logf("prometheus log:\n%s", b)
				}
			})
			return p
		}
		cmd.Process.Kill()
		<-done
	}
	b, _ := os.ReadFile(logf.Name())
	t.Fatalf("prometheus did not start: %v\n%s", lastErr, b)
	return nil
}

func (p *Prometheus) waitReady(done <-chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-done:
			return fmt.Errorf("prometheus exited")
		default:
		}
		resp, err := http.Get(p.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after 30s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// api gets /api/v1/PATH?v and decodes the response's data into data; an
// error, or a status other than success, fails the test.
func (p *Prometheus) api(path string, v url.Values, data any) {
	p.t.Helper()
	resp, err := http.Get(p.URL + "/api/v1/" + path + "?" + v.Encode())
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		p.t.Fatalf("%s %s: %v", path, v.Get("query"), err)
	}
	if r.Status != "success" {
		p.t.Fatalf("%s %s: %s", path, v.Get("query"), r.Error)
	}
	if err := json.Unmarshal(r.Data, data); err != nil {
		p.t.Fatalf("%s %s: %v", path, v.Get("query"), err)
	}
}

// A Sample is one element of a query's result.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Query evaluates an instant PromQL query now; a failed query fails the
// test.
func (p *Prometheus) Query(q string) []Sample {
	p.t.Helper()
	var r struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	p.api("query", url.Values{"query": {q}}, &r)
	out := make([]Sample, len(r.Result))
	for i, s := range r.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			p.t.Fatalf("query %s: value %q: %v", q, str, err)
		}
		out[i] = Sample{Labels: s.Metric, Value: v}
	}
	return out
}

// Value evaluates a query that has at most one result: ok is false when
// it has none.
func (p *Prometheus) Value(q string) (v float64, ok bool) {
	p.t.Helper()
	r := p.Query(q)
	if len(r) > 1 {
		p.t.Fatalf("query %s: %d results, want 1", q, len(r))
	}
	if len(r) == 0 {
		return 0, false
	}
	return r[0].Value, true
}

// Await polls q until it has one result equal to want (within a relative
// 1e-9), for up to timeout.
func (p *Prometheus) Await(q string, want float64, timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v, ok := p.Value(q)
		if ok && math.Abs(v-want) <= 1e-9*math.Abs(want) {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s = %v (present %v), want %v after %s", q, v, ok, want, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// AwaitAny polls q until it has a result, for up to timeout, and returns it.
func (p *Prometheus) AwaitAny(q string, timeout time.Duration) float64 {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if v, ok := p.Value(q); ok {
			return v
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: no result after %s", q, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// An Exemplar is one exemplar the exemplar API returned, with the labels
// of the series it belongs to.
type Exemplar struct {
	Series map[string]string
	Labels map[string]string
	Value  float64
	// Time is the exemplar's timestamp.
	Time time.Time
}

// Exemplars returns the exemplars of the series q selects between start
// and end (/api/v1/query_exemplars); a failed query fails the test.
func (p *Prometheus) Exemplars(q string, start, end time.Time) []Exemplar {
	p.t.Helper()
	v := url.Values{"query": {q}, "start": {strconv.FormatFloat(float64(start.UnixMilli())/1e3, 'f', 3, 64)},
		"end": {strconv.FormatFloat(float64(end.UnixMilli())/1e3, 'f', 3, 64)}}
	var r []struct {
		SeriesLabels map[string]string `json:"seriesLabels"`
		Exemplars    []struct {
			Labels    map[string]string `json:"labels"`
			Value     string            `json:"value"`
			Timestamp float64           `json:"timestamp"`
		} `json:"exemplars"`
	}
	p.api("query_exemplars", v, &r)
	var out []Exemplar
	for _, d := range r {
		for _, e := range d.Exemplars {
			v, err := strconv.ParseFloat(e.Value, 64)
			if err != nil {
				p.t.Fatalf("exemplars of %s: value %q: %v", q, e.Value, err)
			}
			out = append(out, Exemplar{Series: d.SeriesLabels, Labels: e.Labels, Value: v,
				Time: time.UnixMilli(int64(math.Round(e.Timestamp * 1e3)))})
		}
	}
	return out
}
