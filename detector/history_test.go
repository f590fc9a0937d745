package detector

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/policy"
	"github.com/spanwatch/spanwatch/snapshot"
)

// spans builds one window's series from raw durations, the way the
// collector does: exact counts, sum and extremes, a schema-6 histogram,
// quantiles from it.
func spans(span string, errors uint64, window time.Duration, durs ...uint64) snapshot.Series {
	s := snapshot.Series{Span: span, Identity: snapshot.Identity{Container: "web-1"}, CgroupID: 42, Count: uint64(len(durs)), Errors: errors}
	if len(durs) == 0 {
		return s
	}
	s.Histogram = snapshot.DurationHistogram(durs)
	s.MinNs, s.MaxNs = slices.Min(durs), slices.Max(durs)
	for _, d := range durs {
		s.SumNs += d
	}
	s.SetRates(window)
	s.SetQuantiles(snapshot.HistogramQuantiles(s.Histogram, float64(s.MinNs), float64(s.MaxNs)))
	return s
}

func repeat(d uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = d
	}
	return out
}

// TestRangeExact evaluates rules over ranges of windows with real
// histograms and checks every metric against the same window set merged
// by hand: counts and sums added, the histogram of all the durations, its
// quantiles clamped to the exact extremes. It is not an average of
// per-window values: the slow window's 10 spans are 1.7% of the minute, so
// the minute's p99 is theirs, while the average of the six windows' p99s
// is far below.
func TestRangeExact(t *testing.T) {
	const interval = 10 * time.Second
	ms := uint64(time.Millisecond)
	rng := rand.New(rand.NewPCG(1, 2))
	var windows [][]uint64
	var errs []uint64
	for w := 0; w < 12; w++ {
		var durs []uint64
		for i := 0; i < 100; i++ {
			durs = append(durs, 5*ms+uint64(rng.IntN(int(20*ms))))
		}
		if w == 8 {
			durs = append(durs[:90], repeat(500*ms, 10)...) // 10 slow spans in one window
		}
		windows = append(windows, durs)
		errs = append(errs, uint64(w%3))
	}
	for _, tc := range []struct {
		over    string
		windows int // how many of the newest windows the range covers
	}{
		{"0s", 1}, {"5s", 1}, {"10s", 1}, {"14s", 1}, {"15s", 2}, {"30s", 3}, {"1m", 6}, {"64s", 6}, {"65s", 7}, {"2m", 12}, {"5m", 12},
	} {
		t.Run("over="+tc.over, func(t *testing.T) {
			d := New(Config{ExternalLabels: map[string]string{}})
			d.SetRules(mustParse(t, fmt.Sprintf("rules:\n  - {name: R, span: checkout, when: count >= 0, over: %s, annotations: {v: \"{{ .Series.Count }} {{ .Series.Errors }} {{ .Series.SumNs }} {{ .Series.MinNs }} {{ .Series.P50Ns }} {{ .Series.P90Ns }} {{ .Series.P99Ns }} {{ .Series.MaxNs }} {{ .Series.Rate }} {{ .Series.ErrorRatio }}\"}}\n", tc.over)))
			var got string
			for w := range windows {
				changed, err := d.Evaluate(context.Background(), snap(w, spans("checkout", errs[w], interval, windows[w]...)))
				if err != nil {
					t.Fatal(err)
				}
				if w == 0 && len(changed) != 1 {
					t.Fatalf("changed %v", states(changed))
				}
				got = d.Alerts()[0].Annotations["v"]
			}
			// The same windows merged by hand.
			var all []uint64
			var nerr uint64
			for w := len(windows) - tc.windows; w < len(windows); w++ {
				all = append(all, windows[w]...)
				nerr += errs[w]
			}
			h := snapshot.DurationHistogram(all)
			var sum uint64
			for _, x := range all {
				sum += x
			}
			mn, mx := slices.Min(all), slices.Max(all)
			// Rounded to the nanosecond, as every series' quantiles are
			// (Series.SetQuantiles).
			q := func(p float64) uint64 { return uint64(math.Round(snapshot.Quantile(h, p, float64(mn), float64(mx)))) }
			covered := time.Duration(tc.windows) * interval
			want := fmt.Sprintf("%d %d %d %d %d %d %d %d %v %v", len(all), nerr, sum, mn, q(0.5), q(0.9), q(0.99), mx,
				float64(len(all))/covered.Seconds(), float64(nerr)/float64(len(all)))
			if got != want {
				t.Errorf("over %s:\n got %s\nwant %s", tc.over, got, want)
			}
		})
	}
	// The point of merging: the minute's p99 is the slow spans', while an
	// average of the per-window p99s would hide them.
	var avg float64
	for w := 6; w < 12; w++ {
		avg += float64(spans("checkout", 0, interval, windows[w]...).P99Ns) / 6
	}
	var all []uint64
	for w := 6; w < 12; w++ {
		all = append(all, windows[w]...)
	}
	exact := snapshot.Quantile(snapshot.DurationHistogram(all), 0.99, float64(slices.Min(all)), float64(slices.Max(all)))
	if exact < 490e6 || avg > 200e6 {
		t.Fatalf("test data: exact p99 %v, average of window p99s %v", exact, avg)
	}
}

// TestRangeMetricSeries checks an argument metric's range: signed sums,
// extremes, and quantiles of the merged histogram with negative buckets.
func TestRangeMetricSeries(t *testing.T) {
	mk := func(vals ...int64) snapshot.Series {
		s := snapshot.Series{Kind: snapshot.KindMetric, Span: "queue_depth", Count: uint64(len(vals)), Min: math.MaxInt64, Max: math.MinInt64}
		for _, v := range vals {
			s.Sum += v
			s.Min, s.Max = min(s.Min, v), max(s.Max, v)
			var b snapshot.Bucket
			switch {
			case v == 0:
				b = snapshot.Bucket{Zero: true, Low: 0, High: 1, Count: 1}
			case v < 0:
				b = snapshot.ValueBucketAt(snapshot.ValueIndex(uint64(-v)), true, 1)
			default:
				b = snapshot.ValueBucketAt(snapshot.ValueIndex(uint64(v)), false, 1)
			}
			s.Histogram = snapshot.MergeHistogram(s.Histogram, []snapshot.Bucket{b})
		}
		s.P50 = snapshot.Quantile(s.Histogram, 0.5, float64(s.Min), float64(s.Max))
		s.P90 = snapshot.Quantile(s.Histogram, 0.9, float64(s.Min), float64(s.Max))
		s.P99 = snapshot.Quantile(s.Histogram, 0.99, float64(s.Min), float64(s.Max))
		return s
	}
	a, b := []int64{-50, -3, 0, 7, 7, 9}, []int64{1000, 12, -8, 3}
	h := newHistory()
	h.observe(snap(0, mk(a...)), time.Minute)
	h.observe(snap(1, mk(b...)), time.Minute)
	got := h.aggregated(time.Minute, 0)
	want := mk(append(slices.Clone(a), b...)...)
	if got.Count != want.Count || got.Sum != want.Sum || got.Min != want.Min || got.Max != want.Max ||
		got.P50 != want.P50 || got.P90 != want.P90 || got.P99 != want.P99 {
		t.Errorf("range of a metric series:\n got %+v\nwant %+v", *got, want)
	}
}

// TestRangeMembership checks which windows a range takes when window
// lengths jitter: each window whose midpoint is within the range.
func TestRangeMembership(t *testing.T) {
	for _, tc := range []struct {
		lengths []time.Duration // oldest first
		over    time.Duration
		want    int
	}{
		{[]time.Duration{10 * time.Second, 10 * time.Second, 10 * time.Second}, 0, 1},
		{[]time.Duration{10 * time.Second, 10 * time.Second, 10 * time.Second}, 20 * time.Second, 2},
		{[]time.Duration{10010 * time.Millisecond, 9990 * time.Millisecond, 10020 * time.Millisecond, 10 * time.Second}, 30 * time.Second, 3},
		{[]time.Duration{time.Second, time.Second, 58 * time.Second}, time.Minute, 3},
		{[]time.Duration{time.Second, 3 * time.Second, 58 * time.Second}, time.Minute, 2},
		{[]time.Duration{10 * time.Second, 10 * time.Second}, time.Hour, 2},
	} {
		h := newHistory()
		start := t0
		for _, l := range tc.lengths {
			start = start.Add(l)
			h.observe(&snapshot.Snapshot{Time: start, WindowNs: int64(l)}, time.Hour)
		}
		first, _ := h.span(tc.over)
		if got := int(h.seq - first + 1); got != tc.want {
			t.Errorf("windows %v over %v: %d windows, want %d", tc.lengths, tc.over, got, tc.want)
		}
	}
}

// TestDefaultRangeDoesNotFlap feeds a p99 rule the traffic that made the
// demo's CheckoutSlow flap: per 1s window, a few spans, one slow span in
// some windows and none in others. Over the newest window alone the rule
// flips every few windows; over the default range it fires once and stays
// firing.
func TestDefaultRangeDoesNotFlap(t *testing.T) {
	ms := uint64(time.Millisecond)
	flips := func(over string) (fired, resolved int) {
		d := New(Config{ExternalLabels: map[string]string{}})
		src := "rules:\n  - {name: CheckoutSlow, span: checkout, when: p99 > 50ms" + over + "}\n"
		d.SetRules(mustParse(t, src))
		rng := rand.New(rand.NewPCG(3, 4))
		for w := 0; w < 60; w++ {
			var durs []uint64
			for i := 0; i < 20; i++ {
				durs = append(durs, 2*ms+uint64(rng.IntN(int(8*ms))))
			}
			if rng.IntN(3) == 0 { // a third of the windows hold one slow checkout
				durs[0] = 150 * ms
			}
			s := &snapshot.Snapshot{Version: snapshot.Version, Time: t0.Add(time.Duration(w) * time.Second), WindowNs: int64(time.Second),
				Series: []snapshot.Series{spans("checkout", 0, time.Second, durs...)}}
			changed, _ := d.Evaluate(context.Background(), s)
			for _, a := range changed {
				switch a.State {
				case "firing":
					fired++
				case "resolved":
					resolved++
				}
			}
		}
		return fired, resolved
	}
	if f, r := flips(", over: 0s"); f < 5 || r < 5 {
		t.Fatalf("over the newest window alone: fired %d, resolved %d times; the test data should flap", f, r)
	}
	if f, r := flips(""); f != 1 || r != 0 {
		t.Errorf("over the default range (%v): fired %d, resolved %d times, want fired once and never resolved", policy.DefaultOver, f, r)
	}
}

// TestHistoryBounded checks the history keeps no more than the longest
// range needs, forgets series that left, and keeps nothing when no rule
// has a range.
func TestHistoryBounded(t *testing.T) {
	d := New(Config{ExternalLabels: map[string]string{}})
	d.SetRules(mustParse(t, "rules:\n  - {name: A, when: count > 1000, over: 30s}\n  - {name: B, when: count > 1000, over: 0s}\n"))
	ctx := context.Background()
	for w := 0; w < 20; w++ {
		series := []snapshot.Series{spans("a", 0, 10*time.Second, 1e6, 2e6)}
		if w < 10 {
			series = append(series, spans("gone", 0, 10*time.Second, 1e6))
		}
		series = append(series, snapshot.Series{Span: "idle"})
		d.Evaluate(ctx, snap(w, series...))
	}
	if n := len(d.hist.wins); n != 3 {
		t.Errorf("%d windows kept, want 3 (30s of 10s windows)", n)
	}
	keys := []string{}
	for k, sh := range d.hist.series {
		keys = append(keys, strings.SplitN(k, "\x00", 3)[1])
		if len(sh.wins) > 3 {
			t.Errorf("series %q keeps %d windows", k, len(sh.wins))
		}
	}
	slices.Sort(keys)
	if fmt.Sprint(keys) != "[a idle]" {
		t.Errorf("series kept: %v, want a and idle (gone left 10 windows ago)", keys)
	}
	if sh := d.hist.series[string(seriesKey(nil, &snapshot.Series{Span: "idle"}))]; sh == nil || sh.wins != nil {
		t.Errorf("an idle series keeps windows: %+v", sh)
	}
	// No ranges: nothing kept.
	d.SetRules(mustParse(t, "rules:\n  - {name: B, when: count > 1000, over: 0s}\n"))
	d.Evaluate(ctx, snap(20, spans("a", 0, 10*time.Second, 1e6)))
	if n := len(d.hist.series); n != 0 {
		t.Errorf("without ranges the history keeps %d series", n)
	}
}

// TestPolicyRange checks a policy's input covers its range: counts summed
// over the windows, range_seconds the time they cover, window_seconds
// still the interval; two policies with different ranges see different
// inputs in the same evaluation.
func TestPolicyRange(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"rules.yaml": "policies:\n  - {file: p.rego, name: minute}\n  - {file: p.rego, name: window, over: 0s}\n",
		"p.rego": `package spanwatch

alerts contains {"labels": {"alertname": "Count", "span": s.span}, "annotations": {"value": sprintf("%d %d %v %v", [s.count, s.p99_ns, input.range_seconds, input.window_seconds])}} if {
	some s in input.series
}
`,
	})
	cfg, err := policy.LoadFile(filepath.Join(dir, "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d := New(Config{ExternalLabels: map[string]string{}})
	d.SetRules(cfg)
	ms := uint64(time.Millisecond)
	for w := 0; w < 8; w++ {
		durs := repeat(10*ms, 10)
		if w == 7 {
			durs = repeat(20*ms, 10)
		} else if w == 4 {
			durs[0] = 900 * ms
		}
		d.Evaluate(context.Background(), snap(w, spans("a", 0, 10*time.Second, durs...)))
	}
	got := map[string]string{}
	for _, g := range d.groups {
		for _, ac := range g.active {
			got[g.name] = ac.a.Value
		}
	}
	// The minute: windows 2..7, 60 spans, the 900ms one at rank 60 of 60
	// (p99 is the maximum); the window: window 7 alone.
	if got["minute"] != "60 900000000 60 10" || got["window"] != "10 20000000 10 10" {
		t.Errorf("policy values %v", got)
	}
}

// TestRangeParallel aggregates a range on several goroutines and on one,
// and requires the same series (run with -race).
func TestRangeParallel(t *testing.T) {
	const n = 3 * parallelMin
	run := func(workers int) []snapshot.Series {
		h := newHistory()
		for step := 0; step < 8; step++ {
			h.observe(benchSnapshot(n, step), time.Minute)
		}
		h.prepare(time.Minute, nil, workers)
		a := h.agg[time.Minute]
		for i, done := range a.done {
			if !done {
				t.Fatalf("%d workers: series %d not aggregated", workers, i)
			}
		}
		return slices.Clone(a.series)
	}
	seq, par := run(1), run(4)
	for i := range seq {
		if fmt.Sprint(seq[i]) != fmt.Sprint(par[i]) {
			t.Fatalf("series %d differs:\none worker %+v\nfour       %+v", i, seq[i], par[i])
		}
	}
	if seq[7].P99Ns < 800e6 || seq[0].Count < 300 {
		t.Errorf("aggregates look wrong: %+v", seq[7])
	}
}
