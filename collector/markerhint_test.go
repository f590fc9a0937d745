//go:build linux

package collector

import (
	"fmt"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/snapshot"
)

// markerHintIndex is bpf/spanwatch.bpf.c's marker_hint_index: the entry of
// marker_hints a (name, cgroup) pair's slot hint sits in.
func markerHintIndex(nameID, cgroupID uint64, entries uint32) uint32 {
	h := (nameID ^ cgroupID) * 0x9e3779b97f4a7c15
	return uint32(h>>32) & (entries - 1)
}

// TestMarkerHintsShared ends spans of two names whose series share one
// entry of the marker's slot hints, alternately, so that each span finds
// the other name's hint there: every value must still land in its own
// series (the core checks a hint's key before it uses it), with a third
// name on an entry of its own beside them.
func TestMarkerHintsShared(t *testing.T) {
	c := newMarkerCollector(t, Config{})
	entries := c.objs.MarkerHints.MaxEntries()
	if entries == 0 || entries&(entries-1) != 0 {
		t.Fatalf("marker_hints has %d entries, want a power of two", entries)
	}
	// The cgroup the series are kept in: this process's, from a first span.
	emit.Record(&emit.Finished{Name: "hint.probe", Duration: time.Microsecond})
	s, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	probe, ok := seriesByName(s)["hint.probe"]
	if !ok {
		t.Fatalf("no hint.probe series: %+v", s.Series)
	}
	cg := probe.CgroupID
	// Two names on one entry, and one on another.
	first := map[uint32]string{}
	var a, b string
	for i := 0; a == "" && i < 1<<20; i++ {
		n := fmt.Sprintf("hint.%d", i)
		idx := markerHintIndex(snapshot.NameID(n), cg, entries)
		if prev, ok := first[idx]; ok {
			a, b = prev, n
			break
		}
		first[idx] = n
	}
	if a == "" {
		t.Fatal("no two names share a hint entry")
	}
	other := ""
	for i := 0; other == ""; i++ {
		n := fmt.Sprintf("hint.other.%d", i)
		if markerHintIndex(snapshot.NameID(n), cg, entries) != markerHintIndex(snapshot.NameID(a), cg, entries) {
			other = n
		}
	}
	const n = 500
	fa := &emit.Finished{Name: a, Duration: 10 * time.Microsecond}
	fb := &emit.Finished{Name: b, Duration: 20 * time.Microsecond, Error: true}
	fo := &emit.Finished{Name: other, Duration: 30 * time.Microsecond}
	for i := 0; i < n; i++ {
		emit.Record(fa)
		emit.Record(fb)
		emit.Record(fa)
		emit.Record(fo)
	}
	s, err = c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	got := seriesByName(s)
	for _, w := range []struct {
		name          string
		count, errors uint64
		sum           uint64
	}{
		{a, 2 * n, 0, 2 * n * 10_000},
		{b, n, n, n * 20_000},
		{other, n, 0, n * 30_000},
	} {
		sr, ok := got[w.name]
		if !ok {
			t.Errorf("series %s missing", w.name)
			continue
		}
		if sr.Count != w.count || sr.Errors != w.errors || sr.SumNs != w.sum {
			t.Errorf("%s: count %d errors %d sum %d, want %d, %d, %d", w.name, sr.Count, sr.Errors, sr.SumNs, w.count, w.errors, w.sum)
		}
	}
}
