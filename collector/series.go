//go:build linux

package collector

import (
	"fmt"
	"math"
	"math/bits"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/snapshot"
)

// Shared constants of C and Go, generated from bpf/aggregate.h's enums.
const (
	slotLive      = uint64(bpf.SpanwatchSlotStateSLOT_LIVE)
	cellsPerChunk = int(bpf.SpanwatchCoreSizesCELLS_PER_CHUNK)
	cellFieldBits = uint(bpf.SpanwatchCoreSizesCELL_FIELD_BITS)
	cellIndexBias = int32(bpf.SpanwatchCoreSizesCELL_INDEX_BIAS)
	cellNeg       = uint32(bpf.SpanwatchCoreSizesCELL_NEG)
	cellSlotMax   = uint32(bpf.SpanwatchCoreSizesCELL_SLOT_MAX)
	seriesLabels  = int(bpf.SpanwatchCoreSizesSERIES_LABELS)
	kindMetric    = uint8(bpf.SpanwatchSeriesKindSERIES_METRIC)
	budgetGenMask = 0xfff
)

// mapping is a BPF_F_MMAPABLE array map mapped into our memory, read and
// written with atomic operations beside the BPF programs'.
type mapping struct {
	mem []byte
}

func mmapMap(m *ebpf.Map) (*mapping, error) {
	size := int(m.MaxEntries()) * int((m.ValueSize()+7)&^7)
	page := os.Getpagesize()
	size = (size + page - 1) &^ (page - 1)
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap map %s: %w", m, err)
	}
	return &mapping{mem: mem}, nil
}

func (m *mapping) close() error {
	if m == nil || m.mem == nil {
		return nil
	}
	err := unix.Munmap(m.mem)
	m.mem = nil
	return err
}

func (m *mapping) words() []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(&m.mem[0])), len(m.mem)/8)
}

// LabelSet names the label values of the series of one source (a key's
// labelset): the source registers it before its first span.
type LabelSet struct {
	// Names are the labels' names, at most 3 (SERIES_LABELS).
	Names []string
	// Signed says whether each value is a signed integer.
	Signed []bool
}

// winAcc is one series' counts over the window being read.
type winAcc struct {
	key                      bpf.SpanwatchSeriesKey
	count, errors, sum, over uint64
	minInv, max              uint64
	hist                     map[uint32]uint64 // cell field -> count
	touched                  bool
}

// seriesState is what the reader keeps of a series between windows.
type seriesState struct {
	name       string
	lastChange time.Time
	slots      []uint32 // the slots holding it (usually one)
	acc        winAcc
}

// quarantined is a slot whose series left series_index: it is freed once
// no program can still hold it.
type quarantined struct {
	slot  uint32
	key   bpf.SpanwatchSeriesKey
	since time.Time
	reads int
}

// seriesReader reads the series array and the histogram cells through
// their mappings.
type seriesReader struct {
	objs *objects
	log  logger

	slots       []bpf.SpanwatchSeriesSlot
	slotDirty   []uint64
	cells       []uint64
	cellDirty   []uint64
	core        *bpf.SpanwatchCoreState
	maps        []*mapping
	seriesMax   uint32
	labelSets   sync.Map // uint16 -> LabelSet
	resolvers   atomic.Pointer[nameResolvers]
	names       map[uint64]string
	pruned      map[uint64]string // names of pruned ids, in case one comes back
	otherNameID uint64
	slotKey     []bpf.SpanwatchSeriesKey // the key each slot was last seen live with
	slotKnown   []bool
	slotCells   map[uint32][]uint32 // slot -> cells seen holding it (freed with it)
	series      map[bpf.SpanwatchSeriesKey]*seriesState
	quarantine  []quarantined
	budgets     *budgetTable
	resolved    map[string]bool // names given by resolvers: their series may need merging
	prevCount   [bpf.SpanwatchCounterCOUNTER_MAX]uint64
	lastRead    time.Time
}

type logger interface {
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
}

func newSeriesReader(objs *objects, log logger, seriesMax uint32) (_ *seriesReader, err error) {
	r := &seriesReader{objs: objs, log: log, seriesMax: seriesMax,
		names:       map[uint64]string{},
		pruned:      map[uint64]string{},
		otherNameID: snapshot.NameID(snapshot.OtherName),
		slotKey:     make([]bpf.SpanwatchSeriesKey, seriesMax),
		slotKnown:   make([]bool, seriesMax),
		slotCells:   map[uint32][]uint32{},
		series:      map[bpf.SpanwatchSeriesKey]*seriesState{},
	}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	mm := func(m *ebpf.Map) (*mapping, error) {
		x, err := mmapMap(m)
		if err == nil {
			r.maps = append(r.maps, x)
		}
		return x, err
	}
	var m *mapping
	if m, err = mm(objs.Series); err != nil {
		return nil, err
	}
	if want := int(unsafe.Sizeof(bpf.SpanwatchSeriesSlot{})); int(objs.Series.ValueSize()) != want {
		return nil, fmt.Errorf("series value size %d, Go mirror %d: regenerate bpf", objs.Series.ValueSize(), want)
	}
	r.slots = unsafe.Slice((*bpf.SpanwatchSeriesSlot)(unsafe.Pointer(&m.mem[0])), objs.Series.MaxEntries())
	if m, err = mm(objs.SeriesDirty); err != nil {
		return nil, err
	}
	r.slotDirty = m.words()[:objs.SeriesDirty.MaxEntries()]
	if m, err = mm(objs.Cells); err != nil {
		return nil, err
	}
	r.cells = m.words()[:int(objs.Cells.MaxEntries())*cellsPerChunk]
	if m, err = mm(objs.CellDirty); err != nil {
		return nil, err
	}
	r.cellDirty = m.words()[:objs.CellDirty.MaxEntries()]
	if m, err = mm(objs.Core); err != nil {
		return nil, err
	}
	r.core = (*bpf.SpanwatchCoreState)(unsafe.Pointer(&m.mem[0]))
	return r, nil
}

func (r *seriesReader) close() {
	for _, m := range r.maps {
		m.close()
	}
	r.maps = nil
}

func (r *seriesReader) nameOf(id uint64) string {
	if n, ok := r.names[id]; ok {
		return n
	}
	var v bpf.SpanwatchSpanName
	if err := r.objs.Names.Lookup(id, &v); err != nil {
		if n, ok := r.pruned[id]; ok {
			return n
		}
		// The names map was full when the series appeared (counted);
		// the id is all there is. Not cached: the name may come later.
		return fmt.Sprintf("name#%016x", id)
	}
	n := snapshot.NameString(int8Bytes(v.Name[:]))
	if m, ok := r.resolveName(n); ok {
		n = m
		if r.resolved == nil {
			r.resolved = map[string]bool{}
		}
		r.resolved[n] = true
	}
	r.names[id] = n
	return n
}

// swapCount takes a cell's count and leaves its key: the low 32 bits go
// to zero atomically, against the programs' concurrent adds.
func swapCount(p *uint64) (key, n uint32) {
	for {
		v := atomic.LoadUint64(p)
		if uint32(v) == 0 {
			return uint32(v >> 32), 0
		}
		if atomic.CompareAndSwapUint64(p, v, v&^0xffffffff) {
			return uint32(v >> 32), uint32(v)
		}
	}
}

// read builds the snapshot of one window: every live series, with the
// counts of the window (0 for a series that had none).
func (r *seriesReader) read(now time.Time, window time.Duration, idleEvict time.Duration) (*snapshot.Snapshot, error) {
	start := time.Now()
	s := &snapshot.Snapshot{Version: snapshot.Version, Time: now, WindowNs: int64(window), Series: []snapshot.Series{}}
	hwm := atomic.LoadUint64(&r.core.NextSlot)
	if hwm > uint64(r.seriesMax) {
		hwm = uint64(r.seriesMax)
	}
	touched := map[*seriesState]struct{}{}

	// Slots whose counters changed: their dirty bits, swapped to zero
	// before the counters are read, so a value added after its read sets
	// the bit again for the next window.
	for w := 0; w < int(hwm+63)/64 && w < len(r.slotDirty); w++ {
		if atomic.LoadUint64(&r.slotDirty[w]) == 0 {
			continue
		}
		b := atomic.SwapUint64(&r.slotDirty[w], 0)
		for b != 0 {
			slot := uint32(w*64 + bits.TrailingZeros64(b))
			b &= b - 1
			if st := r.readSlot(slot, now); st != nil {
				touched[st] = struct{}{}
			} else if slot < uint32(hwm) {
				// Not published yet: look again next window.
				r.markSlotDirty(slot)
			}
		}
	}
	// Histogram cells that changed.
	for w := range r.cellDirty {
		if atomic.LoadUint64(&r.cellDirty[w]) == 0 {
			continue
		}
		b := atomic.SwapUint64(&r.cellDirty[w], 0)
		for b != 0 {
			chunk := w*64 + bits.TrailingZeros64(b)
			b &= b - 1
			for i := chunk * cellsPerChunk; i < (chunk+1)*cellsPerChunk; i++ {
				key, n := swapCount(&r.cells[i])
				if n == 0 {
					continue
				}
				slot := key>>cellFieldBits - 1
				st := r.stateOfSlot(slot)
				if st == nil {
					// The slot's key is not known yet: give the
					// count back for the next window.
					atomic.AddUint64(&r.cells[i], uint64(n))
					r.markCellDirty(uint32(chunk))
					continue
				}
				if st.acc.hist == nil {
					st.acc.hist = map[uint32]uint64{}
				}
				st.acc.hist[key&(1<<cellFieldBits-1)] += uint64(n)
				r.noteCell(slot, uint32(i))
				touched[st] = struct{}{}
			}
		}
	}
	for st := range touched {
		if st.acc.count > 0 || len(st.acc.hist) > 0 {
			st.lastChange = now
		}
	}
	s.Series = make([]snapshot.Series, 0, len(r.series))
	for key, st := range r.series {
		s.Series = append(s.Series, r.build(key, st, window))
		st.acc = winAcc{}
	}
	if len(r.resolved) > 0 {
		s.Series = mergeSeries(s.Series, window, r.resolved)
	}
	sort.Slice(s.Series, func(i, j int) bool {
		a, b := &s.Series[i], &s.Series[j]
		if a.Span != b.Span {
			return a.Span < b.Span
		}
		return a.CgroupID < b.CgroupID
	})
	for i := range s.Series {
		s.Stats.Events += s.Series[i].Count
	}
	if err := r.readCounters(&s.Stats); err != nil {
		return nil, err
	}
	r.evict(now, idleEvict)
	s.Stats.SeriesLive = uint64(len(r.series))
	s.Stats.SeriesCapacity = uint64(r.seriesMax)
	s.Stats.ReadNs = int64(time.Since(start))
	return s, nil
}

func (r *seriesReader) markSlotDirty(slot uint32) {
	atomic.OrUint64(&r.slotDirty[slot/64], 1<<(slot%64))
}

func (r *seriesReader) markCellDirty(chunk uint32) {
	atomic.OrUint64(&r.cellDirty[chunk/64], 1<<(chunk%64))
}

func (r *seriesReader) noteCell(slot, cell uint32) {
	cs := r.slotCells[slot]
	for _, c := range cs {
		if c == cell {
			return
		}
	}
	r.slotCells[slot] = append(cs, cell)
}

// stateOfSlot returns the series a slot holds, learning its key if the
// slot was published since it was last looked at.
func (r *seriesReader) stateOfSlot(slot uint32) *seriesState {
	if slot >= r.seriesMax {
		return nil
	}
	if !r.slotKnown[slot] {
		sl := &r.slots[slot]
		if atomic.LoadUint64(&sl.State) != slotLive {
			return nil
		}
		r.learn(slot, sl.Key)
	}
	return r.series[r.slotKey[slot]]
}

func (r *seriesReader) learn(slot uint32, key bpf.SpanwatchSeriesKey) *seriesState {
	r.slotKnown[slot] = true
	r.slotKey[slot] = key
	st := r.series[key]
	if st == nil {
		st = &seriesState{name: r.nameOf(key.NameId)}
		r.series[key] = st
	}
	for _, s := range st.slots {
		if s == slot {
			return st
		}
	}
	st.slots = append(st.slots, slot)
	return st
}

// readSlot takes a live slot's window counters.
func (r *seriesReader) readSlot(slot uint32, now time.Time) *seriesState {
	if slot >= r.seriesMax {
		return nil
	}
	sl := &r.slots[slot]
	if atomic.LoadUint64(&sl.State) != slotLive {
		return nil
	}
	st := r.series[r.slotKey[slot]]
	if !r.slotKnown[slot] || st == nil {
		st = r.learn(slot, sl.Key)
	}
	a := &st.acc
	n := atomic.SwapUint64(&sl.Count, 0)
	a.count += n
	a.errors += atomic.SwapUint64(&sl.Errors, 0)
	a.sum += atomic.SwapUint64(&sl.Sum, 0)
	a.over += atomic.SwapUint64(&sl.OverBudget, 0)
	a.minInv = max(a.minInv, atomic.SwapUint64(&sl.MinInv, 0))
	a.max = max(a.max, atomic.SwapUint64(&sl.Max, 0))
	return st
}

// build turns a series' window into its snapshot form.
func (r *seriesReader) build(key bpf.SpanwatchSeriesKey, st *seriesState, window time.Duration) snapshot.Series {
	a := &st.acc
	sr := snapshot.Series{
		Span:       st.name,
		NameID:     key.NameId,
		CgroupID:   key.CgroupId,
		Count:      a.count,
		Errors:     a.errors,
		OverBudget: a.over,
	}
	if key.Labelset != 0 {
		sr.SourceLabels = r.labels(key.Labelset, key.Labels[:], key.Other)
	}
	metric := key.Kind == kindMetric
	if metric {
		sr.Kind = snapshot.KindMetric
	}
	if a.count == 0 {
		return sr
	}
	if window > 0 {
		sr.Rate = float64(a.count) / window.Seconds()
	}
	sr.ErrorRatio = float64(a.errors) / float64(a.count)
	sr.Histogram = histogram(a.hist, metric)
	if metric {
		sr.Sum = int64(a.sum)
		var mn, mx float64
		if a.minInv != 0 {
			sr.Min = int64(^a.minInv ^ 1<<63)
			mn = float64(sr.Min)
		}
		if a.max != 0 {
			sr.Max = int64(a.max ^ 1<<63)
			mx = float64(sr.Max)
		}
		sr.P50 = snapshot.Quantile(sr.Histogram, 0.50, mn, mx)
		sr.P90 = snapshot.Quantile(sr.Histogram, 0.90, mn, mx)
		sr.P99 = snapshot.Quantile(sr.Histogram, 0.99, mn, mx)
		return sr
	}
	sr.SumNs = a.sum
	if a.minInv != 0 {
		sr.MinNs = ^a.minInv
	}
	sr.MaxNs = a.max
	mn, mx := float64(sr.MinNs), float64(sr.MaxNs)
	sr.P50Ns = uint64(math.Round(snapshot.Quantile(sr.Histogram, 0.50, mn, mx)))
	sr.P90Ns = uint64(math.Round(snapshot.Quantile(sr.Histogram, 0.90, mn, mx)))
	sr.P99Ns = uint64(math.Round(snapshot.Quantile(sr.Histogram, 0.99, mn, mx)))
	return sr
}

// histogram turns cell fields and counts into sorted buckets.
func histogram(h map[uint32]uint64, metric bool) []snapshot.Bucket {
	if len(h) == 0 {
		return nil
	}
	out := make([]snapshot.Bucket, 0, len(h))
	for f, n := range h {
		switch {
		case f == 0:
			out = append(out, snapshot.Bucket{Zero: true, Low: 0, High: 1, Count: n})
		case f >= cellNeg:
			out = append(out, snapshot.ValueBucketAt(int32(f-cellNeg)-cellIndexBias, true, n))
		case metric:
			out = append(out, snapshot.ValueBucketAt(int32(f)-cellIndexBias, false, n))
		default:
			out = append(out, snapshot.DurationBucketAt(int32(f)-cellIndexBias, n))
		}
	}
	snapshot.SortBuckets(out)
	return out
}

// labels renders a key's label values with its label set's names.
func (r *seriesReader) labels(set uint16, vals []uint64, other uint8) map[string]string {
	v, ok := r.labelSets.Load(set)
	if !ok {
		return map[string]string{"labelset": strconv.Itoa(int(set))}
	}
	ls := v.(LabelSet)
	out := make(map[string]string, len(ls.Names))
	for i, name := range ls.Names {
		if i >= seriesLabels {
			break
		}
		switch {
		case other&(1<<i) != 0:
			out[name] = "other"
		case i < len(ls.Signed) && ls.Signed[i]:
			out[name] = strconv.FormatInt(int64(vals[i]), 10)
		default:
			out[name] = strconv.FormatUint(vals[i], 10)
		}
	}
	return out
}

// readCounters reads the programs' loss counters as window deltas.
func (r *seriesReader) readCounters(st *snapshot.Stats) error {
	var vals []uint64
	var out [bpf.SpanwatchCounterCOUNTER_MAX]uint64
	for i := range out {
		if err := r.objs.Counters.Lookup(uint32(i), &vals); err != nil {
			return fmt.Errorf("read counters: %w", err)
		}
		for _, v := range vals {
			out[i] += v
		}
	}
	d := func(c bpf.SpanwatchCounter) uint64 { return out[c] - r.prevCount[c] }
	st.RingbufDrops = d(bpf.SpanwatchCounterCOUNTER_RINGBUF_DROPS)
	st.StatsFull = d(bpf.SpanwatchCounterCOUNTER_SERIES_FULL)
	st.ShortEvents = d(bpf.SpanwatchCounterCOUNTER_SHORT)
	st.ReadErrors = d(bpf.SpanwatchCounterCOUNTER_READ_ERRORS)
	st.HistogramFull = d(bpf.SpanwatchCounterCOUNTER_HIST_FULL)
	st.NamesTruncated = d(bpf.SpanwatchCounterCOUNTER_NAME_TRUNCATED)
	st.QuotaOther = d(bpf.SpanwatchCounterCOUNTER_QUOTA_OTHER)
	st.NamesFull = d(bpf.SpanwatchCounterCOUNTER_NAMES_FULL)
	r.prevCount = out
	return nil
}

// keyString renders a key for logs.
func keyString(name string, k bpf.SpanwatchSeriesKey) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s cgroup=%d", name, k.CgroupId)
	if k.Labelset != 0 {
		fmt.Fprintf(&b, " labelset=%d labels=%v", k.Labelset, k.Labels)
	}
	return b.String()
}
