package agent

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/collector"
	durationpkg "github.com/spanwatch/spanwatch/internal/duration"
	"github.com/spanwatch/spanwatch/internal/memory"
	"github.com/spanwatch/spanwatch/internal/rotate"
)

// Defaults of the collector: section.
const (
	DefaultInterval = 10 * time.Second
	// MinInterval bounds how often the kernel's maps are read: every
	// snapshot reads the whole stats map, on every CPU.
	MinInterval = 100 * time.Millisecond
	// The limits of max_series, histogram_cells, ringbuf_bytes and
	// overrun_queue are the collector's (collector.CheckMaxSeries and the
	// others): the collector checks the same values with the same
	// functions when it starts.
)

// CollectorSettings are the collector: section of the configuration file,
// and the command-line flags that override it.
type CollectorSettings struct {
	// Interval is how often a snapshot is taken and evaluated.
	Interval time.Duration
	// Sources are the span sources to attach: "user_events", "marker";
	// none means both.
	Sources []string
	// Binaries are uprobed for the span SDK's marker besides those the
	// /proc scan finds.
	Binaries []string
	// MaxSeries is the number of series the kernel holds (0: the
	// collector's default, collector.DefaultMaxSeries).
	MaxSeries uint32
	// HistogramCells is the number of histogram cells the kernel holds (0:
	// the collector's default).
	HistogramCells uint32
	// SeriesQuota is how many series one workload (pod, container,
	// systemd unit, delegated cgroup) may hold (0: the collector's
	// default).
	SeriesQuota uint32
	// RingbufBytes sizes the overrun ring buffer (0: the collector's
	// default); a power of two, a multiple of the page size.
	RingbufBytes uint32
	// OverrunQueue is how many overrun records wait between the ring
	// buffer's reader and the worker that names their stacks and
	// delivers them (0: the collector's default); past it they are
	// dropped and counted (spanwatch_overruns_queue_dropped_total).
	OverrunQueue int
	// ForceKprobe attaches user_events with a kprobe instead of fentry.
	ForceKprobe bool
	// NoUprobeMulti attaches uprobes through the perf_uprobe PMU.
	NoUprobeMulti bool
	// ScanInterval is how often /proc is scanned for binaries with the
	// marker (0: the collector's default; negative: never).
	ScanInterval time.Duration
	// MemoryBudget is the memory the whole agent may use, in bytes (0:
	// from the cgroup's memory limit, else a default; see
	// internal/memory). The series capacity, the range history, the
	// overrun queues and Go's soft limit are sized from it, and detail is
	// shed when the agent nears it.
	MemoryBudget uint64
}

// collectorKeys are the keys of the collector: section.
var collectorKeys = []string{"interval", "sources", "binaries", "max_series", "histogram_cells", "series_quota", "ringbuf_bytes", "overrun_queue", "force_kprobe", "no_uprobe_multi", "scan_interval", "memory_budget"}

// liveKeys are the collector: keys a reload applies to a running agent;
// the others need a restart (they shape the BPF objects or what is
// attached).
var liveKeys = map[string]bool{"interval": true}

// fileSettings is the collector: section as written: the values, and
// which keys it sets.
type fileSettings struct {
	CollectorSettings
	set map[string]bool
	at  map[string]*yaml.Node // each key's value, for the positions of later checks
}

// decodeCollector decodes and validates the collector: section, reporting
// every problem at its position.
func decodeCollector(ec *errorCollector, n *yaml.Node) fileSettings {
	fs := fileSettings{set: map[string]bool{}, at: map[string]*yaml.Node{}}
	if n == nil || n.Kind == 0 {
		return fs
	}
	n = deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return fs
	}
	if n.Kind != yaml.MappingNode {
		ec.at(n.Line, n.Column, "collector must be a mapping of settings (%s), not %s", strings.Join(collectorKeys, ", "), kindName(n))
		return fs
	}
	s := &fs.CollectorSettings
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode || !slices.Contains(collectorKeys, k.Value) {
			ec.at(k.Line, k.Column, "collector: unknown key %q (known: %s)", k.Value, strings.Join(collectorKeys, ", "))
			continue
		}
		if fs.set[k.Value] {
			ec.at(k.Line, k.Column, "collector: %s given twice", k.Value)
			continue
		}
		fs.set[k.Value] = true
		fs.at[k.Value] = v
		bad := func(format string, a ...any) {
			ec.at(v.Line, v.Column, "collector.%s: %s", k.Value, fmt.Sprintf(format, a...))
		}
		switch k.Value {
		case "interval":
			if d, ok := duration(v, bad); ok {
				if err := checkInterval(d); err != nil {
					bad("%v", err)
				}
				s.Interval = d
			}
		case "scan_interval":
			if d, ok := duration(v, bad, true); ok {
				if err := checkScanInterval(d); err != nil {
					bad("%v", err)
				}
				s.ScanInterval = d
			}
		case "sources":
			list, nodes := strings_(ec, k.Value, v)
			for i, src := range list {
				if err := checkSource(src); err != nil {
					ec.at(nodes[i].Line, nodes[i].Column, "collector.sources: %v", err)
				}
				if slices.Index(list, src) < i {
					ec.at(nodes[i].Line, nodes[i].Column, "collector.sources: %s listed twice", src)
				}
			}
			if v.Kind == yaml.SequenceNode && len(v.Content) == 0 {
				bad("empty list: leave sources out to attach both user_events and marker")
			}
			s.Sources = list
		case "binaries":
			list, nodes := strings_(ec, k.Value, v)
			for i, b := range list {
				if err := checkBinary(b); err != nil {
					ec.at(nodes[i].Line, nodes[i].Column, "collector.binaries: %v", err)
				}
			}
			s.Binaries = list
		case "max_series":
			if x, ok := integer(v, bad); ok {
				if err := checkMaxSeries(x); err != nil {
					bad("%v", err)
				} else {
					s.MaxSeries = uint32(x)
				}
			}
		case "histogram_cells":
			if x, ok := integer(v, bad); ok {
				if err := checkHistogramCells(x); err != nil {
					bad("%v", err)
				} else {
					s.HistogramCells = uint32(x)
				}
			}
		case "series_quota":
			if x, ok := integer(v, bad); ok {
				if err := checkSeriesQuota(x); err != nil {
					bad("%v", err)
				} else {
					s.SeriesQuota = uint32(x)
				}
			}
		case "ringbuf_bytes":
			if x, ok := integer(v, bad); ok {
				if err := checkRingbuf(x); err != nil {
					bad("%v", err)
				} else {
					s.RingbufBytes = uint32(x)
				}
			}
		case "overrun_queue":
			if x, ok := integer(v, bad); ok {
				if err := checkOverrunQueue(x); err != nil {
					bad("%v", err)
				} else {
					s.OverrunQueue = int(x)
				}
			}
		case "memory_budget":
			if n, ok := size(v, bad); ok {
				if err := checkMemoryBudget(n); err != nil {
					bad("%v", err)
				} else {
					s.MemoryBudget = n
				}
			}
		case "force_kprobe":
			s.ForceKprobe, _ = boolean(v, bad)
		case "no_uprobe_multi":
			s.NoUprobeMulti, _ = boolean(v, bad)
		}
	}
	return fs
}

// merge lays the file's settings over base (defaults and flags), except
// for the keys the command line set, which win. Binaries add up.
func merge(base CollectorSettings, flags map[string]string, file fileSettings) CollectorSettings {
	out := base
	out.Binaries = append(slices.Clone(base.Binaries), file.Binaries...)
	use := func(key string) bool { return file.set[key] && flags[key] == "" }
	if use("interval") {
		out.Interval = file.Interval
	}
	if use("sources") {
		out.Sources = file.Sources
	}
	if use("max_series") {
		out.MaxSeries = file.MaxSeries
	}
	if use("histogram_cells") {
		out.HistogramCells = file.HistogramCells
	}
	if use("series_quota") {
		out.SeriesQuota = file.SeriesQuota
	}
	if use("ringbuf_bytes") {
		out.RingbufBytes = file.RingbufBytes
	}
	if use("overrun_queue") {
		out.OverrunQueue = file.OverrunQueue
	}
	if use("force_kprobe") {
		out.ForceKprobe = file.ForceKprobe
	}
	if use("no_uprobe_multi") {
		out.NoUprobeMulti = file.NoUprobeMulti
	}
	if use("scan_interval") {
		out.ScanInterval = file.ScanInterval
	}
	if use("memory_budget") {
		out.MemoryBudget = file.MemoryBudget
	}
	if out.Interval == 0 {
		out.Interval = DefaultInterval
	}
	return out
}

// checkFlags validates the values the command line set, by the same rules
// as the file's; flags maps each collector key to the flag that set it.
func checkFlags(ec *errorCollector, s CollectorSettings, flags map[string]string) {
	for _, key := range collectorKeys {
		flag := flags[key]
		if flag == "" {
			continue
		}
		var err error
		switch key {
		case "interval":
			err = checkInterval(s.Interval)
		case "scan_interval":
			err = checkScanInterval(s.ScanInterval)
		case "sources":
			for _, src := range s.Sources {
				if err == nil {
					err = checkSource(src)
				}
			}
		case "binaries":
			for _, b := range s.Binaries {
				if err == nil {
					err = checkBinary(b)
				}
			}
		case "max_series":
			err = checkMaxSeries(int64(s.MaxSeries))
		case "histogram_cells":
			err = checkHistogramCells(int64(s.HistogramCells))
		case "series_quota":
			err = checkSeriesQuota(int64(s.SeriesQuota))
		case "ringbuf_bytes":
			err = checkRingbuf(int64(s.RingbufBytes))
		case "overrun_queue":
			err = checkOverrunQueue(int64(s.OverrunQueue))
		case "memory_budget":
			err = checkMemoryBudget(s.MemoryBudget)
		}
		if err != nil {
			ec.flag("%s: %v", flag, err)
		}
	}
}

func checkInterval(d time.Duration) error {
	switch {
	case d <= 0:
		return fmt.Errorf("must be positive, not %s", d)
	case d < MinInterval:
		return fmt.Errorf("%s is too short: at least %s (each snapshot reads every series)", d, MinInterval)
	}
	return nil
}

func checkScanInterval(d time.Duration) error {
	if d > 0 && d < MinInterval {
		return fmt.Errorf("%s is too short: at least %s, or negative to turn the /proc scan off", d, MinInterval)
	}
	return nil
}

func checkSource(s string) error {
	if s != "user_events" && s != "marker" {
		return fmt.Errorf("unknown source %q: want user_events or marker (USDT probes are declared under the top-level sources: usdt:)", s)
	}
	return nil
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

func checkMaxSeries(n int64) error { return collector.CheckMaxSeries(n) }

func checkHistogramCells(n int64) error { return collector.CheckHistogramCells(n) }

func checkSeriesQuota(n int64) error { return collector.CheckSeriesQuota(n) }

// checkMemoryBudget bounds memory_budget: at least what the agent runs
// in, at most 1 TiB.
func checkMemoryBudget(n uint64) error {
	switch {
	case n < memory.MinBudget:
		return fmt.Errorf("%s is less than the agent runs in, %s (leave it out to take %d%% of the cgroup's memory limit)", memory.FormatBytes(n), memory.FormatBytes(memory.MinBudget), memory.CgroupShare)
	case n > 1<<40:
		return fmt.Errorf("%s is more than 1TiB", memory.FormatBytes(n))
	}
	return nil
}

// size reads a size: a number of bytes, or one with a unit (512MiB, 1GiB,
// 500MB, 2G), as --output-max-size takes them.
func size(n *yaml.Node, bad func(string, ...any)) (uint64, bool) {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!str") {
		bad("want a size such as 512MiB or 1GiB, not %s", kindName(n))
		return 0, false
	}
	v, err := rotate.ParseSize(n.Value)
	if err != nil {
		bad("%v", err)
		return 0, false
	}
	if v <= 0 {
		bad("must be positive, not %s", n.Value)
		return 0, false
	}
	return uint64(v), true
}

func checkOverrunQueue(n int64) error { return collector.CheckOverrunQueue(n) }

func checkRingbuf(n int64) error { return collector.CheckRingbufBytes(n) }

// deref follows aliases, a bounded number of times.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 8; i++ {
		n = n.Alias
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "null"
		case "!!bool":
			return "a boolean"
		case "!!int":
			return "an integer"
		case "!!float":
			return "a number"
		}
		return fmt.Sprintf("the string %q", n.Value)
	}
	return "an alias"
}

// duration reads a duration in spanwatch's one syntax (internal/duration:
// Go's units and Prometheus' d, w, y). negative allows a leading '-' (a
// setting that means "off" when negative).
func duration(n *yaml.Node, bad func(string, ...any), negative ...bool) (time.Duration, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		bad("want a duration such as 10s, not %s", kindName(n))
		return 0, false
	}
	s, neg := n.Value, false
	if len(negative) > 0 && negative[0] {
		s, neg = strings.CutPrefix(s, "-")
	}
	d, err := durationpkg.Parse(s)
	if err == nil {
		if neg {
			d = -d
		}
		return d, true
	}
	if _, err := strconv.ParseFloat(n.Value, 64); err == nil {
		bad("%s has no unit: write it with one, e.g. %ss", n.Value, n.Value)
		return 0, false
	}
	if strings.HasPrefix(n.Value, "-") {
		bad("%v", err)
		return 0, false
	}
	bad("bad duration %q: use a number with a unit (%s), e.g. 500ms, 10s, 5m, 1d", n.Value, durationpkg.Units)
	return 0, false
}

func integer(n *yaml.Node, bad func(string, ...any)) (int64, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		bad("want an integer, not %s", kindName(n))
		return 0, false
	}
	x, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil {
		bad("integer %s out of range", n.Value)
		return 0, false
	}
	return x, true
}

func boolean(n *yaml.Node, bad func(string, ...any)) (bool, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		bad("want true or false, not %s", kindName(n))
		return false, false
	}
	b, err := strconv.ParseBool(n.Value)
	if err != nil {
		// YAML 1.1 spellings (yes, on) are tagged !!bool by yaml.v3 only
		// in some forms; refuse what strconv does not read.
		bad("want true or false, not %q", n.Value)
		return false, false
	}
	return b, true
}

// strings_ reads a list of strings, or one string; it returns the nodes
// too, for the positions of their errors.
func strings_(ec *errorCollector, key string, n *yaml.Node) ([]string, []*yaml.Node) {
	var items []*yaml.Node
	switch n.Kind {
	case yaml.SequenceNode:
		items = n.Content
	case yaml.ScalarNode:
		if n.Tag != "!!null" {
			items = []*yaml.Node{n}
		}
	default:
		ec.at(n.Line, n.Column, "collector.%s: want a list of strings, not %s", key, kindName(n))
		return nil, nil
	}
	var out []string
	var nodes []*yaml.Node
	for _, it := range items {
		it = deref(it)
		if it.Kind != yaml.ScalarNode || it.Tag == "!!null" {
			ec.at(it.Line, it.Column, "collector.%s: want a string, not %s", key, kindName(it))
			continue
		}
		out = append(out, it.Value)
		nodes = append(nodes, it)
	}
	return out, nodes
}
