package memory

import (
	"fmt"
	"math/bits"
	"time"
)

// What the agent's parts cost in Go memory, measured at full capacity
// (BENCHMARKS.md, "Memory budget": bench/memory/run.sh and
// BenchmarkSeriesMemory in agent). The plan keeps their sum under half of
// Go's soft limit, so that the collector has room to run without
// collecting back to back.
const (
	// IdleBytes is an agent's Go memory with no series: the runtime, the
	// code's own tables, the cgroup names, the registry (10.5 MiB
	// measured idle).
	IdleBytes = 12 << 20
	// SeriesBytes is the Go memory one live series costs, every part
	// counted once: the collector's reader, the newest snapshot and the
	// one /snapshot serves, the exporter's two views. Heap profiles at
	// 131,072 series of 8-bucket windows give 2.3 KiB of live objects;
	// the Governor's measure of Go's memory (which counts the heap's
	// fragmentation, stacks and the runtime's own) gave 4.1 KiB: the
	// plan uses what the Governor sees.
	SeriesBytes = 4 << 10
	// WindowBytes is one window of range history of one series with
	// spans in it: counts, extremes and a packed histogram (120 bytes
	// measured).
	WindowBytes = 128
	// OverrunBytes is one symbolized overrun record kept until the next
	// snapshot (two stacks of up to 127 frames, named).
	OverrunBytes = 12 << 10
	// QueuedOverrunBytes is one raw overrun record waiting for the worker.
	QueuedOverrunBytes = 1800
	// OutputBytes is --output's line and its scratch, and a scrape's
	// buffers (the span families are written from a view, in place).
	OutputBytes = 4 << 20
	// CellsPerSeries is the default histogram cells per series, as the
	// collector's defaults have it (2^24 cells for 2^17 series).
	CellsPerSeries = 128
	// MaxSeries is the most series a budget sizes by default (the
	// collector's default capacity); a setting may ask for more.
	MaxSeries = 131072
	// MinSeries is the least series capacity.
	MinSeries = 64
)

// Shares of Go's soft limit.
const (
	// LiveShare is the part of Go's soft limit the live data may take at
	// full capacity: the rest is the collector's room.
	LiveShare = 0.5
	// HistoryShare is the part of the live share the range history may
	// take; past it, it keeps fewer windows (HistoryDepth).
	HistoryShare = 0.25
	// OverrunShare and QueueShare bound the overruns kept per snapshot
	// and queued for the worker.
	OverrunShare = 0.03
	QueueShare   = 0.01
	// SymbolShare bounds the symbolizer's caches.
	SymbolShare = 0.06
)

// Inputs are what a plan is made from besides the budget.
type Inputs struct {
	// MaxSeries and HistogramCells are the settings (0: the plan chooses).
	MaxSeries, HistogramCells uint32
	// OverrunQueue is the setting (0: the plan chooses).
	OverrunQueue int
	// Interval and LongestRange give the windows of range history a
	// series keeps: LongestRange/Interval + 2.
	Interval, LongestRange time.Duration
	// KernelBytes estimates the BPF maps' memory for a series capacity
	// and histogram cells (collector.EstimateMapBytes); nil counts none
	// (a system without BPF, where only the file is checked).
	KernelBytes func(series, cells uint32) (uint64, error)
	// Binary is the executable's resident size.
	Binary uint64
}

// A Plan divides a budget between the agent's parts.
type Plan struct {
	Budget Budget
	// MaxSeries and HistogramCells size the kernel's maps: the settings,
	// checked, or the most that fit.
	MaxSeries, HistogramCells uint32
	// KernelBytes is the BPF maps' memory at those sizes, estimated.
	KernelBytes uint64
	// GoLimit is Go's soft memory limit (debug.SetMemoryLimit): the
	// budget less the maps and the binary.
	GoLimit uint64
	// LiveBytes is the Go memory the plan expects at full capacity.
	LiveBytes uint64
	// HistoryBytes bounds the range history.
	HistoryBytes uint64
	// Windows is the range history's windows per series the rules ask.
	Windows int
	// MaxOverrunsPerSnapshot and OverrunQueue bound the overrun records
	// kept for a snapshot and queued for the worker.
	MaxOverrunsPerSnapshot, OverrunQueue int
	// SymbolCacheBytes bounds the symbolizer's tables and caches
	// (collector.Config.SymbolMemory, symbolize.Limits.Memory).
	SymbolCacheBytes uint64
}

// NewPlan divides the budget: the series capacity (the settings when
// given, checked against the budget, else the most that fit, up to
// MaxSeries), the range history's bound, the overrun queues and Go's soft
// limit. An explicit setting that does not fit is an error that says how
// much it needs and what fits.
func NewPlan(b Budget, in Inputs) (Plan, error) {
	p := Plan{Budget: b}
	if in.Interval > 0 && in.LongestRange > 0 {
		p.Windows = int(in.LongestRange/in.Interval) + 2
	}
	try := func(series, cells uint32) (Plan, bool, error) {
		q := p
		q.MaxSeries, q.HistogramCells = series, cells
		if q.HistogramCells == 0 {
			q.HistogramCells = cellsFor(series)
		}
		var k uint64
		if in.KernelBytes != nil {
			var err error
			if k, err = in.KernelBytes(q.MaxSeries, q.HistogramCells); err != nil {
				return q, false, err
			}
		}
		q.KernelBytes = k
		if k+in.Binary >= b.Bytes {
			return q, false, nil
		}
		q.GoLimit = b.Bytes - k - in.Binary
		live := float64(q.GoLimit) * LiveShare
		q.HistoryBytes = uint64(live * HistoryShare)
		q.MaxOverrunsPerSnapshot = clamp(int(float64(q.GoLimit)*OverrunShare/OverrunBytes), 10, 1000)
		q.OverrunQueue = in.OverrunQueue
		if q.OverrunQueue == 0 {
			q.OverrunQueue = clamp(int(float64(q.GoLimit)*QueueShare/QueuedOverrunBytes), 16, 1024)
		}
		q.SymbolCacheBytes = uint64(float64(q.GoLimit) * SymbolShare)
		fixed := uint64(IdleBytes+OutputBytes) + uint64(q.MaxOverrunsPerSnapshot)*OverrunBytes +
			uint64(q.OverrunQueue)*QueuedOverrunBytes + q.SymbolCacheBytes
		hist := min(uint64(series)*uint64(p.Windows)*WindowBytes, q.HistoryBytes)
		q.LiveBytes = fixed + uint64(series)*SeriesBytes + hist
		return q, float64(q.LiveBytes) <= live, nil
	}
	if in.MaxSeries != 0 {
		q, ok, err := try(in.MaxSeries, in.HistogramCells)
		if err != nil {
			return q, err
		}
		if !ok {
			most, _ := fit(try, in.HistogramCells)
			return q, fmt.Errorf("max_series %d needs about %s (kernel maps %s, the agent's own %s at full capacity, twice that under Go's soft limit), more than the memory budget, %s (%s): raise memory_budget or lower max_series (%s)",
				in.MaxSeries, FormatBytes(q.KernelBytes+in.Binary+uint64(float64(q.LiveBytes)/LiveShare)), FormatBytes(q.KernelBytes), FormatBytes(q.LiveBytes), FormatBytes(b.Bytes), b.Detail, most)
		}
		return q, nil
	}
	q, err := fit(try, in.HistogramCells)
	if err != nil {
		return q, err
	}
	return q, nil
}

// fit finds the largest series capacity that fits, by bisection (the
// memory a capacity needs grows with it).
func fit(try func(series, cells uint32) (Plan, bool, error), cells uint32) (Plan, error) {
	lo, hi := uint32(MinSeries), uint32(MaxSeries)
	best, ok, err := try(lo, cells)
	if err != nil {
		return best, err
	}
	if !ok {
		return best, fmt.Errorf("the memory budget, %s (%s), is too small for even %d series: the BPF maps take %s; raise memory_budget",
			FormatBytes(best.Budget.Bytes), best.Budget.Detail, MinSeries, FormatBytes(best.KernelBytes))
	}
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		q, ok, err := try(mid, cells)
		if err != nil {
			return best, err
		}
		if ok {
			lo, best = mid, q
		} else {
			hi = mid - 1
		}
	}
	return best, nil
}

// String says what fits, for an error message.
func (p Plan) String() string {
	return fmt.Sprintf("at most %d series fit", p.MaxSeries)
}

// cellsFor is the default histogram cells for a series capacity: the
// collector's ratio, a power of two, at least 512.
func cellsFor(series uint32) uint32 {
	n := uint64(series) * CellsPerSeries
	n = max(n, 512)
	n = uint64(1) << bits.Len64(n-1)
	return uint32(min(n, 1<<28))
}

func clamp(v, lo, hi int) int { return max(lo, min(v, hi)) }
