package config

import (
	"fmt"
	"os"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/memory"
)

// Defaults and bounds of the collector: section that are not the
// collector's own (those are in package collector: collector.MinMaxSeries
// and the others, which New checks with the same functions).
const (
	DefaultInterval = 10 * time.Second
	// MinInterval bounds how often the kernel's maps are read: every
	// snapshot swaps the changed series and histogram cells to zero, and
	// the compat objects' (5.10 to 5.16) read the whole cell map.
	MinInterval = 100 * time.Millisecond
	// MaxMemoryBudget bounds memory_budget.
	MaxMemoryBudget = 1 << 40
)

// CollectorSettings are the collector: section of the configuration file,
// and the command-line flags that override it. Each field is one row of
// collectorSettings below, which says everything else about it.
type CollectorSettings struct {
	// Interval is how often a snapshot is taken and evaluated.
	Interval time.Duration
	// Sources are the span sources to attach: "user_events", "marker";
	// none means both.
	Sources []string
	// Binaries are uprobed for the span SDK's marker besides those the
	// /proc scan finds.
	Binaries []string
	// MaxSeries is the number of series the kernel holds (0: the memory
	// plan's, at most collector.DefaultMaxSeries).
	MaxSeries uint32
	// HistogramCells is the number of histogram cells the kernel holds (0:
	// the memory plan's).
	HistogramCells uint32
	// SeriesQuota is how many series one workload (pod, container,
	// systemd unit, delegated cgroup) may hold (0: the
	// collector's default).
	SeriesQuota uint32
	// RingbufBytes sizes the overrun ring buffer (0: the collector's
	// default); a power of two, a multiple of the page size.
	RingbufBytes uint32
	// OverrunQueue is how many overrun records wait between the ring
	// buffer's reader and the worker that names their stacks and
	// delivers them (0: the memory plan's); past it they are dropped and
	// counted (spanwatch_overruns_queue_dropped_total).
	OverrunQueue int
	// ForceKprobe attaches user_events with a kprobe instead of fentry.
	ForceKprobe bool
	// NoUprobeMulti attaches uprobes through the perf_uprobe PMU.
	NoUprobeMulti bool
	// ScanInterval is how often /proc is scanned for binaries with the
	// marker and for the processes of function sources' process: globs
	// (0: the collector's default; negative: never).
	ScanInterval time.Duration
	// MemoryBudget is the memory the whole agent may use, in bytes (0:
	// from the cgroup's memory limit, else a default; see
	// internal/memory). The series capacity, the range history, the
	// overrun queues and Go's soft limit are sized from it, and detail is
	// shed when the agent nears it.
	MemoryBudget uint64
}

// spanSources are the span sources collector.sources names.
var spanSources = []string{"user_events", "marker"}

// collectorSettings are the rows of the collector: section, in the order
// the file's documentation and messages list them. Only interval is live:
// the others shape the BPF objects or what is attached, and wait for a
// restart.
var collectorSettings = &settings[CollectorSettings]{section: "collector", rows: []*setting[CollectorSettings]{
	{key: "interval", flag: "interval", kind: kindDuration, min: int64(MinInterval), check: checkInterval, live: true,
		def: DefaultInterval.String(), doc: "how often a snapshot is taken and evaluated",
		field: func(s *CollectorSettings) any { return &s.Interval }},
	{key: "sources", flag: "source", kind: kindList, words: spanSources, unique: true, checkItem: checkSource,
		emptyHint: "leave sources out to attach both user_events and marker",
		def:       "both", doc: "the span sources to attach (USDT probes are declared under the top-level sources: usdt:)",
		field: func(s *CollectorSettings) any { return &s.Sources }},
	{key: "binaries", flag: "binary", kind: kindList, checkItem: checkBinary, accumulate: true,
		def: "none", doc: "binaries to uprobe for the span SDK's marker besides those the /proc scan finds; each must exist (the command line's add to the file's)",
		field: func(s *CollectorSettings) any { return &s.Binaries }},
	{key: "max_series", flag: "max-series", kind: kindInt, min: collector.MinMaxSeries, max: int64(collector.MaxSeriesLimit), check: collector.CheckMaxSeries,
		def: fmt.Sprintf("the most the memory budget holds, up to %d", collector.DefaultMaxSeries), doc: "series (span, cgroup, labels) the kernel holds; checked against the memory budget",
		field: func(s *CollectorSettings) any { return &s.MaxSeries }},
	{key: "histogram_cells", kind: kindInt, min: collector.MinHistogramCells, max: collector.MaxHistogramCells, check: collector.CheckHistogramCells,
		def: "128 per series", doc: "histogram cells the kernel holds, rounded up to a power of two; checked against the memory budget",
		field: func(s *CollectorSettings) any { return &s.HistogramCells }},
	{key: "series_quota", kind: kindInt, min: 1, max: int64(collector.MaxSeriesLimit), check: collector.CheckSeriesQuota,
		def: fmt.Sprint(collector.DefaultSeriesQuota), doc: "series one workload (a pod, a container, a systemd unit, a delegated cgroup and every cgroup below it) may hold; the rest go to its (other) series",
		field: func(s *CollectorSettings) any { return &s.SeriesQuota }},
	{key: "ringbuf_bytes", kind: kindInt, min: int64(os.Getpagesize()), max: collector.MaxRingbufBytes, check: collector.CheckRingbufBytes,
		def: memory.FormatBytes(uint64(collector.DefaultRingbufBytes())), doc: "the overrun ring buffer's size: a power of two, a multiple of the page size",
		field: func(s *CollectorSettings) any { return &s.RingbufBytes }},
	{key: "overrun_queue", kind: kindInt, min: 1, max: collector.MaxOverrunQueue, check: collector.CheckOverrunQueue,
		def: fmt.Sprint(collector.DefaultOverrunQueue), doc: "overrun records waiting between the ring buffer's reader and the worker that names their stacks and delivers them; past it they are dropped and counted (spanwatch_overruns_queue_dropped_total)",
		field: func(s *CollectorSettings) any { return &s.OverrunQueue }},
	{key: "force_kprobe", flag: "force-kprobe", kind: kindBool,
		def: "false", doc: "attach the user_events source with a kprobe instead of fentry",
		field: func(s *CollectorSettings) any { return &s.ForceKprobe }},
	{key: "no_uprobe_multi", flag: "no-uprobe-multi", kind: kindBool,
		def: "false", doc: "attach uprobes through perf_event_open (needs CAP_SYS_ADMIN), as before kernel 6.6, instead of uprobe_multi links",
		field: func(s *CollectorSettings) any { return &s.NoUprobeMulti }},
	{key: "scan_interval", kind: kindDurationOff, check: checkScanInterval,
		def: collector.DefaultScanInterval.String(), doc: "how often /proc is scanned for binaries with the marker and for processes that function sources' process: globs match; negative: never (process: then finds only the processes running when the agent starts)",
		field: func(s *CollectorSettings) any { return &s.ScanInterval }},
	{key: "memory_budget", flag: "memory-budget", kind: kindSize, min: memory.MinBudget, max: MaxMemoryBudget, check: checkMemoryBudget,
		def:   fmt.Sprintf("%d%% of the cgroup's memory limit, else a quarter of the machine's memory, at most %s", memory.CgroupShare, memory.FormatBytes(memory.MaxDefaultBudget)),
		doc:   "the memory the whole agent may use; the series capacity, range history, overrun queues and Go's soft limit are sized from it, and near it detail is shed in a fixed order (docs/memory.md)",
		field: func(s *CollectorSettings) any { return &s.MemoryBudget }},
}}

func checkInterval(ns int64) error {
	switch d := time.Duration(ns); {
	case d <= 0:
		return fmt.Errorf("must be positive, not %s", d)
	case d < MinInterval:
		return fmt.Errorf("%s is too short: at least %s (each snapshot reads every series)", d, MinInterval)
	}
	return nil
}

func checkScanInterval(ns int64) error {
	if d := time.Duration(ns); d > 0 && d < MinInterval {
		return fmt.Errorf("%s is too short: at least %s, or negative to turn the /proc scan off", d, MinInterval)
	}
	return nil
}

func checkSource(s string) error {
	for _, w := range spanSources {
		if s == w {
			return nil
		}
	}
	return fmt.Errorf("unknown source %q: want %s (USDT probes are declared under the top-level sources: usdt:)", s, orList(spanSources))
}

// checkBinary refuses a binary the marker source could not open: the
// collector stats and opens each one when it starts.
func checkBinary(path string) error {
	if path == "" {
		return fmt.Errorf("empty path")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	return nil
}

// checkMemoryBudget bounds memory_budget: at least what the agent runs
// in, at most MaxMemoryBudget.
func checkMemoryBudget(n int64) error {
	switch {
	case n < memory.MinBudget:
		return fmt.Errorf("%s is less than the agent runs in, %s (leave it out to take %d%% of the cgroup's memory limit)", memory.FormatBytes(uint64(n)), memory.FormatBytes(memory.MinBudget), memory.CgroupShare)
	case n > MaxMemoryBudget:
		return fmt.Errorf("%s is more than %s", memory.FormatBytes(uint64(n)), memory.FormatBytes(MaxMemoryBudget))
	}
	return nil
}
