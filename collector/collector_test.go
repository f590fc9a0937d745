//go:build linux

package collector

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/snapshot"
)

func requireBPF(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON) to load BPF")
	}
}

// newMarkerCollector attaches the marker source to this test binary, which
// links the span SDK.
func newMarkerCollector(t testing.TB, cfg Config) *Collector {
	t.Helper()
	requireBPF(t)
	if emit.Mode() != "marker" {
		t.Skipf("the span SDK uses %s here, not the marker (the VM tests cover user_events)", emit.Mode())
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sources = Sources{Marker: true}
	cfg.ScanInterval = -1
	cfg.MarkerBinaries = []string{exe}
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if !emit.Enabled() {
		t.Fatal("marker uprobe attached but the SDK's enable word is still 0")
	}
	return c
}

func seriesByName(s *snapshot.Snapshot) map[string]snapshot.Series {
	out := map[string]snapshot.Series{}
	for _, sr := range s.Series {
		if sr.Count > 0 {
			out[sr.Span] = sr
		}
	}
	return out
}

func within(t *testing.T, what string, got, want uint64, rel float64) {
	t.Helper()
	d := float64(got) - float64(want)
	if d < 0 {
		d = -d
	}
	if d > rel*float64(want) {
		t.Errorf("%s = %d, want %d within %.1f%%", what, got, want, rel*100)
	}
}

// wantMax checks a series' max: exact, or with the compat core (no
// compare-and-swap before 5.12) the upper bound of the value's bucket.
func wantMax(t *testing.T, c *Collector, got, want uint64) {
	t.Helper()
	if c.Kernel().Core == kernel.CoreCompat {
		if _, hi := snapshot.DurationBounds(snapshot.DurationIndex(want)); got != hi-1 {
			t.Errorf("max %d, want %d, the upper bound of %d's bucket (compat core)", got, hi-1, want)
		}
		return
	}
	if got != want {
		t.Errorf("max %d, want %d", got, want)
	}
}

func TestMarkerSpansExact(t *testing.T) {
	c := newMarkerCollector(t, Config{})
	if _, err := c.Snapshot(); err != nil { // start a fresh window
		t.Fatal(err)
	}
	// 1000 spans of known durations: 1..1000 µs, every 10th an error.
	for i := 1; i <= 1000; i++ {
		emit.Record(&emit.Finished{Name: "test.exact", Duration: time.Duration(i) * time.Microsecond, Error: i%10 == 0})
	}
	for i := 0; i < 7; i++ {
		sp := emit.Start("test.startend")
		sp.End(nil)
	}
	s, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	got := seriesByName(s)
	sr, ok := got["test.exact"]
	if !ok {
		t.Fatalf("series test.exact missing from snapshot: %+v", s.Series)
	}
	if sr.Count != 1000 || sr.Errors != 100 {
		t.Errorf("count %d errors %d, want 1000 and 100", sr.Count, sr.Errors)
	}
	if want := uint64(500500 * 1000); sr.SumNs != want {
		t.Errorf("sum %d, want %d", sr.SumNs, want)
	}
	within(t, "p50", sr.P50Ns, 500_000, 0.01)
	within(t, "p90", sr.P90Ns, 900_000, 0.01)
	within(t, "p99", sr.P99Ns, 990_000, 0.01)
	wantMax(t, c, sr.MaxNs, 1_000_000)
	if sr.CgroupID == 0 {
		t.Errorf("cgroup id is 0")
	}
	if sr.NameID != snapshot.NameID("test.exact") {
		t.Errorf("BPF name id %x, Go NameID %x: bpf/aggregate.h and snapshot/nameid.go disagree", sr.NameID, snapshot.NameID("test.exact"))
	}
	if got["test.startend"].Count != 7 {
		t.Errorf("test.startend count %d, want 7", got["test.startend"].Count)
	}
	if s.Stats.Events < 1007 {
		t.Errorf("events counter %d, want >= 1007", s.Stats.Events)
	}

	// The next window holds only what happened since.
	emit.Record(&emit.Finished{Name: "test.exact", Duration: time.Millisecond})
	s2, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if n := seriesByName(s2)["test.exact"].Count; n != 1 {
		t.Errorf("second window count %d, want 1", n)
	}
}

func TestMarkerNames(t *testing.T) {
	c := newMarkerCollector(t, Config{})
	long := strings.Repeat("n", 64) // no terminator in the payload
	names := []string{long, "a", "ab", "abcdefgh", "abcdefghi", "ünïcode"}
	for i, n := range names {
		for j := 0; j <= i; j++ {
			emit.Record(&emit.Finished{Name: n, Duration: time.Microsecond})
		}
	}
	s, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	got := seriesByName(s)
	for i, n := range names {
		if got[n].Count != uint64(i+1) {
			t.Errorf("series %q count %d, want %d", n, got[n].Count, i+1)
		}
		if got[n].NameID != snapshot.NameID(n) {
			t.Errorf("series %q: BPF id %x, Go id %x", n, got[n].NameID, snapshot.NameID(n))
		}
	}
}

func TestMarkerOverrunStack(t *testing.T) {
	c := newMarkerCollector(t, Config{})
	if err := c.SetBudgets([]BudgetRule{{Span: "test.budget*", Budget: 5 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	// Glob budgets apply from the first snapshot that has seen the name.
	emit.Record(&emit.Finished{Name: "test.budgeted", Duration: time.Millisecond})
	if _, err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	traceID := [16]byte{0xde, 0xad, 0xbe, 0xef, 15: 1}
	for i := 0; i < 10; i++ {
		emitSlowSpan(traceID)
		emit.Record(&emit.Finished{Name: "test.budgeted", Duration: time.Millisecond})
	}
	deadline := time.Now().Add(5 * time.Second)
	var ovs []snapshot.Overrun
	var sr snapshot.Series
	for len(ovs) < 10 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		s, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		ovs = append(ovs, s.Overruns...)
		if x, ok := seriesByName(s)["test.budgeted"]; ok {
			sr = x
		}
	}
	if len(ovs) != 10 {
		t.Fatalf("%d overruns, want 10", len(ovs))
	}
	if sr.OverBudget != 10 || sr.BudgetNs != uint64(5*time.Millisecond) {
		t.Errorf("series over_budget %d budget %d, want 10 and 5ms", sr.OverBudget, sr.BudgetNs)
	}
	for _, ov := range ovs {
		if ov.DurationNs != uint64(20*time.Millisecond) || ov.PID != uint32(os.Getpid()) || ov.TraceID != "deadbeef000000000000000000000001" || ov.Source != "marker" {
			t.Fatalf("overrun %+v", ov)
		}
		var funcs []string
		for _, f := range ov.UserStack {
			funcs = append(funcs, f.Function)
		}
		if !contains(funcs, "github.com/spanwatch/spanwatch/collector.emitSlowSpan") {
			t.Fatalf("user stack %v lacks the emitting function", funcs)
		}
	}
}

//go:noinline
func emitSlowSpan(traceID [16]byte) {
	emit.Record(&emit.Finished{Name: "test.budgeted", Duration: 20 * time.Millisecond, TraceID: traceID})
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestCloseIdempotent(t *testing.T) {
	c := newMarkerCollector(t, Config{})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// emit.Enabled() may stay true: another spanwatch on the host (a
	// parallel test package's agent scanning /proc) may have attached to
	// this binary too. What this collector attached must be gone.
	if b := c.MarkerBinaries(); len(b) != 0 {
		t.Fatalf("still attached to %v after Close", b)
	}
	if _, err := c.Snapshot(); err == nil {
		t.Fatal("Snapshot after Close succeeded")
	}
}

// TestMarkerUprobeMethods counts spans exactly through both ways of
// attaching the marker: a uprobe_multi link (6.6+, no CAP_SYS_ADMIN) and
// the perf_uprobe PMU (older kernels, or Config.NoUprobeMulti).
func TestMarkerUprobeMethods(t *testing.T) {
	for _, tc := range []struct {
		name    string
		noMulti bool
	}{{"uprobe_multi", false}, {"perf", true}} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.noMulti {
				requireBPF(t)
				bpftest.Require(t, kernel.UprobeMulti)
			}
			c := newMarkerCollector(t, Config{NoUprobeMulti: tc.noMulti})
			if got := c.MarkerUprobeMethod(); got != tc.name {
				t.Fatalf("marker attached through %q, want %q", got, tc.name)
			}
			if _, err := c.Snapshot(); err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 100; i++ {
				emit.Record(&emit.Finished{Name: "test.method", Duration: time.Duration(i) * time.Microsecond})
			}
			s, err := c.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			sr := seriesByName(s)["test.method"]
			if sr.Count != 100 || sr.SumNs != 5050*1000 {
				t.Errorf("count %d sum %d, want 100, 5050000", sr.Count, sr.SumNs)
			}
			wantMax(t, c, sr.MaxNs, 100_000)
		})
	}
}
