package metrics

import (
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// A view is the exported state of every span series after one Observe:
// immutable once published, so that a scrape reads it without a lock while
// the next Observe builds the next view. Two views are alive at most while
// a scrape of the older one runs; each is compact (about 100 bytes a
// series and 2-4 bytes a bucket), and a scrape allocates nothing per
// series.
type view struct {
	series []viewSeries
	// buckets holds every series' packed cumulative histogram (see
	// appendPacked).
	buckets []byte
	// exemplars holds the series' exemplars, one at most per series
	// (exemplar.go).
	exemplars []exemplar
}

// viewSeries is one exported series' cumulative values.
type viewSeries struct {
	meta                                    *seriesMeta
	count, errors, overBudget, sumNs, maxNs uint64
	budgetNs                                uint64
	// zero is the zero bucket's count; hist the positive buckets, neg an
	// argument metric's negative buckets (of |v|), both packed in
	// view.buckets.
	zero      uint64
	sumVal    int64 // an argument metric's signed sum
	lastSeen  int64 // Unix nanoseconds of the last snapshot it was in
	hist, neg packedRef
	// ex is 1 + the index of the series' exemplar in view.exemplars; 0
	// for none.
	ex uint32
}

// packedRef locates a packed histogram in view.buckets.
type packedRef struct {
	off, len uint32
	n        uint32 // buckets
}

// seriesMeta is what never changes in an exported series: its labels
// (names sorted, as client_golang sorts them; empty values left out, as
// Prometheus drops them), its kind and its start.
type seriesMeta struct {
	names   []string // shared by the series with the same names
	values  []string
	metric  bool
	created time.Time
	hash    uint64
}

// appendPacked appends sorted buckets (index, count) to b: the first
// index zig-zag encoded, each next one as its distance from the previous,
// each count as a uvarint.
func appendPacked(b []byte, bs []bucketCount) []byte {
	prev := int32(0)
	for i, x := range bs {
		if i == 0 {
			b = binary.AppendVarint(b, int64(x.index))
		} else {
			b = binary.AppendUvarint(b, uint64(x.index-prev))
		}
		b = binary.AppendUvarint(b, x.count)
		prev = x.index
	}
	return b
}

// bucketCount is one bucket of a cumulative histogram.
type bucketCount struct {
	index int32
	count uint64
}

// unpack appends the n buckets packed in p to out.
func unpack(out []bucketCount, p []byte, n uint32) []bucketCount {
	var idx int32
	for i := uint32(0); i < n; i++ {
		if i == 0 {
			v, k := binary.Varint(p)
			idx, p = int32(v), p[k:]
		} else {
			v, k := binary.Uvarint(p)
			idx, p = idx+int32(v), p[k:]
		}
		c, k := binary.Uvarint(p)
		p = p[k:]
		out = append(out, bucketCount{idx, c})
	}
	return out
}

// packedIter walks a packed histogram without allocating.
type packedIter struct {
	p    []byte
	left uint32
	idx  int32
	cnt  uint64
	next bool // past the first bucket
}

func (v *view) iter(r packedRef) packedIter {
	return packedIter{p: v.buckets[r.off : r.off+r.len], left: r.n}
}

// Next moves to the next bucket; false at the end.
func (it *packedIter) Next() bool {
	if it.left == 0 {
		return false
	}
	it.left--
	if !it.next {
		v, k := binary.Varint(it.p)
		it.idx, it.p, it.next = int32(v), it.p[k:], true
	} else {
		v, k := binary.Uvarint(it.p)
		it.idx, it.p = it.idx+int32(v), it.p[k:]
	}
	c, k := binary.Uvarint(it.p)
	it.cnt, it.p = c, it.p[k:]
	return true
}

// mergeCounts adds the sorted window buckets add to the sorted buckets
// dst, into out.
func mergeCounts(out, dst, add []bucketCount) []bucketCount {
	i, j := 0, 0
	for i < len(dst) || j < len(add) {
		switch {
		case j == len(add) || (i < len(dst) && dst[i].index < add[j].index):
			out = append(out, dst[i])
			i++
		case i == len(dst) || add[j].index < dst[i].index:
			out = append(out, add[j])
			j++
		default:
			out = append(out, bucketCount{dst[i].index, dst[i].count + add[j].count})
			i++
			j++
		}
	}
	return out
}

// builder is Observe's scratch, reused from one snapshot to the next.
type builder struct {
	seed     maphash.Seed
	reserved []string            // label names a source label may not take (sourceLabelNames)
	index    map[uint64]int32    // label hash -> series index in the newest view
	clashes  map[string]int32    // series whose hash another series has, by full key
	names    map[string][]string // label name sets, joined, shared by metas
	slot     []int32             // per snapshot series: its index in the new view
	first    []int32             // per view series: its first snapshot series, or -1
	next     []int32             // per snapshot series: the next one of the same view series, or -1
	delta    []bucketCount
	neg      []bucketCount
	old      []bucketCount
	merged   []bucketCount
	values   [16]string
	// serviceIsProcess: a series whose processes declare no service
	// takes the process as its service (spanmetrics' service_name).
	serviceIsProcess bool
	// ids: every series keeps its cgroup path and its ids (Config.IDs).
	ids  bool
	best []seriesExemplar // the newest exemplar of this snapshot's overruns per view series, by index
}

// labelValues renders a snapshot series' exported label values in the
// order of seriesLabels then its source label names (sorted), into
// bd.values.
func (bd *builder) labelValues(sr *snapshot.Series, extra []string) []string {
	service := sr.Service
	if service == "" && bd.serviceIsProcess {
		service = sr.Process
	}
	cgroup, containerID, podUID := sr.Cgroup, "", ""
	if bd.ids {
		containerID, podUID = sr.ContainerID, sr.PodUID
	} else if sr.Pod != "" {
		cgroup = ""
	}
	b := append(bd.values[:0], valid(sr.Span), valid(sr.Namespace), valid(sr.Pod), valid(sr.Container), valid(sr.Process), valid(sr.Unit), valid(cgroup), valid(service), valid(containerID), valid(podUID))
	for _, k := range extra {
		b = append(b, valid(sr.SourceLabels[k]))
	}
	return b
}

// hashSeries hashes a series' kind and label names and values.
func (bd *builder) hashSeries(metric bool, extra, values []string) uint64 {
	var h maphash.Hash
	h.SetSeed(bd.seed)
	if metric {
		h.WriteByte('m')
	}
	h.WriteByte(0)
	for _, k := range extra {
		h.WriteString(k)
		h.WriteByte(1)
	}
	for _, v := range values {
		h.WriteString(v)
		h.WriteByte(0)
	}
	return h.Sum64()
}

// fullKey is a series' identity spelled out, for series whose hashes
// clash.
func fullKey(metric bool, names, values []string) string {
	var b strings.Builder
	if metric {
		b.WriteByte('m')
	}
	for i := range names {
		b.WriteString(names[i])
		b.WriteByte(1)
		b.WriteString(values[i])
		b.WriteByte(0)
	}
	return b.String()
}

// newMeta builds a series' meta: its label names sorted with their
// values, empty values left out.
func (bd *builder) newMeta(metric bool, extra, values []string, hash uint64, created time.Time) *seriesMeta {
	type pair struct{ n, v string }
	pairs := make([]pair, 0, len(values))
	for i, v := range values {
		if v == "" {
			continue
		}
		n := ""
		if i < len(seriesLabels) {
			n = seriesLabels[i]
		} else {
			n = extra[i-len(seriesLabels)]
		}
		pairs = append(pairs, pair{n, v})
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i].n < pairs[j].n })
	m := &seriesMeta{metric: metric, created: created, hash: hash, values: make([]string, len(pairs))}
	var key strings.Builder
	for i, p := range pairs {
		m.values[i] = p.v
		key.WriteString(p.n)
		key.WriteByte(0)
	}
	names, ok := bd.names[key.String()]
	if !ok {
		names = make([]string, len(pairs))
		for i, p := range pairs {
			names[i] = p.n
		}
		bd.names[key.String()] = names
	}
	m.names = names
	return m
}

// sameSeries says whether meta is the series of these labels.
func sameSeries(m *seriesMeta, metric bool, extra, values []string) bool {
	if m.metric != metric {
		return false
	}
	j := 0
	for i, v := range values {
		if v == "" {
			continue
		}
		n := ""
		if i < len(seriesLabels) {
			n = seriesLabels[i]
		} else {
			n = extra[i-len(seriesLabels)]
		}
		// m's pairs are sorted by name; look the name up.
		k := slices.Index(m.names, n)
		if k < 0 || m.values[k] != v {
			return false
		}
		j++
	}
	return j == len(m.values)
}

// build makes the view after snapshot s from old: the series' cumulative
// values with s's windows added, new series appended in order of
// appearance, and the series past the TTL (or, with dropAbsent, every
// series s does not hold) left out.
func (e *Exporter) build(old *view, s *snapshot.Snapshot, now time.Time, dropAbsent bool) *view {
	bd := &e.bd
	nowNs := now.UnixNano()
	n := len(old.series)
	bd.slot = bd.slot[:0]
	var added []*seriesMeta
	for i := range s.Series {
		sr := &s.Series[i]
		var extra []string
		if len(sr.SourceLabels) > 0 {
			extra = bd.sourceLabelNames(sr.SourceLabels)
		}
		metric := sr.IsMetric()
		values := bd.labelValues(sr, extra)
		h := bd.hashSeries(metric, extra, values)
		idx, ok := bd.index[h]
		if ok {
			m := e.metaAt(old, added, idx)
			if !sameSeries(m, metric, extra, values) {
				if bd.clashes == nil {
					bd.clashes = map[string]int32{}
				}
				m2 := bd.newMeta(metric, extra, values, h, now)
				key := fullKey(metric, m2.names, m2.values)
				if idx, ok = bd.clashes[key]; !ok {
					idx = int32(n + len(added))
					added = append(added, m2)
					bd.clashes[key] = idx
				}
				ok = true
			}
		}
		if !ok {
			idx = int32(n + len(added))
			added = append(added, bd.newMeta(metric, extra, values, h, now))
			bd.index[h] = idx
		}
		bd.slot = append(bd.slot, idx)
	}
	bd.best = bd.best[:0]
	if e.exemplars && len(s.Overruns) > 0 {
		e.pickExemplars(old, added, s, now)
	}
	total := n + len(added)
	series := make([]viewSeries, total)
	copy(series, old.series)
	for j, m := range added {
		series[n+j] = viewSeries{meta: m}
	}
	// Chain each view series' snapshot series (usually one).
	bd.first = slices.Grow(bd.first[:0], total)[:total]
	for i := range bd.first {
		bd.first[i] = -1
	}
	bd.next = slices.Grow(bd.next[:0], len(bd.slot))[:len(bd.slot)]
	for i := len(bd.slot) - 1; i >= 0; i-- {
		idx := bd.slot[i]
		bd.next[i] = bd.first[idx]
		bd.first[idx] = int32(i)
	}
	for i, idx := range bd.slot {
		sr, vs := &s.Series[i], &series[idx]
		vs.lastSeen = nowNs
		vs.count += sr.Count
		if vs.meta.metric {
			vs.sumVal += sr.Sum
			continue
		}
		vs.errors += sr.Errors
		vs.overBudget += sr.OverBudget
		vs.sumNs += sr.SumNs
		vs.budgetNs = sr.BudgetNs
		vs.maxNs = max(vs.maxNs, sr.MaxNs)
	}
	// Keep what the TTL keeps, then pack the histograms of what is kept.
	keep := series[:0]
	dropped := false
	buckets := make([]byte, 0, len(old.buckets)+len(old.buckets)/8+64)
	var exemplars []exemplar
	if len(old.exemplars) > 0 || len(bd.best) > 0 {
		exemplars = make([]exemplar, 0, len(old.exemplars)+len(bd.best))
	}
	best := bd.best
	for i := range series {
		vs := series[i]
		if vs.lastSeen != nowNs && ((e.ttl > 0 && nowNs-vs.lastSeen > int64(e.ttl)) || dropAbsent) {
			dropped = true
			continue
		}
		// The series' exemplar: this snapshot's newest, unless the one it
		// had is newer still.
		for len(best) > 0 && best[0].idx < int32(i) {
			best = best[1:]
		}
		var ex exemplar
		ok := len(best) > 0 && best[0].idx == int32(i)
		if ok {
			ex = best[0].ex
		}
		if vs.ex != 0 && (!ok || old.exemplars[vs.ex-1].unixNs >= ex.unixNs) {
			ex, ok = old.exemplars[vs.ex-1], true
		}
		vs.ex = 0
		if ok {
			exemplars = append(exemplars, ex)
			vs.ex = uint32(len(exemplars))
		}
		if bd.first[i] < 0 {
			// No window: the packed bytes move as they are.
			buckets, vs.hist = moveRef(buckets, old, vs.hist)
			buckets, vs.neg = moveRef(buckets, old, vs.neg)
		} else {
			buckets = e.addWindows(buckets, old, &vs, s, bd.first[i])
		}
		keep = append(keep, vs)
	}
	if dropped {
		clear(series[len(keep):])
		clear(bd.index)
		clear(bd.clashes)
		for i := range keep {
			m := keep[i].meta
			if j, ok := bd.index[m.hash]; ok && keep[j].meta != m {
				if bd.clashes == nil {
					bd.clashes = map[string]int32{}
				}
				bd.clashes[fullKey(m.metric, m.names, m.values)] = int32(i)
				continue
			}
			bd.index[m.hash] = int32(i)
		}
	}
	return &view{series: keep, buckets: buckets, exemplars: exemplars}
}

// find returns the index of the series of these labels in the view
// being built (old's series, then added), if there is one.
func (e *Exporter) find(old *view, added []*seriesMeta, metric bool, extra, values []string, h uint64) (int32, bool) {
	bd := &e.bd
	idx, ok := bd.index[h]
	if !ok {
		return 0, false
	}
	if sameSeries(e.metaAt(old, added, idx), metric, extra, values) {
		return idx, true
	}
	if bd.clashes == nil {
		return 0, false
	}
	m := bd.newMeta(metric, extra, values, h, time.Time{})
	idx, ok = bd.clashes[fullKey(metric, m.names, m.values)]
	return idx, ok
}

// metaAt is the meta of view series idx: an old one, or one added in this
// build.
func (e *Exporter) metaAt(old *view, added []*seriesMeta, idx int32) *seriesMeta {
	if int(idx) < len(old.series) {
		return old.series[idx].meta
	}
	return added[int(idx)-len(old.series)]
}

func moveRef(b []byte, old *view, r packedRef) ([]byte, packedRef) {
	if r.n == 0 {
		return b, packedRef{}
	}
	off := len(b)
	b = append(b, old.buckets[r.off:r.off+r.len]...)
	return b, packedRef{off: uint32(off), len: r.len, n: r.n}
}

// addWindows adds the histograms of the snapshot series chained from
// first to vs's, packing the result into b.
func (e *Exporter) addWindows(b []byte, old *view, vs *viewSeries, s *snapshot.Snapshot, first int32) []byte {
	bd := &e.bd
	bd.delta, bd.neg = bd.delta[:0], bd.neg[:0]
	for i := first; i >= 0; i = bd.next[i] {
		for _, bk := range s.Series[i].Histogram {
			switch {
			case bk.Zero:
				vs.zero += bk.Count
			case bk.Negative:
				bd.neg = append(bd.neg, bucketCount{bk.Index, bk.Count})
			default:
				bd.delta = append(bd.delta, bucketCount{bk.Index, bk.Count})
			}
		}
	}
	b, vs.hist = e.addPacked(b, old, vs.hist, bd.delta)
	b, vs.neg = e.addPacked(b, old, vs.neg, bd.neg)
	return b
}

// addPacked packs the buckets of r (in old; none for a new series) plus
// add into b.
func (e *Exporter) addPacked(b []byte, old *view, r packedRef, add []bucketCount) ([]byte, packedRef) {
	bd := &e.bd
	if len(add) == 0 {
		return moveRef(b, old, r)
	}
	// Windows come sorted, each bucket once, but a series made of
	// several snapshot series (names that differ only in invalid UTF-8)
	// or a hand-made snapshot may not: sort and sum.
	if !slices.IsSortedFunc(add, func(x, y bucketCount) int { return cmp.Compare(x.index, y.index) }) {
		slices.SortFunc(add, func(x, y bucketCount) int { return cmp.Compare(x.index, y.index) })
	}
	j := 0
	for i := range add {
		if j > 0 && add[j-1].index == add[i].index {
			add[j-1].count += add[i].count
			continue
		}
		add[j] = add[i]
		j++
	}
	add = add[:j]
	bd.old = bd.old[:0]
	if r.n > 0 {
		bd.old = unpack(bd.old, old.buckets[r.off:r.off+r.len], r.n)
	}
	bd.merged = mergeCounts(bd.merged[:0], bd.old, add)
	off := len(b)
	b = appendPacked(b, bd.merged)
	return b, packedRef{off: uint32(off), len: uint32(len(b) - off), n: uint32(len(bd.merged))}
}
