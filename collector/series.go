//go:build linux

package collector

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"slices"
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
	budgetGenMask = uint32(bpf.SpanwatchBudgetBitsBUDGET_GEN_MASK)
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
	// String, when set, names label i's value v by the string the
	// source kept for it (a function's string argument, whose value in
	// the key is a hash): ok false leaves the value as a number.
	String func(i int, v uint64) (s string, ok bool)
}

// stringOf puts label i's value v in out[name] as the string the
// source kept for it, and reports whether it had one.
func (ls LabelSet) stringOf(i int, v uint64, out map[string]string, name string) bool {
	s, ok := ls.String(i, v)
	if ok {
		out[name] = s
	}
	return ok
}

// cellCount is one histogram cell's count taken in a window.
type cellCount struct {
	field uint32
	n     uint64
}

// winAcc is one series' counts over the window being read.
type winAcc struct {
	count, errors, sum, over uint64
	minInv, max              uint64
	hist                     []cellCount // usually a few: no map
}

// cellEntry is one cell's count taken in a window, chained per slot.
type cellEntry struct {
	field, cell uint32
	next        int32 // the slot's next entry, or -1
	n           uint32
}

// slotTotals are a slot's cumulative counters: the programs only add to
// them, so a window is the difference of two plain reads (no locked
// instruction per counter; the extremes are swapped, they cannot be
// differenced).
type slotTotals struct {
	count, errors, sum, over uint64
}

// seriesState is what the reader keeps of a series between windows.
type seriesState struct {
	key        bpf.SpanwatchSeriesKey
	name       string
	lastChange time.Time
	slots      []uint32 // the slots holding it (usually one)
	acc        winAcc
	dead       bool // evicted: left r.order at the next compaction
	// The budget of the series' name under budget table budgetGen.
	budgetNs  uint64
	budgetGen uint64
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

	slots        []bpf.SpanwatchSeriesSlot
	slotDirty    []uint64
	cells        []uint64        // every bank's, one after the other (bankSet)
	banks        *bankSet        // nil in the compat core
	spilled      map[uint32]bool // cells holding a key of a slot of another bank
	cellDirty    []uint64
	core         *bpf.SpanwatchCoreState
	maps         []*mapping
	seriesMax    uint32
	labelSets    sync.Map // uint16 -> LabelSet
	resolvers    atomic.Pointer[nameResolvers]
	names        map[uint64]string
	pruned       map[uint64]string // names of pruned ids, in case one comes back
	otherNameID  uint64
	slotState    []*seriesState // slot -> the series it holds, once seen live
	slotCells    [][]uint32     // slot -> cells seen holding it (freed with it)
	slotPrev     []slotTotals   // slot -> its cumulative counters at the last read
	cellHead     []int32        // slot -> its first cell entry of the window, or -1
	inQuarantine []bool         // slot -> waiting in r.quarantine
	cellBuf      []cellEntry
	byKey        map[bpf.SpanwatchSeriesKey]*seriesState
	order        []*seriesState // in order of first sight; dead ones until compacted
	dead         int
	nameRefs     map[uint64]int // series and quarantined slots per name id
	quarantine   []quarantined
	budgets      *budgetTable
	budgetGen    uint64          // bumped with each new budget table
	resolved     map[string]int  // names given by resolvers (ids cached with each): their series may need merging
	resolvedIDs  map[uint64]bool // ids whose cached name a resolver gave
	// The series kept per process (split.go): process names a tgid;
	// the cgroups and tgids of the last read's.
	process      func(tgid uint32) (name, service string)
	splitCgroups map[uint64]bool
	liveTgids    map[uint32]bool
	prevCount    [bpf.SpanwatchCounterCOUNTER_MAX]uint64
	lastRead     time.Time

	// The compat core (kernel.CoreCompat): dirty marks are bytes,
	// histogram cells are cumulative counts in cell_counts (by cell key;
	// slotCells then holds keys), min and max are not kept.
	compat    bool
	cellPrev  map[uint32]uint64 // cell key -> its count at the last read
	cellKeys  []uint32          // reused by readCellCounts
	cellVals  []uint64
	globWrote bool                       // the read wrote glob budgets: bump the generation
	globExact map[uint64]*compiledBudget // name ids given a glob's budget in the set in force
	sets      *[budgetSets]budgetSet     // the Collector's: what each set of budgets holds
}

type logger interface {
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
}

func newSeriesReader(objs *objects, log logger, seriesMax uint32, compat bool, plan bankPlan) (_ *seriesReader, err error) {
	// The per-slot arrays grow with the slots in use (grow), not with
	// the capacity: an idle agent holds none of them.
	r := &seriesReader{objs: objs, log: log, seriesMax: seriesMax, compat: compat,
		names:       map[uint64]string{},
		pruned:      map[uint64]string{},
		otherNameID: snapshot.NameID(snapshot.OtherName),
		byKey:       map[bpf.SpanwatchSeriesKey]*seriesState{},
		nameRefs:    map[uint64]int{},
	}
	if compat {
		r.cellPrev = map[uint32]uint64{}
		r.globExact = map[uint64]*compiledBudget{}
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
	if m, err = mm(objs.CellDirty); err != nil {
		return nil, err
	}
	r.cellDirty = m.words()[:objs.CellDirty.MaxEntries()]
	if m, err = mm(objs.Core); err != nil {
		return nil, err
	}
	r.core = (*bpf.SpanwatchCoreState)(unsafe.Pointer(&m.mem[0]))
	if !compat {
		// The core's cells per bank and slots per bank, before any
		// program runs; then the first banks.
		r.core.BankChunksMask = plan.chunks - 1
		r.core.BankSlots = plan.slots
		if r.banks, err = newBankSet(plan, objs.CellBanks, &r.core.NextSlot, &r.core.BanksMade, log); err != nil {
			return nil, err
		}
		r.cells = r.banks.cells()
		r.spilled = map[uint32]bool{}
	}
	return r, nil
}

// grow extends the per-slot arrays to hold slots below n (at most the
// capacity), doubling so that a filling map costs few copies.
func (r *seriesReader) grow(n uint32) {
	n = min(n, r.seriesMax)
	have := uint32(len(r.slotState))
	if n <= have {
		return
	}
	if c := uint32(cap(r.slotState)); n <= c {
		n = c
	} else {
		n = min(max(n, 2*have, 64), r.seriesMax)
	}
	r.slotState = append(r.slotState, make([]*seriesState, n-have)...)
	r.slotCells = append(r.slotCells, make([][]uint32, n-have)...)
	r.slotPrev = append(r.slotPrev, make([]slotTotals, n-have)...)
	r.inQuarantine = append(r.inQuarantine, make([]bool, n-have)...)
	for range n - have {
		r.cellHead = append(r.cellHead, -1)
	}
}

func (r *seriesReader) close() {
	if r.banks != nil {
		r.banks.close()
		r.banks, r.cells = nil, nil
	}
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
	n := snapshot.NameString(bpf.Bytes(v.Name[:]))
	if m, ok := r.resolveName(n); ok {
		n = m
		if r.resolved == nil {
			r.resolved, r.resolvedIDs = map[string]int{}, map[uint64]bool{}
		}
		r.resolved[n]++
		r.resolvedIDs[id] = true
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
// counts of the window (0 for a series that had none), in the order the
// series first appeared.
func (r *seriesReader) read(now time.Time, window time.Duration, idleEvict time.Duration) (*snapshot.Snapshot, error) {
	start := time.Now()
	s := &snapshot.Snapshot{Version: snapshot.Version, Time: now, WindowNs: int64(window)}
	clear(r.splitCgroups)
	clear(r.liveTgids)
	hwm := atomic.LoadUint64(&r.core.NextSlot)
	if hwm > uint64(r.seriesMax) {
		hwm = uint64(r.seriesMax)
	}
	r.grow(uint32(hwm+63) &^ 63)

	// Slots whose counters changed: their dirty bits, swapped to zero
	// before the counters are read, so a value added after its read sets
	// the bit again for the next window.
	perWord := uint64(r.marksPerWord())
	for w := 0; w < int((hwm+perWord-1)/perWord) && w < len(r.slotDirty); w++ {
		if atomic.LoadUint64(&r.slotDirty[w]) == 0 {
			continue
		}
		b := r.marks(atomic.SwapUint64(&r.slotDirty[w], 0))
		for b != 0 {
			slot := uint32(w*int(perWord) + bits.TrailingZeros64(b))
			b &= b - 1
			if r.readSlot(slot) == nil && slot < uint32(hwm) {
				// Not published yet: look again next window.
				r.markSlotDirty(slot)
			}
		}
	}
	// Histogram cells that changed.
	if r.compat {
		if err := r.readCellCounts(nil); err != nil {
			return nil, err
		}
	}
	for w := range r.cellDirty {
		if r.compat {
			break
		}
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
				if slot >= r.seriesMax || r.stateOfSlot(slot) == nil {
					// The slot's key is not known yet: give the
					// count back for the next window.
					atomic.AddUint64(&r.cells[i], uint64(n))
					r.markCellDirty(uint32(chunk))
					continue
				}
				if r.banks != nil && r.banks.spilled(uint32(i), slot) {
					r.spilled[uint32(i)] = true
				}
				// Cells come in hash order: they are chained per slot
				// in compact arrays here and handed to their series
				// in slot order below, so the scattered accesses hit
				// 4 bytes a slot, not a series' state.
				r.cellBuf = append(r.cellBuf, cellEntry{field: key & (1<<cellFieldBits - 1), cell: uint32(i), next: r.cellHead[slot], n: n})
				r.cellHead[slot] = int32(len(r.cellBuf) - 1)
			}
		}
	}
	for _, st := range r.order {
		if st.dead {
			continue // its slots went back to stateOfSlot
		}
		for _, slot := range st.slots {
			for e := r.cellHead[slot]; e >= 0; e = r.cellBuf[e].next {
				c := &r.cellBuf[e]
				st.acc.hist = append(st.acc.hist, cellCount{c.field, uint64(c.n)})
				r.noteCell(slot, c.cell)
			}
			r.cellHead[slot] = -1
		}
	}
	r.cellBuf = r.cellBuf[:0]
	if r.dead > len(r.order)/2 {
		live := r.order[:0]
		for _, st := range r.order {
			if !st.dead {
				live = append(live, st)
			}
		}
		clear(r.order[len(live):])
		r.order, r.dead = live, 0
	}
	s.Series = make([]snapshot.Series, 0, len(r.order)-r.dead)
	// One backing array for every series' buckets: one allocation, not
	// one per series.
	nb := 0
	for _, st := range r.order {
		nb += len(st.acc.hist)
	}
	buckets := make([]snapshot.Bucket, 0, nb)
	for _, st := range r.order {
		if st.dead {
			continue
		}
		if st.acc.count > 0 || len(st.acc.hist) > 0 {
			st.lastChange = now
		}
		var sr snapshot.Series
		sr, buckets = r.build(st, window, buckets)
		s.Series = append(s.Series, sr)
		h := st.acc.hist[:0]
		st.acc = winAcc{hist: h}
	}
	if len(r.resolved) > 0 {
		s.Series = mergeSeries(s.Series, window, func(sr *snapshot.Series) bool { return r.resolved[sr.Span] > 0 })
	}
	for i := range s.Series {
		s.Stats.Events += s.Series[i].Count
	}
	if err := r.readCounters(&s.Stats); err != nil {
		return nil, err
	}
	s.Stats.ExtremesFromBuckets = r.compat
	if r.globWrote {
		r.bumpBudgetGen()
		r.globWrote = false
	}
	r.reclaimSpilled()
	r.evict(now, idleEvict)
	s.Stats.SeriesLive = uint64(len(r.byKey))
	s.Stats.SeriesCapacity = uint64(r.seriesMax)
	s.Stats.ReadNs = int64(time.Since(start))
	return s, nil
}

func (r *seriesReader) markSlotDirty(slot uint32) {
	if r.compat {
		// A byte a slot (bpf/aggregate.h, compat): set it.
		n := uint32(r.marksPerWord())
		atomic.OrUint64(&r.slotDirty[slot/n], 1<<(8*(slot%n)))
		return
	}
	atomic.OrUint64(&r.slotDirty[slot/64], 1<<(slot%64))
}

// marksPerWord is how many dirty marks one word of a dirty map holds:
// 64 bits, or 8 bytes in the compat core.
func (r *seriesReader) marksPerWord() int {
	if r.compat {
		return 8
	}
	return 64
}

// marks turns a dirty word into a bit per mark: the compat core's bytes
// each become one bit.
func (r *seriesReader) marks(w uint64) uint64 {
	if !r.compat {
		return w
	}
	var b uint64
	for i := 0; i < 8; i++ {
		if w>>(8*i)&0xff != 0 {
			b |= 1 << i
		}
	}
	return b
}

// readCellCounts takes the histogram cells of the compat core: the counts
// of cell_counts that grew since the last read, chained per slot like the
// cell table's (slotCells holds the keys). A count of a slot whose key is
// not known yet stays for the next read. With only, the cells of those
// slots only are taken, each key noted in its slot's slotCells (for
// drain and free); nil takes every slot's.
func (r *seriesReader) readCellCounts(only map[uint32]bool) error {
	m := r.objs.CellCounts
	n := int(min(m.MaxEntries(), 4096))
	if len(r.cellKeys) < n {
		r.cellKeys, r.cellVals = make([]uint32, n), make([]uint64, n)
	}
	var cursor ebpf.MapBatchCursor
	for {
		got, err := m.BatchLookup(&cursor, r.cellKeys, r.cellVals, nil)
		for i := 0; i < got; i++ {
			key, total := r.cellKeys[i], r.cellVals[i]
			slot := key>>cellFieldBits - 1
			if only != nil {
				if only[slot] {
					r.noteCell(slot, key)
				}
				continue
			}
			d := total - r.cellPrev[key]
			if d == 0 {
				continue
			}
			if slot >= r.seriesMax || r.stateOfSlot(slot) == nil {
				continue // its slot is not published yet: next read
			}
			r.cellPrev[key] = total
			r.cellBuf = append(r.cellBuf, cellEntry{field: key & (1<<cellFieldBits - 1), cell: key, next: r.cellHead[slot], n: uint32(d)})
			r.cellHead[slot] = int32(len(r.cellBuf) - 1)
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read histogram cells: %w", err)
		}
	}
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
	if slot >= uint32(len(r.slotState)) {
		r.grow(slot + 1)
	}
	if st := r.slotState[slot]; st != nil {
		return st
	}
	sl := &r.slots[slot]
	if atomic.LoadUint64(&sl.State) != slotLive {
		return nil
	}
	return r.learn(slot, sl.Key)
}

// learn records that slot holds key's series, creating the series' state
// on its first slot.
func (r *seriesReader) learn(slot uint32, key bpf.SpanwatchSeriesKey) *seriesState {
	st := r.byKey[key]
	if st == nil {
		st = &seriesState{key: key, name: r.nameOf(key.NameId)}
		r.byKey[key] = st
		r.order = append(r.order, st)
		r.nameRefs[key.NameId]++
		if r.compat {
			r.globBudget(key.NameId, st.name)
		}
	}
	r.slotState[slot] = st
	for _, s := range st.slots {
		if s == slot {
			return st
		}
	}
	st.slots = append(st.slots, slot)
	return st
}

// readSlot takes a live slot's window counters.
func (r *seriesReader) readSlot(slot uint32) *seriesState {
	st := r.stateOfSlot(slot)
	if st == nil {
		return nil
	}
	r.take(slot, &st.acc)
	return st
}

// take adds a slot's window to acc: the counters' growth since the last
// read, and the extremes, swapped out.
func (r *seriesReader) take(slot uint32, a *winAcc) {
	sl := &r.slots[slot]
	p := &r.slotPrev[slot]
	cur := slotTotals{
		count:  atomic.LoadUint64(&sl.Count),
		errors: atomic.LoadUint64(&sl.Errors),
		sum:    atomic.LoadUint64(&sl.Sum),
		over:   atomic.LoadUint64(&sl.OverBudget),
	}
	a.count += cur.count - p.count
	a.errors += cur.errors - p.errors
	a.sum += cur.sum - p.sum
	a.over += cur.over - p.over
	*p = cur
	if atomic.LoadUint64(&sl.MinInv) != 0 {
		a.minInv = max(a.minInv, atomic.SwapUint64(&sl.MinInv, 0))
	}
	if atomic.LoadUint64(&sl.Max) != 0 {
		a.max = max(a.max, atomic.SwapUint64(&sl.Max, 0))
	}
}

// build turns a series' window into its snapshot form.
func (r *seriesReader) build(st *seriesState, window time.Duration, buf []snapshot.Bucket) (snapshot.Series, []snapshot.Bucket) {
	a := &st.acc
	key := st.key
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
	if key.Tgid != 0 {
		r.splitSeries(&sr, key)
	}
	metric := key.Kind == kindMetric
	if !metric {
		if st.budgetGen != r.budgetGen {
			st.budgetNs, st.budgetGen = r.budgetOf(st.name), r.budgetGen
		}
		sr.BudgetNs = st.budgetNs
	}
	if metric {
		sr.Kind = snapshot.KindMetric
	}
	if a.count == 0 {
		return sr, buf
	}
	sr.SetRates(window)
	start := len(buf)
	buf = histogram(buf, a.hist, metric)
	sr.Histogram = buf[start:len(buf):len(buf)]
	if r.compat {
		return r.buildFromBuckets(sr, a), buf
	}
	if metric {
		sr.Sum = int64(a.sum)
		if a.minInv != 0 {
			sr.Min = int64(^a.minInv ^ 1<<63)
		}
		if a.max != 0 {
			sr.Max = int64(a.max ^ 1<<63)
		}
	} else {
		sr.SumNs = a.sum
		if a.minInv != 0 {
			sr.MinNs = ^a.minInv
		}
		sr.MaxNs = a.max
	}
	sr.SetHistogramQuantiles()
	return sr, buf
}

// splitSeries names the series of a process in a split cgroup (see
// split.go) after its process, and notes its cgroup and tgid.
func (r *seriesReader) splitSeries(sr *snapshot.Series, key bpf.SpanwatchSeriesKey) {
	if r.splitCgroups == nil {
		r.splitCgroups, r.liveTgids = map[uint64]bool{}, map[uint32]bool{}
	}
	r.splitCgroups[key.CgroupId] = true
	r.liveTgids[key.Tgid] = true
	if r.process != nil {
		sr.Process, sr.Service = r.process(key.Tgid)
	}
}

// buildFromBuckets fills a compat core series' extremes and quantiles:
// the kernel keeps no min and max there (no compare-and-swap before
// 5.12), so they are the bounds of the lowest and highest buckets, and
// the sum itself for a window of one value; quantiles are the buckets'
// midpoints, not clamped to those bounds.
func (r *seriesReader) buildFromBuckets(sr snapshot.Series, a *winAcc) snapshot.Series {
	h := sr.Histogram
	metric := sr.Kind == snapshot.KindMetric
	var mn, mx int64 // metric extremes
	var mnNs, mxNs uint64
	switch {
	case a.count == 1:
		mn, mx, mnNs, mxNs = int64(a.sum), int64(a.sum), a.sum, a.sum
	case len(h) > 0:
		lo, hi := h[0], h[len(h)-1]
		mnNs, mxNs = lo.Low, max(hi.High, 1)-1
		if hi.Zero {
			mxNs = 0
		}
		mxNs = min(mxNs, a.sum) // durations: no span is longer than all of them
		mn, mx = bucketLow(lo), bucketHigh(hi)
	}
	if metric {
		sr.Sum, sr.Min, sr.Max = int64(a.sum), mn, mx
	} else {
		sr.SumNs, sr.MinNs, sr.MaxNs = a.sum, mnNs, mxNs
	}
	sr.SetQuantiles(snapshot.HistogramQuantiles(h, 1, 0)) // the midpoints, not clamped
	return sr
}

// bucketLow and bucketHigh are the least and greatest metric values a
// bucket holds.
func bucketLow(b snapshot.Bucket) int64 {
	switch {
	case b.Zero:
		return 0
	case b.Negative:
		return -int64(max(b.High, 1) - 1)
	}
	return int64(b.Low)
}

func bucketHigh(b snapshot.Bucket) int64 {
	switch {
	case b.Zero:
		return 0
	case b.Negative:
		return -int64(b.Low)
	}
	return int64(max(b.High, 1) - 1)
}

// histogram appends to out the sorted buckets of cell fields and counts
// (a field may come from two cells: their counts add up).
func histogram(out []snapshot.Bucket, h []cellCount, metric bool) []snapshot.Bucket {
	if len(h) == 0 {
		return out
	}
	if len(h) > 1 {
		slices.SortFunc(h, func(a, b cellCount) int { return cmp.Compare(a.field, b.field) })
	}
	first := len(out)
	for i := 0; i < len(h); i++ {
		f, n := h[i].field, h[i].n
		for i+1 < len(h) && h[i+1].field == f {
			i++
			n += h[i].n
		}
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
	if metric {
		snapshot.SortBuckets(out[first:]) // negative buckets run downwards
	}
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
		case ls.String != nil && ls.stringOf(i, vals[i], out, name):
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
	st.ExtremesDropped = d(bpf.SpanwatchCounterCOUNTER_MINMAX_RETRIES)
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
