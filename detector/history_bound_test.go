package detector

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// boundWindows feeds d n windows of series span-0..span-(k-1), each with
// spans, 10 s apart, and returns the last snapshot's time.
func boundWindows(t *testing.T, d *Detector, n, k int) {
	t.Helper()
	t0 := time.Unix(1_000_000, 0)
	for w := 0; w < n; w++ {
		s := &snapshot.Snapshot{Time: t0.Add(time.Duration(w) * 10 * time.Second), WindowNs: int64(10 * time.Second)}
		for i := 0; i < k; i++ {
			s.Series = append(s.Series, spans(fmt.Sprintf("span-%d", i), 0, 10*time.Second, uint64(i+1)*1e6, uint64(i+2)*1e6))
		}
		if _, err := d.Evaluate(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHistoryBound: without a bound the history holds the longest range
// (5m: 30 windows of 10s); with one, it drops its oldest windows until it fits,
// ranges cover what is kept, and Stats says what it holds, what it
// dropped and what it covers.
func TestHistoryBound(t *testing.T) {
	rules := "rules:\n  - {name: R, span: \"*\", when: count > 1000000, over: 5m}\n"
	d := New(Config{ExternalLabels: map[string]string{}})
	d.SetRules(mustParse(t, rules))
	boundWindows(t, d, 40, 50)
	st := d.Stats()
	full := st.HistoryBytes
	if st.HistoryCovered != 5*time.Minute || st.HistoryWanted != 5*time.Minute || st.HistoryDropped != 0 || full <= 0 {
		t.Fatalf("unbounded: %+v", st)
	}
	// The same with a bound of a third of that.
	b := New(Config{ExternalLabels: map[string]string{}})
	b.SetRules(mustParse(t, rules))
	b.SetHistoryBytes(full / 3)
	boundWindows(t, b, 40, 50)
	st = b.Stats()
	if st.HistoryBytes > full/3 || st.HistoryBytes < full/4 {
		t.Errorf("bounded to %d: holds %d (unbounded %d)", full/3, st.HistoryBytes, full)
	}
	if st.HistoryCovered >= 2*time.Minute || st.HistoryCovered < time.Minute || st.HistoryDropped == 0 {
		t.Errorf("bounded: covers %s, dropped %d", st.HistoryCovered, st.HistoryDropped)
	}
	// What the rules see is the covered range: the count of a series
	// over the range is its count per window times the windows kept.
	agg := b.hist
	if n := len(agg.wins); time.Duration(n)*10*time.Second != st.HistoryCovered {
		t.Errorf("%d windows kept, covering %s", n, st.HistoryCovered)
	}
	// The bound lifted, the history grows back to the range.
	b.SetHistoryBytes(0)
	boundWindows(t, b, 40, 50)
	if st := b.Stats(); st.HistoryCovered != 5*time.Minute {
		t.Errorf("unbounded again: covers %s", st.HistoryCovered)
	}
}

// TestHistoryTrimToRules: with trimming on, a series keeps only what the
// rules that select it need: the series of a 5m rule keep 5m, those of a
// 1m rule 1m, those no ranged rule selects nothing; the 5m rule's value
// is the same as without trimming.
func TestHistoryTrimToRules(t *testing.T) {
	rules := "rules:\n" +
		"  - {name: Long, span: span-1, when: count > 0, over: 5m, annotations: {v: \"{{ .Series.Count }}\"}}\n" +
		"  - {name: Short, span: \"span-2*\", when: count > 1000000, over: 1m}\n"
	run := func(trim bool) (*Detector, string) {
		d := New(Config{ExternalLabels: map[string]string{}})
		d.SetRules(mustParse(t, rules))
		d.SetHistoryTrim(trim)
		boundWindows(t, d, 40, 30)
		var v string
		for _, a := range d.Alerts() {
			if a.Labels["alertname"] == "Long" {
				v = a.Annotations["v"]
			}
		}
		return d, v
	}
	full, want := run(false)
	trimmed, got := run(true)
	if got != want || want != "60" {
		t.Errorf("Long over 5m: %q trimmed, %q not, want 60 (30 windows of 2 spans)", got, want)
	}
	wins := func(d *Detector, span string) int {
		for k, sh := range d.hist.series {
			if len(k) > len(span)+1 && k[1:len(span)+1] == span && k[len(span)+1] == 0 {
				return len(sh.wins)
			}
		}
		return -1
	}
	for _, tc := range []struct {
		span       string
		full, trim int
	}{
		{"span-1", 30, 30}, {"span-2", 30, 6}, {"span-25", 30, 6}, {"span-3", 30, 0},
	} {
		if f, tr := wins(full, tc.span), wins(trimmed, tc.span); f != tc.full || tr != tc.trim {
			t.Errorf("%s: %d windows untrimmed, %d trimmed; want %d and %d", tc.span, f, tr, tc.full, tc.trim)
		}
	}
	if f, tr := full.Stats().HistoryBytes, trimmed.Stats().HistoryBytes; tr*3 > f {
		t.Errorf("trimmed history %d bytes, untrimmed %d: want less than a third", tr, f)
	}
}

// TestHistoryBoundTrimsFirst: a bound reached while some series' windows
// serve no rule trims those first (the budget's order: unused range
// history before depth): no window is dropped, the rule's value stays,
// and Stats says since when the history trims.
func TestHistoryBoundTrimsFirst(t *testing.T) {
	rules := "rules:\n  - {name: Long, span: span-1, when: count > 0, over: 5m, annotations: {v: \"{{ .Series.Count }}\"}}\n"
	full := New(Config{ExternalLabels: map[string]string{}})
	full.SetRules(mustParse(t, rules))
	boundWindows(t, full, 40, 30)
	d := New(Config{ExternalLabels: map[string]string{}})
	d.SetRules(mustParse(t, rules))
	d.SetHistoryBytes(full.Stats().HistoryBytes / 3)
	boundWindows(t, d, 40, 30)
	st := d.Stats()
	if st.HistoryDropped != 0 || st.HistoryTrimmedSince.IsZero() || !st.HistoryDepthSince.IsZero() || st.HistoryCovered != 5*time.Minute {
		t.Errorf("dropped %d windows, trimmed since %v, depth since %v, covers %s", st.HistoryDropped, st.HistoryTrimmedSince, st.HistoryDepthSince, st.HistoryCovered)
	}
	if st.HistoryBytes > full.Stats().HistoryBytes/3 {
		t.Errorf("holds %d, over the bound %d", st.HistoryBytes, full.Stats().HistoryBytes/3)
	}
	for _, a := range d.Alerts() {
		if a.Labels["alertname"] == "Long" && a.Annotations["v"] != "60" {
			t.Errorf("Long over 5m counts %s, want 60", a.Annotations["v"])
		}
	}
	// Past what trimming frees, the bound drops whole windows, and says
	// since when.
	d.SetHistoryBytes(full.Stats().HistoryBytes / 100)
	boundWindows(t, d, 5, 30)
	if st := d.Stats(); st.HistoryDropped == 0 || st.HistoryDepthSince.IsZero() || st.HistoryCovered >= 5*time.Minute {
		t.Errorf("a tighter bound: dropped %d, depth since %v, covers %s", st.HistoryDropped, st.HistoryDepthSince, st.HistoryCovered)
	}
}

// TestHistoryBytesRestored: a range history restored after a restart
// counts what it holds, as the one saved did, so that its bound and
// /metrics hold from the first evaluation.
func TestHistoryBytesRestored(t *testing.T) {
	store := &memStore{data: map[string][]byte{}}
	cfg := Config{Store: store, SaveInterval: time.Second, ExternalLabels: map[string]string{}}
	a := New(cfg)
	a.SetRules(mustParse(t, restartRules))
	restartRun(t, a, 0, 30)
	want := a.hist.bytes
	b := New(cfg)
	b.SetRules(mustParse(t, restartRules))
	if _, err := b.Restore(t0.Add(31 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// The restored histograms hold exactly their bytes; the saved ones
	// had a few bytes of room each.
	if got := b.hist.bytes; want == 0 || got > want || got < want*9/10 {
		t.Errorf("restored history counts %d bytes, the saved one %d", got, want)
	}
	var wins int64
	for _, w := range b.hist.wins {
		wins += w.bytes
	}
	if wins+seriesEntryBytes+int64(len(firstKey(b.hist))) != b.hist.bytes {
		t.Errorf("the windows' bytes (%d) and the entry do not add up to %d", wins, b.hist.bytes)
	}
}

func firstKey(h *history) string {
	for k := range h.series {
		return k
	}
	return ""
}
