//go:build linux

package collector

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/internal/memory"
)

// EstimateMapBytes estimates the memory the kernel charges for the maps of
// a collector with cfg's sizes (zero sizes: the defaults) when they are
// full, before anything is loaded: the aggregation core's maps sized as New
// sizes them, and the in-flight sampler's, for the objects New loads on
// this kernel (cfg.Core, or the probes' choice: the compat objects have no
// sampler). The agent's memory budget plans the series capacity with it.
// It follows the kernel's own accounting (map_mem_usage, 6.4+) per map
// type (memory.MapShape); TestEstimateMapBytes holds it within 5% of what
// the kernel reports for a loaded collector.
//
// New sizes the maps with the same functions (mapSizes, mapFlags).
func EstimateMapBytes(cfg Config) (uint64, error) {
	most, _, err := estimateMaps(cfg, kernel.Probe().Release)
	return most, err
}

// EstimateIdleMapBytes estimates the same maps' memory with no series:
// the full objects' histogram cells as the first bank (banks.go), and
// where the hashes keyed by series grow as series appear (GrowsWithUse),
// their bucket arrays only; elsewhere the same as EstimateMapBytes.
func EstimateIdleMapBytes(cfg Config) (uint64, error) {
	_, idle, err := estimateMaps(cfg, kernel.Probe().Release)
	return idle, err
}

func estimateMaps(cfg Config, release string) (most, idle uint64, err error) {
	if err := cfg.sizes(); err != nil {
		return 0, 0, err
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
			return 0, 0, err
		}
	}
	// The in-flight sampler's object shares the core's maps and some of
	// its own with the main object (loaded beside it): each name once.
	// The compat objects have no sampler.
	loads := []func() (*ebpf.CollectionSpec, error){bpf.LoadSpanwatch, bpf.LoadInflight}
	if core == kernel.CoreCompat {
		loads = []func() (*ebpf.CollectionSpec, error){bpf.LoadSpanwatchCompat}
	}
	seen := map[string]bool{}
	sizes := cfg.mapSizes(core)
	flags := cfg.mapFlags(core, release)
	for _, load := range loads {
		spec, err := load()
		if err != nil {
			return 0, 0, fmt.Errorf("estimate map memory: %w", err)
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
			m, i := memory.MapShape{Type: uint32(ms.Type), KeySize: ms.KeySize, ValueSize: ms.ValueSize,
				MaxEntries: entries, Flags: ms.Flags | flags[name]}.Bytes(cpus)
			most += m
			idle += i
			if name == mapCellBanks && core != kernel.CoreCompat {
				// The banks: every one when full, those New makes
				// first when idle (bankPlan.ahead).
				bs := cfg.cellBanks()
				spec := bs.bankSpec()
				one, _ := memory.MapShape{Type: uint32(spec.Type), KeySize: spec.KeySize, ValueSize: spec.ValueSize,
					MaxEntries: spec.MaxEntries, Flags: spec.Flags}.Bytes(cpus)
				most += uint64(bs.banks) * one
				idle += uint64(bs.ahead(0)) * one
			}
		}
	}
	return most, idle, nil
}

// GrowsWithUse reports whether the core's hashes keyed by series (and the
// other hashes that fill as workloads and names appear: growingMaps) are
// created with BPF_F_NO_PREALLOC on a kernel of this release with this
// core, so that the kernel allocates, and charges, their elements as they
// are inserted instead of all of them at creation. The full objects only,
// and from Linux 6.1: since 6.1 elements are allocated from bpf_mem_alloc's
// per-CPU caches, which the verifier lets every program type use. Before
// it (the compat objects' 5.10 to 5.16, and the full ones' 5.17 to 6.0)
// the verifier refuses such a map in perf_event programs (the in-flight
// sampler's) and on PREEMPT_RT, and in kprobe and uprobe programs accepts
// it with a warning that kmalloc there may deadlock: those keep their
// maps preallocated. Nor on a PREEMPT_RT kernel (the running one, by its
// uname -v): there bpf_mem_alloc refills its per-CPU free lists from an
// irq_work that runs in a thread, and a burst of inserts finds them empty
// (Debian's 6.12-rt under TCG: 7,996 of 8,000 new series lost, counted as
// series_full), so its maps stay preallocated too.
func GrowsWithUse(core kernel.Core, release string) bool {
	v, err := kernel.ParseVersion(release)
	return err == nil && core != kernel.CoreCompat && !v.Less(runtimeAllocSince) && !kernel.PreemptRT()
}

// runtimeAllocSince is the release that brought bpf_mem_alloc.
var runtimeAllocSince = kernel.Version{6, 1, 0}

// growingMaps are the hashes that fill as series, names and workloads
// appear: the series index, the span names, the per-workload counts and
// quotas, the cgroups kept per process, the exact budgets. The other maps are arrays (the series and the
// histogram cells, read in place through mmap), LRU hashes (which the
// kernel always preallocates), queues or ring buffers, or small.
var growingMaps = []string{"series_index", "names", "cg_created", "cg_released", "cg_workload", "cg_quota", "cg_split", "split_comms", "budgets"}

// mapFlags are the flags New adds to the maps of core's objects on a
// kernel of this release (GrowsWithUse).
func (cfg *Config) mapFlags(core kernel.Core, release string) map[string]uint32 {
	m := map[string]uint32{}
	if GrowsWithUse(core, release) && !cfg.preallocate {
		for _, name := range growingMaps {
			m[name] = memory.FlagNoPrealloc
		}
	}
	return m
}

// mapSizes are the max_entries New gives the maps of core's objects for
// cfg's sizes (the others keep their declared size): loadCore sizes the
// maps with it, EstimateMapBytes counts them with it.
func (cfg *Config) mapSizes(core kernel.Core) map[string]uint32 {
	banks := cfg.cellBanks()
	m := map[string]uint32{
		"series": cfg.MaxSeries, "series_index": cfg.MaxSeries, "free_slots": cfg.MaxSeries,
		// A name per series at most, and the "(other)" series' name.
		"names":        cfg.MaxSeries + 1,
		"series_dirty": (cfg.MaxSeries + 63) / 64,
		"cell_banks":   banks.banks,
		"cell_dirty":   (banks.banks*banks.chunks + 63) / 64,
	}
	if core == kernel.CoreCompat {
		// A byte a slot for dirty marks, the histogram in cell_counts
		// (no cell table), no in-flight state (no sampler), and an
		// exact budget for each name a glob matches in each of the two
		// sets (the one in force and the one a change writes: both
		// full while a change is prepared).
		m["series_dirty"] = (cfg.MaxSeries + 7) / 8
		m["cell_banks"] = 1
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
