//go:build linux

package collector

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/snapshot"
)

const batchSize = 256

// Counter indexes, as enum counter in bpf/aggregate.h.
const (
	counterRingbufDrops = 1
	counterStatsFull    = 2
	counterShort        = 3
	counterReadErrors   = 4
)

type cumulative struct {
	count, errors, sum, max, over uint64
	hist                          [histBuckets]uint64
	lastChange                    time.Time
}

// statsReader reads the per-CPU stats map into reused buffers and keeps the
// previous totals to compute deltas.
type statsReader struct {
	stats, nameMap, counters *ebpf.Map
	ncpu                     int
	valueStride              int // bytes per CPU value, 8-aligned

	keys   []bpf.SpanwatchStatsKey
	values []byte
	cur    map[bpf.SpanwatchStatsKey]*cumulative
	seen   map[bpf.SpanwatchStatsKey]bool

	names       map[uint64]string
	budgets     map[uint64]uint64
	budgetFlags map[uint64]uint32
	budgetDone  map[uint64]struct{}
	prevCount   [8]uint64
	sum         cumulative // scratch
}

func newStatsReader(stats, names, counters *ebpf.Map) (*statsReader, error) {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("possible cpus: %w", err)
	}
	stride := int(stats.ValueSize()+7) &^ 7
	if want := int(unsafe.Sizeof(bpf.SpanwatchSpanAgg{})); stride != want {
		return nil, fmt.Errorf("stats value size %d, Go mirror %d: regenerate bpf", stride, want)
	}
	return &statsReader{
		stats: stats, nameMap: names, counters: counters,
		ncpu: ncpu, valueStride: stride,
		keys:        make([]bpf.SpanwatchStatsKey, batchSize),
		values:      make([]byte, batchSize*stride*ncpu),
		cur:         map[bpf.SpanwatchStatsKey]*cumulative{},
		seen:        map[bpf.SpanwatchStatsKey]bool{},
		names:       map[uint64]string{},
		budgets:     map[uint64]uint64{},
		budgetFlags: map[uint64]uint32{},
		budgetDone:  map[uint64]struct{}{},
	}, nil
}

func (r *statsReader) budgetOf(id uint64) uint64 { return r.budgets[id] }

func (r *statsReader) nameOf(id uint64) string {
	if n, ok := r.names[id]; ok {
		return n
	}
	var v bpf.SpanwatchSpanName
	if err := r.nameMap.Lookup(id, &v); err != nil {
		// The names map was full when the series appeared; the id is
		// all there is, and asking again each window would cost a
		// syscall per series.
		n := fmt.Sprintf("name#%016x", id)
		r.names[id] = n
		return n
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&v.Name[0])), len(v.Name))
	n := snapshot.NameString(b)
	r.names[id] = n
	return n
}

// read builds the snapshot of one window.
func (r *statsReader) read(now time.Time, window time.Duration, idleEvict time.Duration) (*snapshot.Snapshot, error) {
	start := time.Now()
	s := &snapshot.Snapshot{Version: snapshot.Version, Time: now, WindowNs: int64(window), Series: []snapshot.Series{}}
	clear(r.seen)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := r.stats.BatchLookup(&cursor, r.keys, r.values, nil)
		for i := 0; i < n; i++ {
			r.add(s, r.keys[i], r.values[i*r.valueStride*r.ncpu:(i+1)*r.valueStride*r.ncpu], now, window)
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read stats map: %w", err)
		}
	}
	// Series that left the kernel map (evicted) are forgotten.
	for k, c := range r.cur {
		if !r.seen[k] {
			delete(r.cur, k)
			continue
		}
		if idleEvict > 0 && now.Sub(c.lastChange) > idleEvict {
			if err := r.stats.Delete(k); err == nil {
				delete(r.cur, k)
			}
		}
	}
	// Every aggregated span adds one to exactly one series: the events
	// of the window are the sum of the series' counts (the BPF programs
	// keep no separate counter, one map update less per span).
	for i := range s.Series {
		s.Stats.Events += s.Series[i].Count
	}
	if err := r.readCounters(&s.Stats); err != nil {
		return nil, err
	}
	s.Stats.ReadNs = int64(time.Since(start))
	return s, nil
}

func (r *statsReader) add(s *snapshot.Snapshot, key bpf.SpanwatchStatsKey, raw []byte, now time.Time, window time.Duration) {
	r.seen[key] = true
	tot := &r.sum
	*tot = cumulative{}
	for cpu := 0; cpu < r.ncpu; cpu++ {
		v := (*bpf.SpanwatchSpanAgg)(unsafe.Pointer(&raw[cpu*r.valueStride]))
		tot.count += v.Count
		tot.errors += v.Errors
		tot.sum += v.SumNs
		tot.over += v.OverBudget
		if v.MaxNs > tot.max {
			tot.max = v.MaxNs
		}
		for i := range tot.hist {
			tot.hist[i] += v.Hist[i]
		}
	}
	prev, ok := r.cur[key]
	if !ok {
		prev = &cumulative{lastChange: now}
		r.cur[key] = prev
	}
	if tot.count < prev.count {
		// The entry was deleted and recreated: start over.
		*prev = cumulative{lastChange: now}
	}
	sr := snapshot.Series{
		Span:       r.nameOf(key.NameId),
		NameID:     key.NameId,
		CgroupID:   key.CgroupId,
		Count:      tot.count - prev.count,
		Errors:     tot.errors - prev.errors,
		SumNs:      tot.sum - prev.sum,
		OverBudget: tot.over - prev.over,
	}
	var delta [histBuckets]uint64
	top, bottom := -1, -1
	for i := range delta {
		delta[i] = tot.hist[i] - prev.hist[i]
		if delta[i] != 0 {
			top = i
			if bottom < 0 {
				bottom = i
			}
		}
	}
	if sr.Count > 0 {
		prev.lastChange = now
		if window > 0 {
			sr.Rate = float64(sr.Count) / window.Seconds()
		}
		sr.ErrorRatio = float64(sr.Errors) / float64(sr.Count)
		sr.Histogram = oldHistogram(delta[:])
		if top >= 0 {
			lo, _ := oldBucketBounds(bottom)
			_, hi := oldBucketBounds(top)
			sr.MinNs, sr.MaxNs = lo, min(hi-1, tot.max)
		}
		mn, mx := float64(sr.MinNs), float64(sr.MaxNs)
		sr.P50Ns = uint64(snapshot.Quantile(sr.Histogram, 0.50, mn, mx))
		sr.P90Ns = uint64(snapshot.Quantile(sr.Histogram, 0.90, mn, mx))
		sr.P99Ns = uint64(snapshot.Quantile(sr.Histogram, 0.99, mn, mx))
	}
	lc := prev.lastChange
	*prev = *tot
	prev.lastChange = lc
	s.Series = append(s.Series, sr)
}

func (r *statsReader) readCounters(st *snapshot.Stats) error {
	var vals []uint64
	var out [8]uint64
	for i := uint32(0); i < 5; i++ {
		if err := r.counters.Lookup(i, &vals); err != nil {
			return fmt.Errorf("read counters: %w", err)
		}
		var t uint64
		for _, v := range vals {
			t += v
		}
		out[i] = t
	}
	st.RingbufDrops = out[counterRingbufDrops] - r.prevCount[counterRingbufDrops]
	st.StatsFull = out[counterStatsFull] - r.prevCount[counterStatsFull]
	st.ShortEvents = out[counterShort] - r.prevCount[counterShort]
	st.ReadErrors = out[counterReadErrors] - r.prevCount[counterReadErrors]
	r.prevCount = out
	return nil
}

// The kernel's log-linear histogram (bpf/aggregate.h), until the series
// model moves to schema-6 buckets in BPF: 8 buckets per power of two.
const (
	histSubBits = 3
	histSub     = 1 << histSubBits
	histMaxExp  = 37
	histBuckets = (histMaxExp - histSubBits + 2) * histSub
)

func oldBucketBounds(i int) (low, high uint64) {
	if i < histSub {
		return uint64(i), uint64(i) + 1
	}
	e := i/histSub + histSubBits - 1
	sub := uint64(i % histSub)
	shift := e - histSubBits
	return (histSub + sub) << shift, (histSub + sub + 1) << shift
}

// oldHistogram moves each log-linear bucket's count to the schema-6 bucket
// of its midpoint.
func oldHistogram(counts []uint64) []snapshot.Bucket {
	var h []snapshot.Bucket
	for i, c := range counts {
		if c == 0 {
			continue
		}
		lo, hi := oldBucketBounds(i)
		h = snapshot.MergeHistogram(h, []snapshot.Bucket{snapshot.DurationBucket(lo+(hi-1-lo)/2, c)})
	}
	return h
}

func oldBucketIndex(ns uint64) int {
	if ns < histSub {
		return int(ns)
	}
	e := 63 - bits.LeadingZeros64(ns)
	if e > histMaxExp {
		return histBuckets - 1
	}
	return (e-histSubBits+1)*histSub + int((ns>>(e-histSubBits))&(histSub-1))
}
