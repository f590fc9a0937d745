package source

import (
	"log/slog"
	"time"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/internal/symbolize"
)

// A Source is an attached span source. Close detaches it and releases
// its BPF object; it is idempotent, and is called before the collector's
// Close.
type Source interface {
	// Kind names the kind of source ("usdt", "tracepoints").
	Kind() string
	// Counts returns the source's health counters since it attached,
	// keyed "kind/reason" (how its events ended: "user_events/unpaired_end",
	// "eventheader/read_error"), summed over CPUs; only nonzero counts.
	// A source whose BPF object counts nothing returns nil.
	Counts() (map[string]uint64, error)
	Close() error
}

// A Core is what a collector lends its sources: the aggregation core's
// maps and the services a source calls. Collector.SourceCore makes one.
type Core struct {
	Logger *slog.Logger
	// Maps are the aggregation core's maps by their name in
	// bpf/aggregate.h: a source loads its object with them in place of
	// its own maps of the same name (LoadBeside), so it feeds the same
	// series, budgets and overrun records.
	Maps map[string]*ebpf.Map
	// Kernel is what the collector found on this kernel: the probes and
	// the core it loaded (full or compat).
	Kernel kernel.Facts
	// TracepointMethod is how the core's program on perf_tp_event is
	// attached, "fentry" or "kprobe": a source on tracepoints attaches
	// its own the same way.
	TracepointMethod string
	// ProcRoot is /proc, or where tests put it.
	ProcRoot string
	// ScanInterval is how often a source that attaches to the binaries
	// of running processes scans ProcRoot (Processes); 0 or less: only
	// when the source is attached, or asked to.
	ScanInterval time.Duration
	// NoUprobeMulti forces uprobes through the perf_uprobe PMU.
	NoUprobeMulti bool
	// Programs are the core object's own source programs, for the
	// sources built in to it (source/marker, source/sdkevent).
	Programs Programs

	// AllocLabelSet gives a source with labels a label set id of its
	// own, naming its label values in snapshots; FreeLabelSet gives it
	// back.
	AllocLabelSet func(names []string, signed []bool) (uint16, error)
	FreeLabelSet  func(id uint16)
	// AllocStringLabelSet is AllocLabelSet for a source some of whose
	// label values stand for strings (a hash in the key): str names
	// label i's value v, or says it is a number.
	AllocStringLabelSet func(names []string, signed []bool, str func(i int, v uint64) (string, bool)) (uint16, error)
	// AddNameResolver has snapshots report a source's placeholder names
	// (names the kernel could not read) under the names f gives.
	AddNameResolver func(f func(name string) (string, bool))
	// AddAnchor tells the symbolizer that a binary has a probe site, so
	// it keeps the binary's symbols for processes that exit.
	AddAnchor func(symbolize.Anchor)
	// RemoveAnchor tells it that the binary with device dev and inode
	// ino has no probe site any more, so it may close its copy.
	RemoveAnchor func(dev, ino uint64)
	// WatchInflight has the in-flight sampler watch the spans of a
	// source's object too; it reports why it cannot (nil when the
	// sampler is off).
	WatchInflight func(InflightMaps) error
	// AddCounts makes each snapshot carry the window's increase of a
	// source's counters (snapshot.Stats.SourceEvents, keyed
	// "kind/reason"; those ending in "/ok" are left out); the returned
	// function stops it.
	AddCounts func(counts func() (map[string]uint64, error)) (remove func())
	// AddHealth makes each snapshot carry a source's probe hits over the
	// window and whether it is silent (snapshot.Stats.Sources), from the
	// totals health returns.
	AddHealth func(health func() ([]Health, error)) (remove func())
}

// Programs are the programs of the core's object (bpf/spanwatch.bpf.c)
// that span sources attach: compiled with the aggregation, inlined in it,
// and loaded with the core (full or compat), so the two paths most spans
// take (the SDKs' marker where the kernel has no user_events, their
// user_event where it has) cost no second object. The marker source
// (source/marker) attaches Marker and MarkerSysV; the SDK event source
// (source/sdkevent) attaches Tracepoint.
type Programs struct {
	Marker     *ebpf.Program // the Go SDK's marker (the event on the stack)
	MarkerSysV *ebpf.Program // libspanwatch's marker (the event in the first argument register)
	// UprobeMulti: Marker and MarkerSysV were loaded for uprobe_multi
	// links (the attach type is fixed at load time).
	UprobeMulti bool
	// Tracepoint runs on perf_tp_event (attached as TracepointMethod
	// says) and aggregates the user_events whose ids WatchedEvents holds.
	Tracepoint    *ebpf.Program
	WatchedEvents *ebpf.Map
}

// InflightMaps are the maps of a source's object that the in-flight
// sampler reads to find its open spans (bpf/usdt.bpf.c's: usdt_inflight,
// usdt_sources, usdt_task_start, usdt_task_names).
type InflightMaps struct {
	Inflight, Sources, TaskStart, TaskNames *ebpf.Map
}

// Health is one configured source's probes since it attached.
type Health struct {
	Kind     string // "usdt"
	Name     string // its span or metric name, or the probe naming it
	Declared string // where the configuration declares it (file:line:col)
	Sites    int    // call sites attached
	Hits     uint64 // probe hits since it attached
	Silent   bool   // attached its silent_after ago and never hit
	Hint     string // when silent: the runtime switch known to make its probes fire
	// Unpaired and NestOverflow count its ends without an open start and
	// its starts lost to deeper ones on a full thread stack.
	Unpaired, NestOverflow uint64
}
