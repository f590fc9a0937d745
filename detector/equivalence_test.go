package detector

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestFastEqualsStraight runs random rule sets over random series through
// two detectors: one with every shortcut of the evaluation (rules over
// many series on 4 goroutines, baselines kept by each series, the history
// aligned with the last window's order) and one without (Detector.straight:
// one goroutine, every baseline looked up in the detector's map, every
// series' history looked up in its map). Every cycle, both must return
// the same changed alerts (labels, annotations, state, times, values),
// hold the same alerts, keep the same baselines, and their histories
// the same series and bytes. Series come and go,
// are listed in a new order at times (the alignment's miss), repeat a
// key at times (two series sharing a history), and the rule set changes
// half-way (baselines of removed rules dropped, then made again).
func TestFastEqualsStraight(t *testing.T) {
	defer func(n int) { ruleParallelMin = n }(ruleParallelMin)
	ruleParallelMin = 8
	for seed := int64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			fast := New(Config{PolicyWorkers: 4, ExternalLabels: map[string]string{}, BaselineTTL: 40 * time.Second})
			slow := New(Config{PolicyWorkers: 1, ExternalLabels: map[string]string{}, BaselineTTL: 40 * time.Second})
			slow.straight = true
			rules := [2]string{randomRules(rng), randomRules(rng)}
			universe := randomUniverse(rng, 300)
			order := rng.Perm(len(universe))
			ctx := context.Background()
			for step := 0; step < 24; step++ {
				if step%12 == 0 {
					cfg := mustParse(t, rules[step/12])
					fast.SetRules(cfg)
					slow.SetRules(cfg)
				}
				if rng.Intn(5) == 0 {
					order = rng.Perm(len(universe))
				}
				s := randomSnapshot(rng, step, universe, order)
				a, err := fast.Evaluate(ctx, s)
				if err != nil {
					t.Fatal(err)
				}
				b, err := slow.Evaluate(ctx, s)
				if err != nil {
					t.Fatal(err)
				}
				if len(a) == 0 && step > 8 {
					t.Logf("step %d: no alert changed", step)
				}
				if diff := alertsDiff(a, b); diff != "" {
					t.Fatalf("step %d: changed alerts differ: %s", step, diff)
				}
				if diff := alertsDiff(fast.Alerts(), slow.Alerts()); diff != "" {
					t.Fatalf("step %d: alerts held differ: %s", step, diff)
				}
				if !reflect.DeepEqual(baselinesOf(fast), baselinesOf(slow)) {
					t.Fatalf("step %d: baselines differ: %d vs %d", step, len(fast.baselines), len(slow.baselines))
				}
				if fh, sh := fast.hist, slow.hist; fh.bytes != sh.bytes || len(fh.series) != len(sh.series) {
					t.Fatalf("step %d: histories differ: %d bytes, %d series vs %d bytes, %d series", step, fh.bytes, len(fh.series), sh.bytes, len(sh.series))
				}
			}
			if st := fast.Stats(); st.Firing == 0 || st.Baselines == 0 {
				t.Fatalf("the rules did too little to compare: %+v", st)
			}
		})
	}
}

// seriesID is one series of the random universe.
type seriesID struct {
	span, container string
	cgroup          uint64
}

func randomUniverse(rng *rand.Rand, n int) []seriesID {
	spans := []string{"a.get", "a.put", "b.get", "b.scan", "c.run", "checkout"}
	out := make([]seriesID, n)
	for i := range out {
		out[i] = seriesID{span: spans[rng.Intn(len(spans))], container: fmt.Sprintf("%s-%d", []string{"web", "db"}[rng.Intn(2)], i%7), cgroup: uint64(100 + i)}
	}
	return out
}

// randomSnapshot lists about 85% of the universe in the given order, each
// with a histogram of random durations; now and then a series repeats.
func randomSnapshot(rng *rand.Rand, step int, universe []seriesID, order []int) *snapshot.Snapshot {
	s := snap(step)
	for _, i := range order {
		if rng.Intn(100) < 15 {
			continue
		}
		id := universe[i]
		n := rng.Intn(40)
		durs := make([]uint64, n)
		slow := rng.Intn(10) == 0
		for k := range durs {
			durs[k] = uint64(1e6 + rng.Intn(20e6))
			if slow && k%3 == 0 {
				durs[k] = uint64(300e6 + rng.Intn(700e6))
			}
		}
		se := snapshot.Series{Span: id.span, CgroupID: id.cgroup, Identity: snapshot.Identity{Container: id.container}, Count: uint64(n), Rate: float64(n) / 10}
		if n > 0 {
			se.Histogram = snapshot.DurationHistogram(durs)
			se.MinNs, se.MaxNs = slices.Min(durs), slices.Max(durs)
			for _, d := range durs {
				se.SumNs += d
			}
			se.SetQuantiles(snapshot.HistogramQuantiles(se.Histogram, float64(se.MinNs), float64(se.MaxNs)))
			se.Errors = uint64(rng.Intn(n + 1))
			if !slow {
				se.Errors /= 8
			}
			se.ErrorRatio = float64(se.Errors) / float64(n)
		}
		s.Series = append(s.Series, se)
		if rng.Intn(200) == 0 {
			s.Series = append(s.Series, se) // the same key twice
		}
	}
	return s
}

// randomRules writes 30 rules: thresholds on latency, errors and rate,
// and anomaly rules, over spans exact or globbed, some with a container
// glob, ranges from the newest window alone to 1m, some with for:.
func randomRules(rng *rand.Rand) string {
	var b strings.Builder
	b.WriteString("rules:\n")
	spans := []string{"a.get", "a.*", "*.get", "*", "checkout", "b.*"}
	overs := []string{"", "over: 0s, ", "over: 20s, ", "over: 30s, ", "over: 1m, "}
	for i := 0; i < 30; i++ {
		fmt.Fprintf(&b, "  - {name: R%d_%d, span: %q, %s", i, rng.Intn(2), spans[rng.Intn(len(spans))], overs[rng.Intn(len(overs))])
		if rng.Intn(3) == 0 {
			b.WriteString(`container: "web-*", `)
		}
		if rng.Intn(3) == 0 {
			fmt.Fprintf(&b, "for: %ds, ", 10*rng.Intn(3))
		}
		switch rng.Intn(5) {
		case 0:
			fmt.Fprintf(&b, "when: p99 > %dms, ", 50+rng.Intn(500))
		case 1:
			fmt.Fprintf(&b, "when: error_ratio > %d%% and count > %d, ", 5+rng.Intn(30), rng.Intn(20))
		case 2:
			fmt.Fprintf(&b, "when: rate < %d/s, ", 1+rng.Intn(3))
		default:
			fmt.Fprintf(&b, "anomaly: {metric: %s, sensitivity: %d, min_count: %d}, ", []string{"p99", "error_ratio", "p50"}[rng.Intn(3)], 1+rng.Intn(3), rng.Intn(10))
		}
		b.WriteString(`annotations: {summary: "{{ .Labels.span }} {{ .Value }} vs {{ .Threshold }}"}}` + "\n")
	}
	return b.String()
}

// alertsDiff compares two lists of alerts in fingerprint order.
func alertsDiff(a, b []*alert.Alert) string {
	sorted := func(l []*alert.Alert) []*alert.Alert {
		l = slices.Clone(l)
		slices.SortFunc(l, func(x, y *alert.Alert) int {
			return strings.Compare(x.Fingerprint+string(x.State), y.Fingerprint+string(y.State))
		})
		return l
	}
	a, b = sorted(a), sorted(b)
	if len(a) != len(b) {
		return fmt.Sprintf("%d alerts vs %d", len(a), len(b))
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			return fmt.Sprintf("%+v vs %+v", *a[i], *b[i])
		}
	}
	return ""
}

func baselinesOf(d *Detector) map[string]baselineEntry {
	out := make(map[string]baselineEntry, len(d.baselines))
	for k, be := range d.baselines {
		out[k] = *be
	}
	return out
}
