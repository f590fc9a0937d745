//go:build linux

package collector

import (
	"fmt"
	"math"
	"math/rand"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/internal/bpftest"

	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestCoreBucketIndexMatchesGo checks the kernel's integer bucket index
// against package snapshot's (itself checked against the definition with
// 300-bit floats), around every bucket bound from 1 ns to 10^4 s and for
// random values, for durations and metric values.
func TestCoreBucketIndexMatchesGo(t *testing.T) {
	forEachCore(t, func(t *testing.T, core kernel.Core) {
		ct := newCoreTest(t, Config{Core: core, MaxSeries: 1024, HistogramCells: 4096})
		rng := rand.New(rand.NewSource(1))
		for _, metric := range []bool{false, true} {
			index, bounds := snapshot.DurationIndex, snapshot.DurationBounds
			if metric {
				index, bounds = snapshot.ValueIndex, snapshot.ValueBounds
			}
			var vals []uint64
			for i := index(1); i <= index(1e13); i++ {
				lo, hi := bounds(i)
				for _, v := range []uint64{lo - 1, lo, hi - 1, hi} {
					if v >= 1 {
						vals = append(vals, v)
					}
				}
			}
			for len(vals)%(1<<16) != 0 {
				vals = append(vals, 1+rng.Uint64()>>uint(1+rng.Intn(63)))
			}
			for off := 0; off < len(vals); off += 1 << 16 {
				chunk := vals[off : off+1<<16]
				got := ct.indexes(t, chunk, metric)
				for i, v := range chunk {
					if want := index(v); got[i] != want {
						t.Fatalf("metric=%v: kernel index of %d is %d, Go says %d", metric, v, got[i], want)
					}
				}
			}
		}
	})
}

// TestCoreExact aggregates known values and checks every figure of the
// window: counts, errors, sum, exact min and max, the histogram bucket by
// bucket, and quantiles within 1% of the exact nearest-rank ones and inside
// [min, max].
func TestCoreExact(t *testing.T) {
	forEachCore(t, func(t *testing.T, core kernel.Core) {
		ct := newCoreTest(t, Config{Core: core, MaxSeries: 1024, HistogramCells: 1 << 16})
		rng := rand.New(rand.NewSource(2))
		gens := map[string]func() uint64{
			"lognormal": func() uint64 { return uint64(math.Exp(rng.NormFloat64()*1.5+14)) + 1 },
			"bimodal": func() uint64 {
				if rng.Intn(100) < 95 {
					return 2e6 + uint64(rng.Int63n(1e6))
				}
				return 250e6 + uint64(rng.Int63n(50e6))
			},
			"narrow": func() uint64 { return 180_700_000 + uint64(rng.Int63n(997)) },
			"zeros":  func() uint64 { return uint64(rng.Intn(3)) },
		}
		want := map[string][]uint64{}
		var es []entry
		errs := map[string]uint64{}
		for name, gen := range gens {
			for i := 0; i < 5000; i++ {
				v := gen()
				want[name] = append(want[name], v)
				e := i%7 == 0
				if e {
					errs[name]++
				}
				es = append(es, entry{Name: name, Cgroup: 77, Value: v, Error: e})
			}
		}
		rng.Shuffle(len(es), func(i, j int) { es[i], es[j] = es[j], es[i] })
		ct.aggregate(t, es)
		s, got := ct.snapshot(t)
		if s.Stats.HistogramFull != 0 || s.Stats.StatsFull != 0 {
			t.Fatalf("losses: %+v", s.Stats)
		}
		for name, vals := range want {
			sr, ok := got[name]
			if !ok {
				t.Fatalf("no series %s", name)
			}
			sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
			var sum uint64
			for _, v := range vals {
				sum += v
			}
			if sr.Count != uint64(len(vals)) || sr.SumNs != sum || sr.Errors != errs[name] || sr.CgroupID != 77 {
				t.Errorf("%s: count %d sum %d errors %d cgroup %d, want %d %d %d 77", name, sr.Count, sr.SumNs, sr.Errors, sr.CgroupID, len(vals), sum, errs[name])
			}
			if core == kernel.CoreCompat {
				// The bounds of the extremes' buckets (no compare-and-swap).
				if !sameDurationBucket(sr.MinNs, vals[0]) || !sameDurationBucket(sr.MaxNs, vals[len(vals)-1]) || sr.MinNs > vals[0] || sr.MaxNs < vals[len(vals)-1] {
					t.Errorf("%s: min %d max %d, want the bounds of the buckets of %d and %d", name, sr.MinNs, sr.MaxNs, vals[0], vals[len(vals)-1])
				}
				if !s.Stats.ExtremesFromBuckets {
					t.Errorf("extremes_from_buckets not set")
				}
			} else if sr.MinNs != vals[0] || sr.MaxNs != vals[len(vals)-1] {
				t.Errorf("%s: min %d max %d, want %d %d", name, sr.MinNs, sr.MaxNs, vals[0], vals[len(vals)-1])
			}
			wantHist := snapshot.DurationHistogram(vals)
			if fmt.Sprint(sr.Histogram) != fmt.Sprint(wantHist) {
				t.Errorf("%s: histogram\n%v\nwant\n%v", name, sr.Histogram, wantHist)
			}
			for q, got := range map[float64]uint64{0.5: sr.P50Ns, 0.9: sr.P90Ns, 0.99: sr.P99Ns} {
				exact := vals[int(math.Ceil(q*float64(len(vals))))-1]
				if got < sr.MinNs || got > sr.MaxNs {
					t.Errorf("%s: p%v %d outside [%d, %d]", name, q*100, got, sr.MinNs, sr.MaxNs)
				}
				if exact > 0 && math.Abs(float64(got)-float64(exact))/float64(exact) > 0.01 {
					t.Errorf("%s: p%v = %d, exact %d: more than 1%% off", name, q*100, got, exact)
				}
			}
		}
		// The next window is empty: the series stay, with zero counts.
		s, got = ct.snapshot(t)
		if len(got) != 0 || len(s.Series) != len(gens) {
			t.Fatalf("second window: %d series with counts, %d series, want 0 and %d", len(got), len(s.Series), len(gens))
		}
	})
}

// TestCoreMetric checks a metric series: signed values, exact count, sum,
// min and max, negative buckets.
func TestCoreMetric(t *testing.T) {
	forEachCore(t, func(t *testing.T, core kernel.Core) {
		ct := newCoreTest(t, Config{Core: core, MaxSeries: 1024, HistogramCells: 4096})
		vals := []int64{-5, 3, 0, 1 << 40, -(1 << 33), 7, -5, 12}
		var es []entry
		var sum int64
		for _, v := range vals {
			es = append(es, entry{Name: "bytes.delta", Cgroup: 5, Value: uint64(v), Metric: true})
			sum += v
		}
		ct.aggregate(t, es)
		_, got := ct.snapshot(t)
		sr := got["bytes.delta"]
		mn, mx := sr.Min, sr.Max
		if core == kernel.CoreCompat {
			// The bounds of the extremes' buckets: exact where a bucket
			// holds one integer, else the bucket's far end.
			if snapshot.ValueIndex(uint64(-mn)) == snapshot.ValueIndex(1<<33) && mn <= -(1<<33) {
				mn = -(1 << 33)
			}
			if snapshot.ValueIndex(uint64(mx)) == snapshot.ValueIndex(1<<40) && mx >= 1<<40 {
				mx = 1 << 40
			}
		}
		if sr.Kind != snapshot.KindMetric || sr.Count != uint64(len(vals)) || sr.Sum != sum || mn != -(1<<33) || mx != 1<<40 {
			t.Fatalf("metric series %+v, want count %d sum %d min %d max %d", sr, len(vals), sum, -(1 << 33), int64(1<<40))
		}
		var neg, zero, pos uint64
		for _, b := range sr.Histogram {
			switch {
			case b.Zero:
				zero += b.Count
			case b.Negative:
				neg += b.Count
			default:
				pos += b.Count
			}
		}
		if neg != 3 || zero != 1 || pos != 4 {
			t.Fatalf("buckets: %d negative, %d zero, %d positive; want 3, 1, 4: %+v", neg, zero, pos, sr.Histogram)
		}
	})
}

// TestCoreGlobBudgetsFirstSight gives a glob budget to names that each
// occur once: every one over budget is counted and captured at its first
// and only span (the kernel matches the glob itself), and the kernel's
// matching agrees with package glob's on awkward patterns.
func TestCoreGlobBudgetsFirstSight(t *testing.T) {
	bpftest.Require(t, kernel.Atomics, kernel.Loop)
	ct := newCoreTest(t, Config{MaxSeries: 4096, HistogramCells: 1 << 14, Core: kernel.CoreFull})
	rules := []BudgetRule{
		{Span: "exact.one", Budget: time.Millisecond},
		{Span: "db.*.select", Budget: 2 * time.Millisecond},
		{Span: "café.?", Budget: 3 * time.Millisecond},
		{Span: `lit\*star`, Budget: 4 * time.Millisecond},
		{Span: "*a*a*a*b", Budget: 5 * time.Millisecond},
		{Span: "!*", Budget: 6 * time.Millisecond}, // matches nothing
		{Span: "*", Budget: time.Second},
	}
	if err := ct.c.SetBudgets(rules); err != nil {
		t.Fatal(err)
	}
	names := []string{"exact.one", "db.users.select", "db..select", "db.select", "café.x", "café.é", "café.xy",
		"lit*star", "litXstar", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		strings.Repeat("é", 63) + "x", "plain"}
	for i := 0; i < 200; i++ {
		names = append(names, fmt.Sprintf("db.t%d.select", i))
	}
	// Go decides which budget applies, as the agent's policy does.
	budgetOf := func(n string) time.Duration {
		for _, r := range rules {
			if g, _ := glob.Compile(r.Span); g != nil {
				if x, ok := g.Exact(); ok && x == n {
					return r.Budget
				}
			}
		}
		for _, r := range rules {
			g, _ := glob.Compile(r.Span)
			if _, ok := g.Exact(); !ok && g.Match(n) {
				return r.Budget
			}
		}
		return 0
	}
	var es []entry
	want := map[string]bool{}
	for _, n := range names {
		b := budgetOf(n)
		es = append(es, entry{Name: n, Cgroup: 1, Value: uint64(b) + 1000}) // just over its budget
		want[n] = b > 0
	}
	ct.aggregate(t, es)
	s, got := ct.snapshot(t)
	for _, n := range names {
		sr := got[snapshot.TruncateName(n)]
		over := sr.OverBudget == 1
		if want[n] != over {
			t.Errorf("%q: over budget %d, want %v (budget %s)", n, sr.OverBudget, want[n], budgetOf(n))
		}
		if sr.BudgetNs != uint64(budgetOf(n)) {
			t.Errorf("%q: snapshot budget %d, want %d", n, sr.BudgetNs, budgetOf(n))
		}
	}
	nOver := 0
	for _, w := range want {
		if w {
			nOver++
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(s.Overruns) < nOver && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		s2, _ := ct.snapshot(t)
		s.Overruns = append(s.Overruns, s2.Overruns...)
	}
	if len(s.Overruns) != nOver {
		t.Fatalf("%d overrun records, want %d (one per name over budget)", len(s.Overruns), nOver)
	}
}

// TestCoreQuota fills one cgroup past its quota: its new names go to its
// "(other)" series with exact totals, and another cgroup's new names are
// unaffected.
func TestCoreQuota(t *testing.T) {
	forEachCore(t, func(t *testing.T, core kernel.Core) {
		ct := newCoreTest(t, Config{Core: core, MaxSeries: 1024, HistogramCells: 1 << 14, SeriesQuota: 10})
		var es []entry
		for i := 0; i < 25; i++ {
			for j := 0; j <= i%3; j++ {
				es = append(es, entry{Name: fmt.Sprintf("greedy.%d", i), Cgroup: 100, Value: 1000})
			}
		}
		for i := 0; i < 5; i++ {
			es = append(es, entry{Name: fmt.Sprintf("quiet.%d", i), Cgroup: 200, Value: 1000})
		}
		ct.aggregate(t, es)
		s, _ := ct.snapshot(t)
		per := map[uint64]int{}
		var greedyTotal, other uint64
		for _, sr := range s.Series {
			per[sr.CgroupID]++
			if sr.CgroupID == 100 {
				greedyTotal += sr.Count
				if sr.Span == snapshot.OtherName {
					other = sr.Count
				}
			}
		}
		if per[100] != 11 || per[200] != 5 {
			t.Fatalf("series per cgroup %v, want 11 (10 + other) and 5", per)
		}
		if greedyTotal != uint64(len(es)-5) || other == 0 || s.Stats.QuotaOther != other {
			t.Fatalf("greedy total %d (want %d), other %d, counted %d", greedyTotal, len(es)-5, other, s.Stats.QuotaOther)
		}
	})
}

// TestCoreNames checks names at and past the limit: a 200-byte UTF-8 name
// is cut on a character boundary exactly as snapshot.TruncateName cuts it,
// and the cut is counted.
func TestCoreNames(t *testing.T) {
	forEachCore(t, func(t *testing.T, core kernel.Core) {
		ct := newCoreTest(t, Config{Core: core, MaxSeries: 1024, HistogramCells: 4096})
		names := []string{
			strings.Repeat("é", 100),           // 200 bytes, 2-byte characters
			strings.Repeat("a", 126) + "€tail", // a 3-byte character across the limit
			strings.Repeat("b", 127),           // exactly the limit
			strings.Repeat("c", 128),           // one past
			"short",
			"bad\xffutf8",
		}
		var es []entry
		for _, n := range names {
			es = append(es, entry{Name: n, Cgroup: 1, Value: 5})
		}
		ct.aggregate(t, es)
		s, got := ct.snapshot(t)
		for _, n := range names {
			want := snapshot.NameString([]byte(snapshot.TruncateName(n)))
			if _, ok := got[want]; !ok {
				t.Errorf("no series %q (from %q); have %v", want, n, seriesNames(got))
			}
		}
		if s.Stats.NamesTruncated != 3 {
			t.Errorf("names truncated %d, want 3", s.Stats.NamesTruncated)
		}
	})
}

func seriesNames(m map[string]snapshot.Series) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestCoreEvictionReusesSlots evicts idle series and checks that their
// slots are reused by new series with nothing carried over.
func TestCoreEvictionReusesSlots(t *testing.T) {
	forEachCore(t, func(t *testing.T, core kernel.Core) {
		ct := newCoreTest(t, Config{Core: core, MaxSeries: 64, HistogramCells: 4096, IdleEvict: time.Nanosecond})
		var es []entry
		for i := 0; i < 64; i++ {
			es = append(es, entry{Name: fmt.Sprintf("old.%d", i), Cgroup: 1, Value: uint64(1000 + i)})
		}
		ct.aggregate(t, es)
		_, got := ct.snapshot(t)
		if len(got) != 64 {
			t.Fatalf("%d series, want 64", len(got))
		}
		// Idle: evicted at this read, freed after two more reads and 2 s.
		ct.snapshot(t)
		time.Sleep(quarantineTime)
		ct.snapshot(t)
		s, _ := ct.snapshot(t)
		if s.Stats.SeriesLive != 0 {
			t.Fatalf("%d series live after eviction", s.Stats.SeriesLive)
		}
		es = es[:0]
		for i := 0; i < 64; i++ {
			es = append(es, entry{Name: fmt.Sprintf("new.%d", i), Cgroup: 2, Value: 7})
		}
		ct.aggregate(t, es)
		s, got = ct.snapshot(t)
		if len(got) != 64 || s.Stats.StatsFull != 0 || s.Stats.NamesFull != 0 {
			t.Fatalf("%d new series (want 64), %d lost, %d names not kept", len(got), s.Stats.StatsFull, s.Stats.NamesFull)
		}
		for n, sr := range got {
			if !strings.HasPrefix(n, "new.") || sr.Count != 1 || sr.SumNs != 7 || sr.MaxNs != 7 || sr.MinNs != 7 || len(sr.Histogram) != 1 || sr.Histogram[0].Count != 1 {
				t.Fatalf("reused slot carried something over: %+v", sr)
			}
		}
	})
}

// TestCoreQuotaForgetsGoneCgroups: once a cgroup's series are all
// evicted its quota counts are deleted (a node's churn of containers must
// not fill cg_created, which would leave new cgroups without a quota), and
// a cgroup seen again starts a fresh, exact count.
func TestCoreQuotaForgetsGoneCgroups(t *testing.T) {
	forEachCore(t, func(t *testing.T, core kernel.Core) {
		ct := newCoreTest(t, Config{Core: core, MaxSeries: 256, HistogramCells: 4096, IdleEvict: time.Nanosecond, SeriesQuota: 4})
		var es []entry
		for cg := uint64(1); cg <= 20; cg++ {
			for i := 0; i < 3; i++ {
				es = append(es, entry{Name: fmt.Sprintf("s.%d", i), Cgroup: 1000 + cg, Value: 1000})
			}
		}
		ct.aggregate(t, es)
		ct.snapshot(t)
		if n := mapLen(t, ct.c.objs.CgCreated); n != 20 {
			t.Fatalf("cg_created holds %d cgroups, want 20", n)
		}
		ct.snapshot(t)
		time.Sleep(quarantineTime)
		ct.snapshot(t)
		if s, _ := ct.snapshot(t); s.Stats.SeriesLive != 0 {
			t.Fatalf("%d series live after eviction", s.Stats.SeriesLive)
		}
		if c, r := mapLen(t, ct.c.objs.CgCreated), mapLen(t, ct.c.objs.CgReleased); c != 0 || r != 0 {
			t.Fatalf("after every series was evicted cg_created holds %d cgroups, cg_released %d; want 0", c, r)
		}
		// The quota holds again for a cgroup that comes back.
		es = es[:0]
		for i := 0; i < 6; i++ {
			es = append(es, entry{Name: fmt.Sprintf("back.%d", i), Cgroup: 1001, Value: 1000})
		}
		ct.aggregate(t, es)
		s, got := ct.snapshot(t)
		if len(got) != 5 || got[snapshot.OtherName].Count != 2 || s.Stats.QuotaOther != 2 {
			t.Fatalf("%d series (want 4 and (other)), (other) %+v, quota_other %d", len(got), got[snapshot.OtherName], s.Stats.QuotaOther)
		}
	})
}

func mapLen(t *testing.T, m *ebpf.Map) int {
	t.Helper()
	var k, v uint64
	n := 0
	for it := m.Iterate(); it.Next(&k, &v); {
		n++
	}
	return n
}

// TestCoreCaptureFlags checks that a budget's capture flags decide the
// stacks of its overruns: the user stack by default, none at all with
// capture_stack: false (no stack walk), both with kernel_stack.
func TestCoreCaptureFlags(t *testing.T) {
	forEachCore(t, func(t *testing.T, core kernel.Core) {
		ct := newCoreTest(t, Config{Core: core, MaxSeries: 1024, HistogramCells: 4096})
		if err := ct.c.SetBudgets([]BudgetRule{
			{Span: "user", Budget: time.Microsecond},
			{Span: "none", Budget: time.Microsecond, NoUserStack: true},
			{Span: "both", Budget: time.Microsecond, KernelStack: true},
			{Span: "kernel", Budget: time.Microsecond, NoUserStack: true, KernelStack: true},
		}); err != nil {
			t.Fatal(err)
		}
		ct.aggregate(t, []entry{{Name: "user", Value: 5000}, {Name: "none", Value: 5000}, {Name: "both", Value: 5000}, {Name: "kernel", Value: 5000}})
		got := map[string]snapshot.Overrun{}
		for deadline := time.Now().Add(5 * time.Second); len(got) < 4 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			s, _ := ct.snapshot(t)
			for _, o := range s.Overruns {
				got[o.Span] = o
			}
		}
		for name, want := range map[string][2]bool{"user": {true, false}, "none": {false, false}, "both": {true, true}, "kernel": {false, true}} {
			o, ok := got[name]
			if !ok {
				t.Fatalf("no overrun for %s", name)
			}
			if (len(o.UserStack) > 0) != want[0] || (len(o.KernelStack) > 0) != want[1] {
				t.Errorf("%s: %d user frames, %d kernel frames; want user %v, kernel %v", name, len(o.UserStack), len(o.KernelStack), want[0], want[1])
			}
		}
	})
}

// TestCoreLateValueInQuarantine plays a program that looked a slot up just
// before its series was evicted and adds to it while the slot waits in
// quarantine: the value counts for its series (which shows again), the
// slot is freed once, and the next series to take it starts from zero.
func TestCoreLateValueInQuarantine(t *testing.T) {
	forEachCore(t, func(t *testing.T, core kernel.Core) {
		ct := newCoreTest(t, Config{Core: core, MaxSeries: 64, HistogramCells: 4096, IdleEvict: time.Nanosecond})
		ct.aggregate(t, []entry{{Name: "late", Cgroup: 3, Value: 1000}})
		if _, got := ct.snapshot(t); got["late"].Count != 1 {
			t.Fatalf("late: %+v", got["late"])
		}
		r := ct.c.reader
		ct.snapshot(t) // idle: evicted, its slot quarantined
		if len(r.quarantine) != 1 {
			t.Fatalf("%d slots in quarantine, want 1", len(r.quarantine))
		}
		slot := r.quarantine[0].slot
		// The late program's value: what series_add does.
		sl := &r.slots[slot]
		atomic.AddUint64(&sl.Count, 1)
		atomic.AddUint64(&sl.Sum, 2000)
		r.markSlotDirty(slot)
		_, got := ct.snapshot(t)
		if sr := got["late"]; sr.Count != 1 || sr.SumNs != 2000 {
			t.Fatalf("the late value: %+v, want count 1, sum 2000 for its series", sr)
		}
		time.Sleep(quarantineTime)
		ct.snapshot(t)
		ct.snapshot(t)
		if len(r.quarantine) != 0 {
			t.Fatalf("%d slots still in quarantine", len(r.quarantine))
		}
		// Freed once: the queue of free slots holds it once.
		var n int
		for {
			var s uint32
			if err := ct.c.objs.FreeSlots.LookupAndDelete(nil, &s); err != nil {
				break
			}
			if s == slot {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("slot %d was freed %d times", slot, n)
		}
	})
}

// TestCoreGlobBudgetsCompat: the compat core matches no globs (no
// bpf_loop before 5.17); the collector gives each name a glob matches an
// exact budget when it first reads the name's series. Spans before that
// read are judged against exact budgets only; from then on every span of
// the name is judged, and the snapshot reports the glob's budget all
// along.
func TestCoreGlobBudgetsCompat(t *testing.T) {
	ct := newCoreTest(t, Config{MaxSeries: 1024, HistogramCells: 4096, Core: kernel.CoreCompat})
	if err := ct.c.SetBudgets([]BudgetRule{
		{Span: "exact.one", Budget: time.Millisecond},
		{Span: "db.*.select", Budget: 2 * time.Millisecond},
	}); err != nil {
		t.Fatal(err)
	}
	over := func(name string, b time.Duration) entry { return entry{Name: name, Cgroup: 1, Value: uint64(b) + 1000} }
	// First sight: the exact budget applies, the glob's not yet.
	ct.aggregate(t, []entry{over("exact.one", time.Millisecond), over("db.users.select", 2*time.Millisecond), over("plain", time.Second)})
	_, got := ct.snapshot(t)
	if got["exact.one"].OverBudget != 1 || got["db.users.select"].OverBudget != 0 {
		t.Fatalf("first read: exact.one over budget %d (want 1), db.users.select %d (want 0: the glob is matched at the read)",
			got["exact.one"].OverBudget, got["db.users.select"].OverBudget)
	}
	if got["db.users.select"].BudgetNs != uint64(2*time.Millisecond) {
		t.Fatalf("db.users.select budget %d, want the glob's", got["db.users.select"].BudgetNs)
	}
	// After the read, the glob's budget is the name's.
	ct.aggregate(t, []entry{over("db.users.select", 2*time.Millisecond), over("db.users.select", 2*time.Millisecond), over("plain", time.Second)})
	s, got := ct.snapshot(t)
	if got["db.users.select"].OverBudget != 2 || got["plain"].OverBudget != 0 {
		t.Fatalf("second read: db.users.select over budget %d (want 2), plain %d (want 0)", got["db.users.select"].OverBudget, got["plain"].OverBudget)
	}
	overruns := s.Overruns
	for deadline := time.Now().Add(5 * time.Second); len(overruns) < 3 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		s, _ := ct.snapshot(t)
		overruns = append(overruns, s.Overruns...)
	}
	if len(overruns) != 3 {
		t.Fatalf("%d overruns, want 3 (exact.one, then db.users.select twice)", len(overruns))
	}
	// A new rule set: the glob's names are matched again.
	if err := ct.c.SetBudgets([]BudgetRule{{Span: "db.*", Budget: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	ct.aggregate(t, []entry{over("db.users.select", 2*time.Millisecond)})
	if _, got := ct.snapshot(t); got["db.users.select"].OverBudget != 0 || got["db.users.select"].BudgetNs != uint64(time.Hour) {
		t.Fatalf("after the new rules: %+v", got["db.users.select"])
	}

	// A change is a transaction here too: the names its globs match get
	// their exact budgets in the set it prepares, in force at Commit and
	// not before; Abort leaves the budgets in force as they were.
	overBy := func(name string) uint64 {
		t.Helper()
		ct.aggregate(t, []entry{over(name, time.Millisecond)})
		_, got := ct.snapshot(t)
		return got[name].OverBudget
	}
	tighter := []BudgetRule{{Span: "db.*", Budget: time.Millisecond}}
	ch, err := ct.c.PrepareBudgets(tighter)
	if err != nil {
		t.Fatal(err)
	}
	if n := overBy("db.users.select"); n != 0 {
		t.Fatalf("a prepared change judged db.users.select already (%d over budget)", n)
	}
	ch.Abort()
	if n := overBy("db.users.select"); n != 0 {
		t.Fatalf("an aborted change judged db.users.select (%d over budget)", n)
	}
	if ch, err = ct.c.PrepareBudgets(tighter); err != nil {
		t.Fatal(err)
	}
	// A name first read while the change is prepared: the budgets in
	// force give it the old glob's budget, the change the new one's.
	ct.aggregate(t, []entry{{Name: "db.orders.select", Cgroup: 1, Value: 1}})
	if _, got := ct.snapshot(t); got["db.orders.select"].BudgetNs != uint64(time.Hour) {
		t.Fatalf("db.orders.select read during the change: budget %d, want the one in force (1h)", got["db.orders.select"].BudgetNs)
	}
	if err := ch.Commit(); err != nil {
		t.Fatal(err)
	}
	// Judged by the new budgets from the first span after Commit, with
	// no read in between.
	ct.aggregate(t, []entry{over("db.users.select", time.Millisecond), over("db.orders.select", time.Millisecond)})
	_, got = ct.snapshot(t)
	for _, name := range []string{"db.users.select", "db.orders.select"} {
		if got[name].OverBudget != 1 || got[name].BudgetNs != uint64(time.Millisecond) {
			t.Errorf("after Commit, %s: over budget %d, budget %d; want 1 and 1ms", name, got[name].OverBudget, got[name].BudgetNs)
		}
	}
	exact, _, err := ct.c.BudgetsInForce()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"db.users.select", "db.orders.select"} {
		if exact[snapshot.NameID(name)] != time.Millisecond {
			t.Errorf("the kernel's budget of %s is %v, want the glob's 1ms", name, exact[snapshot.NameID(name)])
		}
	}
}

// sameDurationBucket reports whether two durations share a histogram
// bucket.
func sameDurationBucket(a, b uint64) bool {
	if a == 0 || b == 0 {
		return a == b
	}
	return snapshot.DurationIndex(a) == snapshot.DurationIndex(b)
}
