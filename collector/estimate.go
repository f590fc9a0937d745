//go:build linux

package collector

import (
	"fmt"
	"math/bits"
	"os"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/kernel"
)

// EstimateMapBytes estimates the memory the kernel charges for the maps of
// a collector with cfg's sizes (zero sizes: the defaults), before anything
// is loaded: the aggregation core's maps sized as New sizes them, and the
// in-flight sampler's, for the objects New loads on this kernel (cfg.Core,
// or the probes' choice: the compat objects have no sampler). The agent's memory budget plans the series capacity
// with it. It follows the kernel's own accounting (bpf_map_memory_usage,
// 6.x) per map type; TestEstimateMapBytes holds it within 5% of what the
// kernel reports for a loaded collector.
//
// New sizes the maps with the same function (mapSizes).
func EstimateMapBytes(cfg Config) (uint64, error) {
	if err := cfg.sizes(); err != nil {
		return 0, err
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		cpus = 1
	}
	core := cfg.Core
	if core == "" {
		// The objects New would load here (kernel.Probe runs once per
		// process: New reuses its answers).
		if core, err = kernel.Probe().ChooseCore(); err != nil {
			return 0, err
		}
	}
	// The in-flight sampler's object shares the core's maps and some of
	// its own with the main object (loaded beside it): each name once.
	// The compat objects have no sampler.
	loads := []func() (*ebpf.CollectionSpec, error){bpf.LoadSpanwatch, bpf.LoadInflight}
	if core == kernel.CoreCompat {
		loads = []func() (*ebpf.CollectionSpec, error){bpf.LoadSpanwatchCompat}
	}
	var total uint64
	seen := map[string]bool{}
	sizes := cfg.mapSizes(core)
	for _, load := range loads {
		spec, err := load()
		if err != nil {
			return 0, fmt.Errorf("estimate map memory: %w", err)
		}
		for name, ms := range spec.Maps {
			if seen[name] && !strings.HasPrefix(name, ".") {
				continue
			}
			seen[name] = true
			entries := ms.MaxEntries
			if n, ok := sizes[name]; ok {
				entries = n
			}
			total += mapBytes(ms, entries, cpus)
		}
	}
	return total, nil
}

// mapSizes are the max_entries New gives the maps of core's objects for
// cfg's sizes (the others keep their declared size): loadCore sizes the
// maps with it, EstimateMapBytes counts them with it.
func (cfg *Config) mapSizes(core kernel.Core) map[string]uint32 {
	chunks := cfg.HistogramCells / uint32(cellsPerChunk)
	m := map[string]uint32{
		"series": cfg.MaxSeries, "series_index": cfg.MaxSeries, "free_slots": cfg.MaxSeries,
		// A name per series at most, and the "(other)" series' name.
		"names":        cfg.MaxSeries + 1,
		"series_dirty": (cfg.MaxSeries + 63) / 64,
		"cells":        chunks,
		"cell_dirty":   (chunks + 63) / 64,
	}
	if core == kernel.CoreCompat {
		// A byte a slot for dirty marks, the histogram in cell_counts
		// (no cell table), no in-flight state (no sampler), and an
		// exact budget for each name a glob matches in each of the two
		// sets (the one in force and the one a change writes: both
		// full while a change is prepared).
		m["series_dirty"] = (cfg.MaxSeries + 7) / 8
		m["cells"] = 1
		m["cell_dirty"] = 1
		m["cell_counts"] = compatCells(*cfg)
		m["budgets"] = uint32(budgetSets) * (uint32(MaxExactBudgets) + cfg.MaxSeries + 1)
		m["inflight_exec"] = 64
		m["inflight_gprocs"] = 64
	}
	if cfg.RingbufBytes != 0 {
		m[mapOverruns] = cfg.RingbufBytes
	}
	return m
}

// compatCells sizes the compat core's histogram cells: a preallocated
// hash, about 80 bytes an entry, so fewer than the cell table's by
// default (DefaultCompatHistogramCells), and at most
// MaxCompatHistogramCells.
func compatCells(cfg Config) uint32 {
	if !cfg.histogramCellsSet {
		return DefaultCompatHistogramCells
	}
	return min(cfg.HistogramCells, MaxCompatHistogramCells)
}

// mapBytes is the kernel's memory for one map of this type and size:
// its elements as the kernel lays them out (8-byte aligned values, hash
// elements with their 48-byte header and one spare element per CPU,
// power-of-two bucket arrays) plus the map's own structure.
func mapBytes(ms *ebpf.MapSpec, entries uint32, cpus int) uint64 {
	n := uint64(entries)
	val := uint64(ms.ValueSize+7) &^ 7
	key := uint64(ms.KeySize+7) &^ 7
	page := uint64(os.Getpagesize())
	switch ms.Type {
	case ebpf.Array:
		if ms.Flags&0x400 != 0 { // BPF_F_MMAPABLE: page-aligned
			return (n*val+page-1)&^(page-1) + page
		}
		return n*val + 328
	case ebpf.PerCPUArray:
		return n*val*uint64(cpus) + 328
	case ebpf.Hash, ebpf.LRUHash, ebpf.PerCPUHash, ebpf.LRUCPUHash:
		buckets := uint64(1) << bits.Len64(max(n, 1)-1)
		elems := n
		elem := 48 + key + val
		switch ms.Type {
		case ebpf.Hash:
			elems += uint64(cpus) // the per-CPU extra elements of a preallocated hash
		case ebpf.PerCPUHash, ebpf.LRUCPUHash:
			elem = 48 + key + 8
			return buckets*16 + elems*elem + elems*val*uint64(cpus) + 1000
		}
		return buckets*16 + elems*elem + 1000
	case ebpf.Queue, ebpf.Stack:
		return (n+1)*uint64(ms.ValueSize) + 312
	case ebpf.RingBuf:
		// The data pages, mapped twice but charged once, and the array
		// of their page pointers.
		return n + n/page*8 + 2*page + 4096
	}
	return n*(key+val) + 1000
}
