package detector

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/policy"
	"github.com/spanwatch/spanwatch/snapshot"
)

// benchHists are the windows' latency distributions the benchmark's
// series draw from: 50 of normal traffic (50-148 spans around 8ms, a tail
// to 20-69ms) and one slow (a fifth of the spans at 900ms), each with its
// schema-6 histogram, exact extremes and quantiles as the collector makes
// them.
var benchHists = func() []snapshot.Series {
	var out []snapshot.Series
	for j := 0; j <= 50; j++ {
		count := 50 + 2*j
		var durs []uint64
		for k := 0; k < count; k++ {
			d := uint64(4e6 + (k*7919)%9000000) // 4-13ms
			if k%20 == 0 {
				d = uint64(20e6 + (j%50)*1e6) // the tail
			}
			if j == 50 && k%5 == 0 {
				d = 900e6
			}
			durs = append(durs, d)
		}
		s := snapshot.Series{Count: uint64(count), Histogram: snapshot.DurationHistogram(durs), MinNs: slices.Min(durs), MaxNs: slices.Max(durs)}
		for _, d := range durs {
			s.SumNs += d
		}
		s.SetQuantiles(snapshot.HistogramQuantiles(s.Histogram, float64(s.MinNs), float64(s.MaxNs)))
		out = append(out, s)
	}
	return out
}()

// benchSnapshot makes n series: 200 span names over n/200 cgroups, each
// window with a real histogram, 1% of them slow and failing so that they
// trip the rules.
func benchSnapshot(n int, step int) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Version: snapshot.Version, Time: t0.Add(time.Duration(step) * 10 * time.Second), WindowNs: 10e9, Series: make([]snapshot.Series, n)}
	for i := range s.Series {
		h := benchHists[(i+step)%50]
		errs := uint64(0)
		if i%100 == 7 {
			h = benchHists[50]
			errs = h.Count / 5
		}
		h.Span = fmt.Sprintf("svc%d.op%d", i%20, i%200)
		h.CgroupID = uint64(1000 + i/200)
		h.Container = fmt.Sprintf("web-%d", i/200)
		h.Process = "api"
		h.Errors, h.ErrorRatio, h.Rate = errs, float64(errs)/float64(h.Count), float64(h.Count)/10
		s.Series[i] = h
	}
	return s
}

// benchRules writes 100 YAML rules (80 thresholds, 20 anomaly rules; a
// quarter with templated annotations) and nPolicies Rego policies.
func benchRules(tb testing.TB, nPolicies int) *policy.Config {
	tb.Helper()
	dir := tb.TempDir()
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := 0; i < 100; i++ {
		span := fmt.Sprintf("svc%d.*", i%20)
		switch {
		case i < 20:
			fmt.Fprintf(&b, "  - name: Anomaly%d\n    span: %q\n    anomaly: {metric: p99, sensitivity: 4}\n", i, span)
		case i < 45:
			fmt.Fprintf(&b, "  - name: Slow%d\n    span: %q\n    when: p99 > %dms\n    for: 30s\n    labels: {severity: page}\n    annotations: {summary: \"{{ .Labels.span }} p99 {{ .Value }} over {{ .Threshold }}\"}\n", i, span, 500+i)
		case i < 70:
			fmt.Fprintf(&b, "  - name: Errors%d\n    span: %q\n    container: \"web-*\"\n    when: error_ratio > 10%% and count > 20\n", i, span)
		default:
			fmt.Fprintf(&b, "  - name: Exact%d\n    span: svc%d.op%d\n    when: rate < 1/s\n", i, i%20, i%200)
		}
	}
	if nPolicies > 0 {
		b.WriteString("policies:\n")
	}
	for i := 0; i < nPolicies; i++ {
		rego := fmt.Sprintf(`package spanwatch

alerts contains {"labels": object.union(s.labels, {"alertname": "Policy%d"}), "annotations": {"summary": sprintf("p99 %%v", [s.p99_ns])}} if {
	some s in input.series
	s.count >= data.min_count
	s.p99_ns > data.limit_ns
	s.error_ratio > %d / 100
}
`, i, 5+i)
		name := fmt.Sprintf("p%d.rego", i)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(rego), 0o644); err != nil {
			tb.Fatal(err)
		}
		data := fmt.Sprintf("p%d.json", i)
		os.WriteFile(filepath.Join(dir, data), []byte(fmt.Sprintf(`{"min_count": 10, "limit_ns": %d}`, 400e6+i*1e6)), 0o644)
		fmt.Fprintf(&b, "  - {file: %s, data: %s}\n", name, data)
	}
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		tb.Fatal(err)
	}
	cfg, err := policy.LoadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// BenchmarkEvaluate is one evaluation cycle: 100 YAML rules and 10 Rego
// policies over 1k, 10k and 100k series, with the alert lifecycle and
// anomaly baselines warm. It reports ns and allocated bytes per series.
func BenchmarkEvaluate(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		for _, tc := range []struct {
			name     string
			policies int
		}{{"yaml100", 0}, {"yaml100+rego10", 10}} {
			b.Run(fmt.Sprintf("series=%d/%s", n, tc.name), func(b *testing.B) {
				d := New(Config{PolicyTimeout: time.Minute})
				d.SetRules(benchRules(b, tc.policies))
				ctx := context.Background()
				// Warm up: baselines, alerts and a full minute of windows
				// exist before timing.
				for i := 0; i < 7; i++ {
					if _, err := d.Evaluate(ctx, benchSnapshot(n, i)); err != nil {
						b.Fatal(err)
					}
				}
				snaps := []*snapshot.Snapshot{benchSnapshot(n, 7), benchSnapshot(n, 8)}
				b.ReportAllocs()
				b.ResetTimer()
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				cpu0 := cpuTime()
				for i := 0; i < b.N; i++ {
					s := snaps[i%2]
					s.Time = t0.Add(time.Duration(9+i) * 10 * time.Second)
					if _, err := d.Evaluate(ctx, s); err != nil {
						b.Fatal(err)
					}
				}
				cpu := cpuTime() - cpu0
				runtime.ReadMemStats(&ms1)
				b.StopTimer()
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e6, "cpu-ms/op")
				if st := d.Stats(); st.PolicyErrors+st.RuleErrors > 0 {
					b.Fatalf("errors during the benchmark: %+v", st)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/series")
				b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(b.N)/float64(n), "allocB/series")
			})
		}
	}
}

// BenchmarkMemoryPerSeries measures the heap a detector keeps per series
// (anomaly baselines of the 20 anomaly rules, alert state, and a minute of
// windows for the rules' default range) after several cycles, not counting
// the snapshot itself.
func BenchmarkMemoryPerSeries(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("series=%d", n), func(b *testing.B) {
			cfg := benchRules(b, 0)
			snaps := []*snapshot.Snapshot{benchSnapshot(n, 0), benchSnapshot(n, 1)}
			var perSeries float64
			for i := 0; i < b.N; i++ {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				d := New(Config{})
				d.SetRules(cfg)
				for step := 0; step < 8; step++ {
					s := snaps[step%2]
					s.Time = t0.Add(time.Duration(step) * 10 * time.Second)
					d.Evaluate(context.Background(), s)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perSeries = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)
				st := d.Stats()
				runtime.KeepAlive(d)
				b.ReportMetric(float64(st.Baselines)/float64(n), "baselines/series")
				b.ReportMetric(float64(st.Firing+st.Pending)/float64(n), "alerts/series")
			}
			b.ReportMetric(perSeries, "B/series")
		})
	}
}

// BenchmarkOverrunFlood is the cost of one overrun in a flood from a few
// spans: almost all are folded into a recent alert.
func BenchmarkOverrunFlood(b *testing.B) {
	d := New(Config{OverrunInterval: time.Minute})
	d.SetRules(mustParse(b, "budgets:\n  - {span: \"*\", budget: 1ms, labels: {severity: page}}\n"))
	ctx := context.Background()
	os := make([]snapshot.Overrun, 16)
	for i := range os {
		os[i] = overrun(0, fmt.Sprintf("span%d", i%4), fmt.Sprintf("proc%d", i/4))
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		o := os[i%len(os)]
		o.Time = t0.Add(time.Duration(i) * time.Microsecond)
		d.Overrun(ctx, o)
	}
	if st := d.Stats(); st.OverrunAlerts > uint64(16*(1+b.N/60_000_000)) {
		b.Fatalf("sent %d alerts", st.OverrunAlerts)
	}
}

// BenchmarkRange is the cost of the rules' default range alone: every
// series of a snapshot aggregated over a minute of 10s windows, each with
// a real histogram (merged exactly, three quantiles taken), against the
// same series over the newest window alone (the snapshot's own series).
func BenchmarkRange(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		for _, over := range []time.Duration{0, time.Minute} {
			b.Run(fmt.Sprintf("series=%d/over=%v", n, over), func(b *testing.B) {
				h := newHistory()
				var s *snapshot.Snapshot
				for step := 0; step < 8; step++ {
					s = benchSnapshot(n, step)
					h.observe(s, time.Minute)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for r := range h.agg {
						delete(h.agg, r)
					}
					h.aggregateAll(over)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/series")
			})
		}
	}
}

// BenchmarkStateSave is what an evaluation adds when the detector keeps
// its state for a restart (Config.Store): encoding the alerts, the range
// history (the default 1m range: six 10s windows of every series) and the
// baselines, over 1k and 10k series, beside the evaluation itself
// (BenchmarkEvaluate's 100 rules). It reports the state's size. Restore is
// the decoding, once at start.
func BenchmarkStateSave(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		d := New(Config{ExternalLabels: map[string]string{}})
		d.SetRules(benchRules(b, 0))
		for step := 0; step < 7; step++ {
			if _, err := d.Evaluate(context.Background(), benchSnapshot(n, step)); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("series=%d/encode", n), func(b *testing.B) {
			var size int
			for range b.N {
				d.evalMu.Lock()
				data, err := d.marshalState(t0, nil)
				d.evalMu.Unlock()
				if err != nil {
					b.Fatal(err)
				}
				size = len(data)
			}
			b.ReportMetric(float64(size), "state-bytes")
			b.ReportMetric(float64(size)/float64(n), "bytes/series")
		})
		b.Run(fmt.Sprintf("series=%d/evaluate", n), func(b *testing.B) {
			for i := range b.N {
				if _, err := d.Evaluate(context.Background(), benchSnapshot(n, 7+i)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("series=%d/restore", n), func(b *testing.B) {
			d.evalMu.Lock()
			data, _ := d.marshalState(t0.Add(time.Minute), nil)
			d.evalMu.Unlock()
			store := &memStore{data: map[string][]byte{stateName: data}}
			for range b.N {
				r := New(Config{ExternalLabels: map[string]string{}, Store: store})
				if _, err := r.Restore(t0.Add(time.Minute + time.Second)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
