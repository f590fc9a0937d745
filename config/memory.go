package config

import (
	"errors"
	"strings"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/memory"
)

// BinaryBytes is what the agent's executable takes resident: its code
// and data once paged in (about 20 MiB measured, with margin).
const BinaryBytes = 24 << 20

// errKernelEstimate marks a failure to estimate the maps' memory.
var errKernelEstimate = errors.New("estimate the BPF maps' memory")

// planMemory finds the memory budget and divides it (internal/memory):
// the series capacity and histogram cells, the range history's bound,
// the overrun queues, Go's soft limit. A setting the budget cannot hold
// is reported where it was set: the file's key or the flag.
func planMemory(d *section.Decoder, cfg *Config, file decoded[CollectorSettings], opts LoadOptions) {
	s := cfg.Collector
	where := func(key string, format string, a ...any) {
		if flag := opts.Flags[key]; flag != "" {
			d.Flag(flag+": "+format, a...)
			return
		}
		if n := file.at[key]; n != nil {
			d.Errorf(n, "collector."+key+": "+format, a...)
			return
		}
		d.Flag("memory budget: "+format, a...)
	}
	b, err := memory.Detect(opts.MemoryEnv, s.MemoryBudget)
	if err != nil {
		where("memory_budget", "%v", err)
		return
	}
	in := memory.Inputs{
		MaxSeries: s.MaxSeries, HistogramCells: s.HistogramCells, OverrunQueue: s.OverrunQueue,
		Interval: s.Interval, KernelBytes: mapEstimate(s),
		// The binary's resident code and data: the size the Go runtime
		// and this module's code take once paged in, measured at idle
		// (BENCHMARKS.md, "Memory budget").
		Binary: BinaryBytes,
	}
	if cfg.Rules != nil {
		in.LongestRange = cfg.Rules.LongestRange()
	}
	p, err := memory.NewPlan(b, in)
	if err != nil {
		key := "memory_budget"
		switch {
		case s.MaxSeries != 0 && strings.Contains(err.Error(), "max_series"):
			key = "max_series"
		case errors.Is(err, errKernelEstimate):
			key = "histogram_cells"
		}
		where(key, "%v", err)
		return
	}
	cfg.Memory = p
}
