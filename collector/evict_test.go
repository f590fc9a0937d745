//go:build linux

package collector

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/logtest"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestEvictPrunesNameCaches: once the series of names a resolver gave are
// evicted and their slots freed, nothing of them is left: not in the
// kernel's names map, not in the name cache, not among the resolved names
// whose series may need merging.
func TestEvictPrunesNameCaches(t *testing.T) {
	ct := newCoreTest(t, Config{MaxSeries: 64, HistogramCells: 4096, IdleEvict: time.Nanosecond})
	ct.c.AddNameResolver(func(name string) (string, bool) {
		if rest, ok := strings.CutPrefix(name, "ph."); ok {
			return "real." + rest, true
		}
		return name, false
	})
	var es []entry
	for i := 0; i < 16; i++ {
		es = append(es, entry{Name: fmt.Sprintf("ph.%d", i), Cgroup: 1, Value: 1000})
		es = append(es, entry{Name: fmt.Sprintf("plain.%d", i), Cgroup: 1, Value: 1000})
	}
	ct.aggregate(t, es)
	_, got := ct.snapshot(t)
	if len(got) != 32 || got["real.3"].Count != 1 {
		t.Fatalf("series %v, want 32 with real.0-15", seriesNames(got))
	}
	r := ct.c.reader
	if len(r.resolved) != 16 || len(r.resolvedIDs) != 16 || len(r.names) != 32 {
		t.Fatalf("%d resolved names, %d resolved ids, %d cached names; want 16, 16, 32", len(r.resolved), len(r.resolvedIDs), len(r.names))
	}
	// Idle: evicted at this read, freed after two more reads and 2 s.
	ct.snapshot(t)
	time.Sleep(quarantineTime)
	ct.snapshot(t)
	s, _ := ct.snapshot(t)
	if s.Stats.SeriesLive != 0 {
		t.Fatalf("%d series live after eviction", s.Stats.SeriesLive)
	}
	if len(r.resolved) != 0 || len(r.resolvedIDs) != 0 || len(r.names) != 0 || len(r.nameRefs) != 0 {
		t.Errorf("after eviction: %d resolved names, %d resolved ids, %d cached names, %d name refs; want none",
			len(r.resolved), len(r.resolvedIDs), len(r.names), len(r.nameRefs))
	}
	// The kernel keeps the (other) series' name only.
	var id uint64
	var v bpf.SpanwatchSpanName
	n := 0
	it := ct.c.objs.Names.Iterate()
	for it.Next(&id, &v) {
		if id != r.otherNameID {
			n++
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d names left in the kernel's names map, want 0", n)
	}
	// A name that comes back is resolved and merged again.
	ct.aggregate(t, []entry{{Name: "ph.3", Cgroup: 1, Value: 5}})
	if _, got := ct.snapshot(t); got["real.3"].Count != 1 || r.resolved["real.3"] != 1 {
		t.Fatalf("real.3 after its return: %+v, resolved %v", got["real.3"], r.resolved)
	}
}

// TestQuotaLogForgetsGoneCgroups: the cgroups whose reaching their quota
// was logged are forgotten once their (other) series is gone, and logged
// again if they reach it again.
func TestQuotaLogForgetsGoneCgroups(t *testing.T) {
	logs := &logtest.Recorder{}
	other := snapshot.NameID(snapshot.OtherName)
	c := &Collector{log: slog.New(logs), reader: &seriesReader{otherNameID: other}}
	snap := func(cgroups ...uint64) {
		s := &snapshot.Snapshot{Series: []snapshot.Series{{Span: "x", NameID: snapshot.NameID("x"), CgroupID: 9}}}
		for _, cg := range cgroups {
			s.Series = append(s.Series, snapshot.Series{Span: snapshot.OtherName, NameID: other, CgroupID: cg})
		}
		c.logQuotas(s)
	}
	for _, step := range []struct {
		cgroups []uint64
		logged  int // series_quota_reached messages so far
		seen    int
	}{
		{[]uint64{1, 2}, 2, 2},
		{[]uint64{1, 2}, 2, 2},
		{[]uint64{2}, 2, 1},
		{nil, 2, 0},
		{[]uint64{1}, 3, 1},
	} {
		snap(step.cgroups...)
		if got := logs.Count("series_quota_reached"); got != step.logged || len(c.quotaSeen) != step.seen {
			t.Fatalf("(other) series of cgroups %v: %d logged, %d remembered; want %d, %d", step.cgroups, got, len(c.quotaSeen), step.logged, step.seen)
		}
	}
}
