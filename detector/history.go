package detector

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/spanwatch/spanwatch/snapshot"
)

// history keeps every series' recent windows, as far back as the longest
// range of the rule set reaches, so that a rule's metrics over a range are
// computed exactly: counts summed, histograms merged bucket by bucket, then
// quantiles taken. Snapshots themselves stay per window.
//
// A window is in a range when its midpoint is: walking back from the
// newest window, a window counts while the time covered before it plus
// half its length is within the range. The newest window always counts,
// so a range shorter than the interval (or 0) is the newest window alone.
//
// Memory: a series keeps only its windows with spans in them (an idle
// series costs its map entry, about 200 bytes), each 96 bytes plus
// its packed histogram (2-4 bytes per non-empty bucket). The history
// counts what it holds (bytes) and, with a bound (maxBytes, from the
// memory budget), drops its oldest windows, every series' at once, until
// it fits: ranges then cover the windows kept, less than they ask, and
// Stats says so. With trimUnused (the budget's UnusedHistory), each
// series keeps only the windows the ranges of its own rules reach.
type history struct {
	wins   []windowInfo // evaluated windows, oldest first
	series map[string]*seriesHist
	seq    uint64
	keyBuf []byte

	bytes      int64 // what the series' windows and entries hold
	maxBytes   int64 // the bound; 0 for none
	trimUnused bool
	// autoTrim is set when the bound was reached without trimUnused:
	// the history then trims to each series' rules first, and drops
	// whole windows only if it is still over (the budget's order). It
	// holds until the bound changes.
	autoTrim bool
	dropped  uint64 // windows dropped for the bound
	// trimSince and depthSince are when the history began to trim to
	// rules and to drop windows for its bound (zero when it does not).
	trimSince, depthSince time.Time
	// scratch is each aggregating goroutine's buffers; scratch[0] is the
	// evaluation's own.
	scratch []*aggScratch

	// agg is the per-evaluation cache of range aggregates, by range;
	// spare is the largest of the last evaluation's, whose array the
	// next one reuses.
	agg   map[time.Duration]*rangeAgg
	spare *rangeAgg
	// cur aligns the current snapshot's series with their histories;
	// prev is the last evaluation's cur: a collector lists its series in
	// the same order window after window, so series i is most often the
	// history prev[i], checked by its key without a map lookup. dups is
	// set when two series of the current snapshot share a history.
	cur, prev []*seriesHist
	dups      bool
	snap      *snapshot.Snapshot
	straight  bool // Detector.straight: no alignment, the map walked
	workers   int  // goroutines for the alignment (0: 1)
}

type windowInfo struct {
	seq    uint64
	end    time.Time
	length time.Duration
	bytes  int64 // what the series' windows of this seq hold
	// gap marks the time the agent was down, between the windows restored
	// after a restart and the first one since: it counts toward a range's
	// reach (old windows leave the range as time passes) but not toward
	// the time its spans cover (rates).
	gap bool
}

// Costs the history counts: a series' entry (map slot, key, seriesHist)
// beyond its key's bytes, and a window beyond its packed histogram. The
// seriesHist grew from 32 to 80 bytes when it took its key and
// baselines (issue 28): 112 before.
const (
	seriesEntryBytes = 160
	seriesWinBytes   = int64(unsafe.Sizeof(seriesWin{}))
)

func winCost(w *seriesWin) int64 { return seriesWinBytes + int64(cap(w.hist)) }

// seriesHist is one series' windows with spans, oldest first.
type seriesHist struct {
	wins     []seriesWin
	lastSeen uint64
	key      string // its key in history.series
	gone     bool   // dropped from history.series
	// baselines are the anomaly baselines this series was given
	// (Detector.baseline): a series finds its own without a lookup in
	// the detector's map.
	baselines []*baselineEntry
}

// seriesWin is what a range needs of one window of one series (96
// bytes, and its packed histogram). For a metric series, sum, min and max
// hold int64 bits.
type seriesWin struct {
	seq uint64
	snapshot.Totals
	histFirst, histLast int32
	// hist is the packed histogram (snapshot.PackHistogram). A window
	// recorded without one (a hand-made test snapshot) keeps its own
	// three quantiles in it instead, as uvarints (float64 bits for a
	// metric), and noHist is set.
	hist   []byte
	noHist bool
}

// quantiles returns a window's own quantiles (noHist windows only).
func (w *seriesWin) quantiles(metric bool) (q [3]float64) {
	p := w.hist
	for i := range q {
		v, n := binary.Uvarint(p)
		p = p[n:]
		q[i] = float64(v)
		if metric {
			q[i] = math.Float64frombits(v)
		}
	}
	return q
}

type aggScratch struct {
	acc snapshot.Accumulator
	key []byte
}

func newHistory() *history {
	return &history{series: map[string]*seriesHist{}, agg: map[time.Duration]*rangeAgg{}, scratch: []*aggScratch{{}}}
}

// seriesKey identifies a series across windows (and for its anomaly
// baselines) without building its label map.
func seriesKey(b []byte, s *snapshot.Series) []byte {
	b = append(b, s.Kind...)
	b = append(b, 0)
	for _, f := range [...]string{s.Span, s.Cgroup, s.ContainerID, s.PodUID, s.Unit, s.Namespace, s.Pod, s.Container, s.Process} {
		b = append(b, f...)
		b = append(b, 0)
	}
	b = strconv.AppendUint(b, s.CgroupID, 10)
	if len(s.SourceLabels) > 0 {
		keys := make([]string, 0, len(s.SourceLabels))
		for k := range s.SourceLabels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = append(b, 0)
			b = append(b, k...)
			b = append(b, 0)
			b = append(b, s.SourceLabels[k]...)
		}
	}
	return b
}

// observe records a snapshot as the newest window, keeping what ranges up
// to keep need (and what the bound leaves of it), and prepares the range
// aggregates of this evaluation.
func (h *history) observe(snap *snapshot.Snapshot, keep time.Duration) {
	h.seq++
	length := snap.Window()
	if length <= 0 && len(h.wins) > 0 {
		length = snap.Time.Sub(h.wins[len(h.wins)-1].end)
	}
	h.wins = append(h.wins, windowInfo{seq: h.seq, end: snap.Time, length: max(length, 0)})
	h.snap = snap
	h.cur = h.cur[:0]
	if keep <= 0 {
		// No range reaches back: nothing to keep, nothing to look up.
		for _, sh := range h.series {
			sh.gone = true
		}
		clear(h.series)
		clear(h.prev)
		h.prev = h.prev[:0]
		h.bytes = 0
		h.wins = append(h.wins[:0], h.wins[len(h.wins)-1])
		h.wins[0].bytes = 0
		return
	}
	newest := &h.wins[len(h.wins)-1]
	prevDups := h.dups
	h.dups = false
	seen := 0 // distinct histories seen
	h.cur = append(h.cur[:0], make([]*seriesHist, len(snap.Series))...)
	if !h.straight && !prevDups && len(h.prev) > 0 {
		// The series where the last window listed them: on several
		// goroutines when many. Distinct indexes of prev are distinct
		// histories (prevDups is not set), so no two goroutines touch
		// one; the rest are looked up below.
		var added atomic.Int64
		var matched atomic.Int64
		h.parallel(min(len(snap.Series), len(h.prev)), h.workers, func(sc *aggScratch, lo, hi int) {
			var bytes, n int64
			for i := lo; i < hi; i++ {
				s := &snap.Series[i]
				sc.key = seriesKey(sc.key[:0], s)
				if p := h.prev[i]; p != nil && !p.gone && p.key == string(sc.key) {
					h.cur[i] = p
					p.lastSeen = h.seq
					bytes += addWindow(p, h.seq, s)
					n++
				}
			}
			added.Add(bytes)
			matched.Add(n)
		})
		newest.bytes += added.Load()
		h.bytes += added.Load()
		seen += int(matched.Load())
	}
	for i := range snap.Series {
		if h.cur[i] != nil {
			continue
		}
		s := &snap.Series[i]
		h.keyBuf = seriesKey(h.keyBuf[:0], s)
		sh := h.series[string(h.keyBuf)]
		if sh == nil {
			sh = &seriesHist{key: string(h.keyBuf)}
			h.series[sh.key] = sh
			h.bytes += seriesEntryBytes + int64(len(h.keyBuf))
		}
		if sh.lastSeen == h.seq {
			h.dups = true
		} else {
			seen++
		}
		sh.lastSeen = h.seq
		c := addWindow(sh, h.seq, s)
		newest.bytes += c
		h.bytes += c
		h.cur[i] = sh
	}
	first, _ := h.span(keep)
	if f := h.floor(); f > first {
		first = f
		if h.depthSince.IsZero() {
			h.depthSince = snap.Time
		}
	} else {
		h.depthSince = time.Time{}
	}
	drop := 0
	for drop < len(h.wins) && h.wins[drop].seq < first {
		drop++
	}
	h.wins = append(h.wins[:0], h.wins[drop:]...)
	// Every series drops what no range reaches any more (or the bound
	// took); series that left the snapshot keep their windows until
	// then. When the snapshot holds every series of the history, its
	// own list is walked instead of the map (trimming a series twice
	// drops nothing the second time).
	if seen == len(h.series) && !h.straight {
		for _, sh := range h.cur {
			h.trim(sh, first)
		}
		return
	}
	for k, sh := range h.series {
		h.trim(sh, first)
		if len(sh.wins) == 0 && sh.lastSeen != h.seq {
			sh.gone = true
			delete(h.series, k)
			h.bytes -= seriesEntryBytes + int64(len(k))
		}
	}
}

// addWindow appends series s as window seq of sh when it counted spans,
// returning what the window holds.
func addWindow(sh *seriesHist, seq uint64, s *snapshot.Series) int64 {
	if s.Count == 0 {
		return 0
	}
	if before := cap(sh.wins); len(sh.wins) == before {
		// Grow by a quarter, not append's double: a series' windows
		// are many, and its range grows one window at a time.
		sh.wins = append(make([]seriesWin, 0, before+max(2, before/4)), sh.wins...)
	}
	sh.wins = append(sh.wins, newSeriesWin(seq, s))
	return winCost(&sh.wins[len(sh.wins)-1])
}

// parallel calls f over [0, n) split into runs, on up to workers
// goroutines (one below parallelMin items per goroutine), each with its
// own scratch buffers.
func (h *history) parallel(n, workers int, f func(sc *aggScratch, lo, hi int)) {
	workers = max(1, min(workers, n/parallelMin+1))
	for len(h.scratch) < workers {
		h.scratch = append(h.scratch, &aggScratch{})
	}
	inRuns(n, workers, func(w, lo, hi int) { f(h.scratch[w], lo, hi) })
}

// inRuns calls f(w, lo, hi) for [0, n) split into workers contiguous
// runs, run w on a goroutine of its own, and waits for them; with one
// worker or none it calls f(0, 0, n) here.
func inRuns(n, workers int, f func(w, lo, hi int)) {
	if workers <= 1 {
		f(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for w := range workers {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			f(w, lo, hi)
		}(min(w*chunk, n), min((w+1)*chunk, n))
	}
	wg.Wait()
}

// eachIndex calls f(i) for every i in [0, n), on up to workers goroutines
// that each take the next i, and waits for them; with one worker or none
// it calls them here, in order.
func eachIndex(n, workers int, f func(i int)) {
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// recount computes what the history holds from its windows and entries:
// after a restore (state.go), which builds them without observe.
func (h *history) recount() {
	h.bytes = 0
	at := make(map[uint64]int, len(h.wins))
	for i := range h.wins {
		h.wins[i].bytes = 0
		at[h.wins[i].seq] = i
	}
	for k, sh := range h.series {
		h.bytes += seriesEntryBytes + int64(len(k))
		for j := range sh.wins {
			c := winCost(&sh.wins[j])
			h.bytes += c
			if i, ok := at[sh.wins[j].seq]; ok {
				h.wins[i].bytes += c
			}
		}
	}
}

// floor is the first window the bound lets the history keep: the oldest
// windows go, all series' at once, until what is left fits (the newest
// always stays).
func (h *history) floor() uint64 {
	if h.maxBytes <= 0 || h.bytes <= h.maxBytes || len(h.wins) == 0 {
		return 0
	}
	if !h.trimUnused {
		// Trimming to the rules first: the next evaluation, if that is
		// not enough.
		h.autoTrim, h.trimUnused = true, true
		return 0
	}
	over := h.bytes - h.maxBytes
	i := 0
	for i < len(h.wins)-1 && over > 0 {
		over -= h.wins[i].bytes
		i++
	}
	h.dropped += uint64(i)
	return h.wins[i].seq
}

// trim drops a series' windows before first, counting what they held.
// The windows left move to the front of their array when it has no room
// at its end: a range slides one window at a time, and reslicing from
// the front would leave the next append to allocate a new array twice as
// long (half of it slack, for as long as the series lives). An array
// left with much room (a range that shrank, trimToRules, the bound) is
// reallocated to fit. The history counts its windows and entries; the
// arrays' room (a quarter at most) is left out.
func (h *history) trim(sh *seriesHist, first uint64) {
	drop := 0
	for drop < len(sh.wins) && sh.wins[drop].seq < first {
		w := &sh.wins[drop]
		c := winCost(w)
		h.bytes -= c
		if len(h.wins) > 0 && w.seq >= h.wins[0].seq {
			if j := int(w.seq - h.wins[0].seq); j < len(h.wins) && h.wins[j].seq == w.seq {
				h.wins[j].bytes -= c
			}
		}
		drop++
	}
	if drop == 0 {
		return
	}
	was, n := cap(sh.wins), len(sh.wins)-drop
	switch {
	case n == 0:
		sh.wins = nil
	case was-n > max(4, n/2):
		sh.wins = append(make([]seriesWin, 0, n+2), sh.wins[drop:]...)
	case len(sh.wins) == was:
		copy(sh.wins, sh.wins[drop:])
		clear(sh.wins[n:])
		sh.wins = sh.wins[:n]
	default:
		clear(sh.wins[:drop])
		sh.wins = sh.wins[drop:]
	}
}

// trimToRules drops, for each series of the current snapshot, the windows
// beyond the longest range of the rules that select it (need[i], 0 for
// none), and every window of the series the snapshot no longer holds: the
// budget's UnusedHistory. No rule's value changes; a series that a rule
// starts to select later has a shorter range until it fills.
func (h *history) trimToRules(need []time.Duration) {
	if !h.trimUnused || h.snap == nil {
		h.trimSince = time.Time{}
		return
	}
	if h.trimSince.IsZero() {
		h.trimSince = h.snap.Time
	}
	firsts := map[time.Duration]uint64{}
	for i, sh := range h.cur {
		first := h.seq + 1 // none
		if need[i] > 0 {
			f, ok := firsts[need[i]]
			if !ok {
				f, _ = h.span(need[i])
				firsts[need[i]] = f
			}
			first = f
		}
		h.trim(sh, first)
	}
	for k, sh := range h.series {
		if sh.lastSeen != h.seq {
			h.trim(sh, h.seq+1)
			sh.gone = true
			delete(h.series, k)
			h.bytes -= seriesEntryBytes + int64(len(k))
		}
	}
}

// historyStats is what the history reports.
type historyStats struct {
	bytes                 int64
	dropped               uint64
	covered               time.Duration // what the windows kept cover
	trimSince, depthSince time.Time
}

func (h *history) stats() historyStats {
	st := historyStats{bytes: h.bytes, dropped: h.dropped, trimSince: h.trimSince, depthSince: h.depthSince}
	for _, w := range h.wins {
		st.covered += w.length
	}
	return st
}

// release drops the evaluation's range aggregates: between evaluations the
// history keeps only the windows.
func (h *history) release() {
	// The array of one range stays for the next evaluation (352 bytes
	// a series): allocating it anew each time was a third of the CPU of
	// 100 rules over 100k series (zeroing, and the collections its 35
	// MB brought on). Not while the memory budget bounds the history.
	h.spare = nil
	if h.maxBytes <= 0 && !h.trimUnused {
		for _, a := range h.agg {
			if h.spare == nil || cap(a.series) > cap(h.spare.series) {
				h.spare = a
			}
		}
	}
	clear(h.agg)
	h.snap = nil
	h.prev, h.cur = h.cur, h.prev[:0]
	clear(h.cur[:cap(h.cur)])
}

func newSeriesWin(seq uint64, s *snapshot.Series) seriesWin {
	w := seriesWin{seq: seq, Totals: s.Totals()}
	qs := [3]uint64{s.P50Ns, s.P90Ns, s.P99Ns}
	if s.IsMetric() {
		qs = [3]uint64{math.Float64bits(s.P50), math.Float64bits(s.P90), math.Float64bits(s.P99)}
	}
	if len(s.Histogram) == 0 {
		w.noHist = true
		for _, q := range qs {
			w.hist = binary.AppendUvarint(w.hist, q)
		}
		return w
	}
	{
		var ok bool
		w.hist, w.histFirst, w.histLast, ok = snapshot.PackHistogram(make([]byte, 0, 2*len(s.Histogram)+8), s.Histogram)
		if !ok {
			// Not sorted, or a bucket twice (a hand-made snapshot): pack
			// a sorted copy with each bucket once.
			h := slices.Clone(s.Histogram)
			snapshot.SortBuckets(h)
			j := 0
			for i := range h {
				if j > 0 && h[j-1].Ord() == h[i].Ord() {
					h[j-1].Count += h[i].Count
					continue
				}
				h[j] = h[i]
				j++
			}
			w.hist, w.histFirst, w.histLast, _ = snapshot.PackHistogram(w.hist[:0], h[:j])
		}
	}
	return w
}

// span returns the first window of a range ending at the newest window,
// and the time the range's windows cover.
func (h *history) span(over time.Duration) (first uint64, covered time.Duration) {
	if len(h.wins) == 0 {
		return h.seq, 0
	}
	n := len(h.wins) - 1
	first, covered = h.wins[n].seq, h.wins[n].length
	elapsed := covered
	for i := n - 1; i >= 0; i-- {
		w := h.wins[i]
		if elapsed+w.length/2 > over {
			break
		}
		first, elapsed = w.seq, elapsed+w.length
		if !w.gap {
			covered += w.length
		}
	}
	return first, covered
}

// rangeAgg is the series of the current snapshot aggregated over one
// range, computed on demand.
type rangeAgg struct {
	first   uint64
	covered time.Duration
	series  []snapshot.Series
	done    []bool
}

func (h *history) rangeAgg(over time.Duration) *rangeAgg {
	a := h.agg[over]
	if a == nil {
		n := len(h.snap.Series)
		if s := h.spare; s != nil && cap(s.series) >= n && cap(s.series) <= 2*n+1024 {
			// The last evaluation's array: aggregate overwrites a
			// series whole, and done says which are.
			a, h.spare = s, nil
			a.series, a.done = a.series[:n], a.done[:n]
			clear(a.done)
		} else {
			a = &rangeAgg{series: make([]snapshot.Series, n), done: make([]bool, n)}
		}
		a.first, a.covered = h.span(over)
		h.agg[over] = a
	}
	return a
}

// aggregated returns series i of the current snapshot over the range
// over: the snapshot's own series when the range is the newest window
// alone.
func (h *history) aggregated(over time.Duration, i int) *snapshot.Series {
	cur := &h.snap.Series[i]
	if over <= 0 || len(h.wins) <= 1 {
		return cur
	}
	a := h.rangeAgg(over)
	if a.first == h.seq {
		return cur
	}
	if !a.done[i] {
		h.aggregate(h.scratch[0], &a.series[i], cur, h.cur[i], a.first, a.covered)
		a.done[i] = true
	}
	return &a.series[i]
}

// parallelMin is the fewest series worth aggregating on several
// goroutines.
const parallelMin = 2048

// prepare aggregates the series that need (nil: all) marks over a range,
// on up to workers goroutines, so that aggregated finds them done. The
// goroutines write disjoint series and use their own buffers.
func (h *history) prepare(over time.Duration, need []bool, workers int) {
	if over <= 0 || len(h.wins) <= 1 {
		return
	}
	a := h.rangeAgg(over)
	if a.first == h.seq {
		return
	}
	var todo []int32
	for i := range h.snap.Series {
		if !a.done[i] && (need == nil || need[i]) {
			todo = append(todo, int32(i))
		}
	}
	workers = min(workers, len(todo)/parallelMin+1)
	for len(h.scratch) < workers {
		h.scratch = append(h.scratch, &aggScratch{})
	}
	run := func(sc *aggScratch, part []int32) {
		for _, i := range part {
			h.aggregate(sc, &a.series[i], &h.snap.Series[i], h.cur[i], a.first, a.covered)
			a.done[i] = true
		}
	}
	inRuns(len(todo), workers, func(w, lo, hi int) { run(h.scratch[w], todo[lo:hi]) })
}

// aggregateAll returns every series of the current snapshot over the range.
func (h *history) aggregateAll(over time.Duration) ([]snapshot.Series, time.Duration) {
	if over <= 0 || len(h.wins) <= 1 {
		return h.snap.Series, h.snap.Window()
	}
	a := h.rangeAgg(over)
	if a.first == h.seq {
		return h.snap.Series, h.snap.Window()
	}
	h.prepare(over, nil, 1)
	return a.series, a.covered
}

// aggregate sums the windows of sh from first on into out, starting from
// the labels and budget of the current window cur, with sc's buffers.
func (h *history) aggregate(sc *aggScratch, out, cur *snapshot.Series, sh *seriesHist, first uint64, covered time.Duration) {
	*out = *cur
	out.Histogram = nil
	k := len(sh.wins)
	for k > 0 && sh.wins[k-1].seq >= first {
		k--
	}
	wins := sh.wins[k:]
	metric := cur.IsMetric()
	a := &sc.acc
	a.Reset(metric)
	lo, hi := int32(math.MaxInt32), int32(math.MinInt32)
	for j := range wins {
		w := &wins[j]
		a.AddTotals(&w.Totals)
		if w.noHist {
			// Windows recorded without their histogram (hand-written
			// test input) cannot be merged: each contributes its own
			// quantiles as a bound.
			a.Bound(w.quantiles(metric))
			continue
		}
		lo, hi = min(lo, w.histFirst), max(hi, w.histLast)
	}
	if lo <= hi {
		a.Reserve(int64(lo), int64(hi))
		for j := range wins {
			if w := &wins[j]; !w.noHist {
				a.AddPacked(w.hist, w.histFirst)
			}
		}
	}
	a.Into(out, covered)
}
