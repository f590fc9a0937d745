package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/spanwatch/spanwatch/snapshot"
)

func benchSnapshot(n int) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Version: snapshot.Version, Time: time.Unix(1700000000, 0), WindowNs: 10e9, Series: make([]snapshot.Series, n)}
	for i := range s.Series {
		count := uint64(50 + i%100)
		errs := uint64(0)
		p99 := uint64(20e6 + (i%50)*1e6)
		if i%100 == 7 {
			p99, errs = 900e6, count/5
		}
		s.Series[i] = snapshot.Series{
			Span: fmt.Sprintf("svc%d.op%d", i%20, i%200), CgroupID: uint64(1000 + i/200),
			Identity: snapshot.Identity{Container: fmt.Sprintf("web-%d", i/200), Process: "api"},
			Count:    count, Rate: float64(count) / 10, Errors: errs, ErrorRatio: float64(errs) / float64(count),
			SumNs: count * 10e6, P50Ns: 8e6, P90Ns: 15e6, P99Ns: p99, MaxNs: p99 + 1e6,
		}
	}
	return s
}

func benchPolicies(tb testing.TB, n int) []*Policy {
	tb.Helper()
	dir := tb.TempDir()
	var b strings.Builder
	b.WriteString("policies:\n")
	for i := 0; i < n; i++ {
		rego := fmt.Sprintf(`package spanwatch

alerts contains {"labels": object.union(s.labels, {"alertname": "Policy%d"}), "annotations": {"summary": sprintf("p99 %%v", [s.p99_ns])}} if {
	some s in input.series
	s.count >= data.min_count
	s.p99_ns > data.limit_ns
	s.error_ratio > %d / 100
}
`, i, 5+i)
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("p%d.rego", i)), []byte(rego), 0o644)
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("p%d.json", i)), []byte(fmt.Sprintf(`{"min_count": 10, "limit_ns": %d}`, 400e6+i*1e6)), 0o644)
		fmt.Fprintf(&b, "  - {file: p%d.rego, data: p%d.json}\n", i, i)
	}
	path := filepath.Join(dir, "rules.yaml")
	os.WriteFile(path, []byte(b.String()), 0o644)
	cfg, err := LoadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return cfg.Policies
}

// BenchmarkRegoInput compares ways to give 10 policies the same snapshot:
// a Batch (each series converted once, for the policies whose prefilter
// keeps it: what the detector does), the whole snapshot converted to an
// ast.Value once and shared (what the detector did before the
// prefilter), converted once per policy, and passed as a Go value for OPA
// to convert itself on every evaluation (rego.EvalInput, the usual
// embedding). Each reports the process's CPU time per op (cpu-ms/op),
// steadier than wall time on a shared machine.
func BenchmarkRegoInput(b *testing.B) {
	cpuMetric := func(b *testing.B, f func()) {
		b.ReportAllocs()
		cpu0 := cpuTime()
		for i := 0; i < b.N; i++ {
			f()
		}
		b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N)/1e6, "cpu-ms/op")
	}
	for _, n := range []int{1000, 10000} {
		snap := benchSnapshot(n)
		pols := benchPolicies(b, 10)
		ctx := context.Background()
		eval := func(p *Policy, in InputValue) {
			if _, err := p.Eval(ctx, in); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("series=%d/batch", n), func(b *testing.B) {
			cpuMetric(b, func() {
				batch := NewBatch(snap)
				for _, p := range pols {
					eval(p, batch.Input(p, snap.Series, snap.Window()))
				}
			})
		})
		b.Run(fmt.Sprintf("series=%d/converted-once", n), func(b *testing.B) {
			cpuMetric(b, func() {
				in := Input(snap)
				for _, p := range pols {
					eval(p, in)
				}
			})
		})
		b.Run(fmt.Sprintf("series=%d/converted-per-policy", n), func(b *testing.B) {
			cpuMetric(b, func() {
				for _, p := range pols {
					eval(p, Input(snap))
				}
			})
		})
		b.Run(fmt.Sprintf("series=%d/raw-input-per-policy", n), func(b *testing.B) {
			// The Go form OPA would get from the snapshot's JSON.
			raw, _ := json.Marshal(map[string]any{"series": inputSeries(snap)})
			var in any
			json.Unmarshal(raw, &in)
			b.ResetTimer()
			cpuMetric(b, func() {
				for _, p := range pols {
					if _, err := p.query.Eval(ctx, rego.EvalInput(in)); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
		b.Run(fmt.Sprintf("series=%d/convert-only", n), func(b *testing.B) {
			cpu0 := cpuTime()
			cpuMetric(b, func() { Input(snap) })
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/series")
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N)/float64(n), "cpu-ns/series")
		})
	}
}

// inputSeries is the series part of Input as plain Go values.
func inputSeries(s *snapshot.Snapshot) []map[string]any {
	out := make([]map[string]any, len(s.Series))
	for i := range s.Series {
		x := &s.Series[i]
		out[i] = map[string]any{
			"span": x.Span, "cgroup_id": x.CgroupID, "container": x.Container, "process": x.Process,
			"count": x.Count, "rate": x.Rate, "errors": x.Errors, "error_ratio": x.ErrorRatio,
			"p50_ns": x.P50Ns, "p90_ns": x.P90Ns, "p99_ns": x.P99Ns, "max_ns": x.MaxNs,
			"labels": x.Labels(),
		}
	}
	return out
}

// BenchmarkRegoBySpan compares a policy about one span that scans every
// series with one that looks the span up in input.by_span, each over the
// whole input and over a Batch's (which converts its snapshot each time).
func BenchmarkRegoBySpan(b *testing.B) {
	snap := benchSnapshot(10000)
	in := Input(snap)
	for _, tc := range []struct{ name, loop string }{
		{"scan", "some s in input.series\n\ts.span == \"svc3.op43\""},
		{"by_span", "some s in input.by_span[\"svc3.op43\"]"},
	} {
		dir := b.TempDir()
		src := "package spanwatch\n\nalerts contains {\"labels\": {\"alertname\": \"Slow\", \"cgroup\": sprintf(\"%d\", [s.cgroup_id])}} if {\n\t" + tc.loop + "\n\ts.p99_ns > 40000000\n}\n"
		os.WriteFile(filepath.Join(dir, "p.rego"), []byte(src), 0o644)
		os.WriteFile(filepath.Join(dir, "r.yaml"), []byte("policies: [p.rego]\n"), 0o644)
		cfg, err := LoadFile(filepath.Join(dir, "r.yaml"))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			var n int
			for i := 0; i < b.N; i++ {
				got, err := cfg.Policies[0].Eval(context.Background(), in)
				if err != nil {
					b.Fatal(err)
				}
				n = len(got)
			}
			if n != 50 {
				b.Fatalf("%d alerts, want 50", n)
			}
		})
		// The same policy with its input from a Batch: the scan's
		// s.span == "svc3.op43" runs in Go first (prefilter), by_span
		// holds only that span.
		b.Run(tc.name+"/batch", func(b *testing.B) {
			var n int
			for i := 0; i < b.N; i++ {
				p := cfg.Policies[0]
				got, err := p.Eval(context.Background(), NewBatch(snap).Input(p, snap.Series, snap.Window()))
				if err != nil {
					b.Fatal(err)
				}
				n = len(got)
			}
			if n != 50 {
				b.Fatalf("%d alerts, want 50", n)
			}
		})
	}
}

// BenchmarkFilter is the prefilter of the 10 benchmark policies over 100k
// series (each policy: count >= 10, then p99_ns over a limit, which 1% of
// series pass, then error_ratio), the guards tried most selective first
// (filter, what Batch does) against in the policy's order.
func BenchmarkFilter(b *testing.B) {
	snap := benchSnapshot(100000)
	pols := benchPolicies(b, 10)
	inOrder := func(n *inputNeeds, series []snapshot.Series, out []int32) []int32 {
		for i := range series {
			for _, gs := range n.iters {
				ok := true
				for j := range gs {
					if !gs[j].holds(&series[i]) {
						ok = false
						break
					}
				}
				if ok {
					out = append(out, int32(i))
					break
				}
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    func(*inputNeeds, []snapshot.Series, []int32) []int32
	}{{"selective-first", (*inputNeeds).filter}, {"policy-order", inOrder}} {
		b.Run(tc.name, func(b *testing.B) {
			var sel []int32
			cpu0 := cpuTime()
			for range b.N {
				for _, p := range pols {
					sel = tc.f(&p.needs, snap.Series, sel[:0])
				}
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N)/1e6, "cpu-ms/op")
			if len(sel) != 1000 {
				b.Fatalf("kept %d series, want 1000", len(sel))
			}
		})
	}
}
