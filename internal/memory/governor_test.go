package memory

import (
	"fmt"
	"testing"
	"time"
)

// usageAt is a measurement of frac of a 1000-byte budget.
func usageAt(frac float64, events uint64) Usage {
	return Usage{Go: uint64(frac * 1000), Events: events}
}

// TestGovernorOrder walks usage up and down and checks the level after
// each measurement, the order in which detail is shed and given back,
// and what Apply and State say.
func TestGovernorOrder(t *testing.T) {
	var applied []Level
	g := NewGovernor(GovernorConfig{Budget: 1000, Apply: func(l Level) { applied = append(applied, l) }})
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at   time.Duration
		frac float64
		want Level
	}{
		{0, 0.50, None},
		{1 * time.Second, 0.69, None},
		{2 * time.Second, 0.70, StackDetail},
		{3 * time.Second, 0.80, UnusedHistory},
		{4 * time.Second, 0.87, StaleExports},
		{5 * time.Second, 0.95, HistoryDepth},
		// Down, but not far enough under the top level's threshold.
		{6 * time.Second, 0.90, HistoryDepth},
		// Far enough, but not for Hold yet.
		{7 * time.Second, 0.50, HistoryDepth},
		{7*time.Second + Hold - time.Second, 0.50, HistoryDepth},
		{7*time.Second + Hold, 0.50, StaleExports},
		// One level at a time, each after its own Hold.
		{7*time.Second + Hold + time.Second, 0.50, StaleExports},
		{7*time.Second + 2*Hold, 0.50, UnusedHistory},
		// A rise in between resets the wait.
		{7*time.Second + 2*Hold + time.Second, 0.79, UnusedHistory},
		{7*time.Second + 3*Hold, 0.50, UnusedHistory},
		{7*time.Second + 4*Hold + time.Second, 0.50, StackDetail},
		{7*time.Second + 5*Hold + 2*time.Second, 0.50, None},
	}
	for i, st := range steps {
		if got := g.Observe(t0.Add(st.at), usageAt(st.frac, 0)); got != st.want {
			t.Fatalf("step %d (%.2f at %s): level %s, want %s", i, st.frac, st.at, got, st.want)
		}
	}
	want := []Level{StackDetail, UnusedHistory, StaleExports, HistoryDepth, StaleExports, UnusedHistory, StackDetail, None}
	if fmt.Sprint(applied) != fmt.Sprint(want) {
		t.Errorf("applied %v, want %v", applied, want)
	}
	if st := g.State(); st.Changes != uint64(len(want)) || st.Level != None || st.Since != [Top + 1]time.Time{} {
		t.Errorf("state %+v", st)
	}
}

// TestGovernorJumps: usage that crosses several thresholds at once sheds
// every level below at once, and State says since when each is shed.
func TestGovernorJumps(t *testing.T) {
	g := NewGovernor(GovernorConfig{Budget: 1000})
	t0 := time.Unix(1000, 0)
	g.Observe(t0, usageAt(0.72, 0))
	if l := g.Observe(t0.Add(time.Second), usageAt(0.99, 0)); l != HistoryDepth {
		t.Fatalf("level %s, want %s", l, HistoryDepth)
	}
	st := g.State()
	if !st.Since[StackDetail].Equal(t0) || !st.Since[UnusedHistory].Equal(t0.Add(time.Second)) || !st.Since[HistoryDepth].Equal(t0.Add(time.Second)) || !st.Since[None].IsZero() {
		t.Errorf("since %v", st.Since)
	}
}

// TestGovernorCgroupEvents: the kernel reclaiming at the cgroup's limit
// (its pressure events rising while its memory in use is near the limit)
// sheds one level more, whatever the agent's own figures; events already
// there at the first measurement do not, nor events of a cgroup far from
// its limit (the page cache of --output being reclaimed).
func TestGovernorCgroupEvents(t *testing.T) {
	g := NewGovernor(GovernorConfig{Budget: 1000})
	t0 := time.Unix(1000, 0)
	for i, st := range []struct {
		events, inUse uint64
		want          Level
	}{
		{7, 950, None}, // the count the cgroup had before the agent
		{7, 950, None},
		{9, 500, None}, // reclaim far from the limit: page cache
		{11, 950, StackDetail},
		{14, 1000, UnusedHistory},
		{14, 1000, UnusedHistory}, // no new events, usage low: held, not yet given back
	} {
		u := usageAt(0.3, st.events)
		u.Cgroup, u.CgroupLimit = st.inUse, 1000
		if got := g.Observe(t0.Add(time.Duration(i)*time.Second), u); got != st.want {
			t.Fatalf("step %d (events %d): level %s, want %s", i, st.events, got, st.want)
		}
	}
}

func TestLevelNames(t *testing.T) {
	seen := map[string]bool{}
	for _, l := range append([]Level{None}, Levels()...) {
		n := l.String()
		if n == "unknown" || seen[n] {
			t.Errorf("level %d: name %q", l, n)
		}
		seen[n] = true
	}
	if len(Levels()) != int(Top) || Levels()[0] != StackDetail {
		t.Errorf("Levels() = %v", Levels())
	}
}
