//go:build linux

package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/rlimit"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/collector/overrun"
	"github.com/spanwatch/spanwatch/internal/cgroup"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/internal/memory"
	"github.com/spanwatch/spanwatch/internal/symbolize"
	"github.com/spanwatch/spanwatch/snapshot"
	"github.com/spanwatch/spanwatch/source"
	"github.com/spanwatch/spanwatch/source/marker"
	"github.com/spanwatch/spanwatch/source/sdkevent"
	"github.com/spanwatch/spanwatch/userevents"
)

// Sources selects which span sources a collector attaches.
type Sources struct {
	// UserEvents attaches to the spanwatch_span user_event. Where the kernel
	// has no user_events the collector logs it and goes on without.
	UserEvents bool
	// Marker uprobes the span SDK's marker in binaries that contain it.
	Marker bool
}

// Config configures a Collector. The zero value is usable: both sources,
// default sizes.
type Config struct {
	Logger *slog.Logger
	// Sources; the zero value means both.
	Sources Sources
	// ForceKprobe attaches the user_events source with a kprobe instead of
	// fentry, as on kernels without BTF or trampolines.
	ForceKprobe bool
	// MaxSeries is the number of series (name, cgroup, labels) the kernel
	// holds: DefaultMaxSeries when 0, at most MaxSeriesLimit. Memory does
	// not depend on the CPU count (about 200 MiB at the default, with the
	// histogram cells; spanwatch_bpf_map_bytes says). Values of series
	// beyond it are counted in Stats.StatsFull.
	MaxSeries uint32
	// HistogramCells is the number of histogram cells (one per non-empty
	// bucket of a series) the kernel holds, rounded up to a power of two:
	// DefaultHistogramCells when 0. Values that find no free cell are
	// still counted in their series, but not in its histogram
	// (Stats.HistogramFull).
	HistogramCells uint32
	// SeriesQuota is how many series one workload may hold (a pod, a
	// container, a systemd unit, a delegated cgroup with everything a
	// user made below it: cgroup.Workload): DefaultSeriesQuota when 0. A
	// workload past it has the values of its new series counted in one
	// series of its own named "(other)", so no workload can take the
	// others' room, however many cgroups it makes.
	SeriesQuota uint32
	// RingbufBytes sizes the overrun ring buffer (default 4 MiB; a power
	// of two, multiple of the page size).
	RingbufBytes uint32
	// MarkerBinaries are binaries to uprobe the marker in, besides those
	// found by scanning /proc.
	MarkerBinaries []string
	// SymbolTimeout bounds each wait of the stack symbolizer on a
	// process's files and /proc (symbolize.Config.Timeout: 2s when zero;
	// a file's symbol tables are waited for five times as long). Tests in
	// an emulated VM (qemu TCG, ten to twenty times slower) raise it.
	SymbolTimeout time.Duration
	// ScanInterval is how often /proc is scanned for new binaries with the
	// marker, and by the sources given it (source.Core.ScanInterval)
	// (default 2s; negative disables scanning).
	ScanInterval time.Duration
	// ProcRoot is /proc by default.
	ProcRoot string
	// MaxOverrunsPerSnapshot bounds the overruns a snapshot keeps (default
	// 1000); more are counted in Stats.OverrunsDropped.
	MaxOverrunsPerSnapshot int
	// OnOverrun, when set, is called for each overrun as it arrives,
	// before it is added to the next snapshot. It runs on the worker
	// behind the overrun queue, never on the ring buffer's reader: while
	// it blocks, records wait in the queue, and those that find it full
	// are counted in Stats.OverrunsQueueDropped.
	OnOverrun func(snapshot.Overrun)
	// OverrunQueue is how many overrun records the ring buffer's reader
	// queues for the worker that decodes, symbolizes and delivers them
	// (DefaultOverrunQueue when 0 or less; each takes about 1.8 KB). The
	// reader copies each record into the queue and reads on, so a slow
	// OnOverrun or symbolizer costs queued records, counted in
	// Stats.OverrunsQueueDropped, not ring buffer drops in the kernel.
	OverrunQueue int
	// Symbolizer turns raw stack addresses into frames; nil means a
	// symbolize.Symbolizer over ProcRoot.
	Symbolizer Symbolizer
	// SymbolMemory bounds what the default symbolizer's tables, perf maps
	// and lookup caches take together (symbolize.Limits.Memory; its
	// default when 0). The agent's memory budget sets it.
	SymbolMemory int64
	// Resolver resolves cgroup ids to paths, containers, pods and units;
	// nil means a cgroup.Resolver over the cgroup2 mount (when there is
	// none, series keep only their cgroup id).
	Resolver CgroupResolver
	// IdleEvict removes series idle this long from the kernel map (default
	// 10m), so series of exited containers do not fill it.
	IdleEvict time.Duration
	// NoUprobeMulti attaches the marker's uprobes through the perf_uprobe
	// PMU (perf_event_open), as on kernels before 6.6, even where the
	// kernel has uprobe_multi links; it is chosen automatically where it
	// does not. The perf path needs CAP_SYS_ADMIN: perf_uprobe_event_init
	// refuses callers without it. A uprobe_multi link needs only CAP_BPF
	// and CAP_PERFMON.
	NoUprobeMulti bool
	// Inflight configures the sampling of spans running past their
	// budget: where their time goes, and spans that never end.
	Inflight InflightConfig
	// Core chooses the BPF objects: "" for the ones the kernel's
	// features allow (kernel.Probes.ChooseCore, with the compat ones
	// should the verifier refuse the full ones), or kernel.CoreFull or
	// kernel.CoreCompat (tests, and kernels whose probes mislead).
	Core kernel.Core

	histogramCellsSet bool // HistogramCells was given, not defaulted
	// preallocate keeps every map preallocated where GrowsWithUse would
	// not (BenchmarkSeriesCreate compares the two in one run).
	preallocate bool
}

// A Symbolizer turns stack addresses into frames (overrun.Symbolizer);
// *symbolize.Symbolizer is the default.
type Symbolizer = overrun.Symbolizer

// A CgroupResolver resolves cgroup ids; *cgroup.Resolver is the default.
type CgroupResolver interface {
	Resolve(id uint64) cgroup.Info
}

// identity is what a series and an overrun say of the cgroup they ran in:
// the same fields from the same Info, so that an overrun names the series
// its span was counted in (metrics puts its trace id on that series'
// histogram as an exemplar).
func identity(info cgroup.Info) snapshot.Identity {
	return snapshot.Identity{Cgroup: info.Path, ContainerID: info.ContainerID, PodUID: info.PodUID, Unit: info.Unit,
		Namespace: info.Namespace, Pod: info.Pod, Container: info.Container, Process: info.Process, Service: info.Service}
}

// A Collector owns the loaded BPF objects and their attachments. Close
// releases all of them.
type Collector struct {
	cfg  Config
	log  *slog.Logger
	objs objects

	ue     *sdkevent.Source // the SDK's user_event; nil when not attached
	marker *marker.Source   // the SDKs' marker; nil when not attached
	rb     *overrun.Reader

	budgetMu   sync.Mutex // held from PrepareBudgets to Commit or Abort
	budgetSets [budgetSets]budgetSet

	mu         sync.Mutex // guards the read state below
	closed     bool
	counters   []*counter                  // attached sources' health counters
	prevSource map[string]uint64           // their counts at the last snapshot
	healths    []*health                   // attached sources' probe hits
	prevHits   map[healthKey]source.Health // their totals at the last snapshot
	prevMisses uint64
	prevFiles  map[string]uint64 // userfile.Counts at the last snapshot
	quotaSeen  map[uint64]bool   // cgroups whose (other) series was logged
	wl         workloads         // what cg_workload holds
	splits     splits            // what cg_split holds; process names
	reader     *seriesReader
	lastAt     time.Time
	mapBytes   uint64    // the core's maps' memory (MapBytes) at mapBytesAt
	mapBytesAt time.Time // zero: not read yet

	inflight    *inflightState // nil when off or unavailable
	inflightErr error          // why it is unavailable
	facts       kernel.Facts   // what the kernel has, and the core loaded

	closers []func() error

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// overrunConfig is what the overrun pipeline takes of the collector's
// configuration: cgroups named as the series' are, names and label sets
// from the series reader.
func (c *Collector) overrunConfig() overrun.Config {
	cfg := overrun.Config{Logger: c.cfg.Logger, OnOverrun: c.cfg.OnOverrun, Queue: c.cfg.OverrunQueue,
		Keep: c.cfg.MaxOverrunsPerSnapshot, Symbolizer: c.cfg.Symbolizer}
	if r := c.cfg.Resolver; r != nil {
		cfg.Identify = func(id uint64, tgid uint32) snapshot.Identity {
			info := r.Resolve(id)
			if tgid != 0 && info.Process == "" {
				// A cgroup of several executables, whose series are
				// kept per process: named as split.go names them.
				if name, svc := c.splits.process(c.cfg.ProcRoot, c.objs.SplitComms, tgid, time.Now()); name != "" {
					info.Process, info.Service = name, svc
				}
			}
			return identity(info)
		}
	}
	if c.reader != nil {
		cfg.Names = overrunNames{c.reader}
	}
	return cfg
}

// overrunNames lends the series reader's names to the overrun pipeline.
type overrunNames struct{ r *seriesReader }

func (n overrunNames) ResolveName(name string) (string, bool) { return n.r.resolveName(name) }
func (n overrunNames) Labels(set uint16, vals []uint64, other uint8) map[string]string {
	return n.r.labels(set, vals, other)
}

// New loads the BPF programs and attaches the configured sources. The
// collector runs until Close.
func New(ctx context.Context, cfg Config) (_ *Collector, err error) {
	if err := bpf.CheckArch(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if !cfg.Sources.UserEvents && !cfg.Sources.Marker {
		cfg.Sources = Sources{UserEvents: true, Marker: true}
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	var closers []func() error
	if cfg.ScanInterval == 0 {
		cfg.ScanInterval = DefaultScanInterval
	}
	if cfg.MaxOverrunsPerSnapshot == 0 {
		cfg.MaxOverrunsPerSnapshot = 1000
	}
	if cfg.IdleEvict == 0 {
		cfg.IdleEvict = 10 * time.Minute
	}
	if cfg.Symbolizer == nil {
		lim := symbolize.Limits{Memory: cfg.SymbolMemory}
		if m := cfg.SymbolMemory; m > 0 && m < 64<<20 {
			lim.Module = m // one file may not take more than all of them
		}
		sym := symbolize.New(symbolize.Config{Logger: cfg.Logger, ProcRoot: cfg.ProcRoot, Limits: lim, Timeout: cfg.SymbolTimeout})
		cfg.Symbolizer = sym
		closers = append(closers, sym.Close)
	}
	if cfg.Resolver == nil {
		if r, err := cgroup.NewResolver(cgroup.Config{Logger: cfg.Logger, ProcRoot: cfg.ProcRoot}); err == nil {
			cfg.Resolver = r
		} else {
			cfg.Logger.Info("cgroup_names_unavailable", "error", err)
		}
	}
	if os.Geteuid() != 0 {
		cfg.Logger.Debug("not_root", "hint", "spanwatch needs CAP_BPF and CAP_PERFMON (or root)")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("cannot use BPF: %w: run spanwatch as root, or grant it CAP_BPF and CAP_PERFMON (plus CAP_SYS_PTRACE for other users' processes)", err)
	}

	if err := cfg.sizes(); err != nil {
		return nil, err
	}
	probes := kernel.Probe()
	variant := cfg.Core
	if variant == "" {
		if variant, err = probes.ChooseCore(); err != nil {
			return nil, err
		}
	}
	// Whether the marker is attached through a uprobe_multi link is
	// decided at load time: such a program must be loaded with that
	// attach type.
	uprobeMulti := !cfg.NoUprobeMulti && HaveUprobeMulti()
	c := &Collector{cfg: cfg, log: cfg.Logger, closers: closers, facts: kernel.Facts{Probes: probes, Core: variant}}
	c.objs, err = loadCore(cfg, variant, uprobeMulti, probes.Release)
	if err != nil && variant == kernel.CoreFull && cfg.Core == "" && errors.Is(err, kernel.ErrRefused) {
		// The probes allowed the full objects and the verifier refused
		// them: the compat ones need less of it.
		c.log.Warn("bpf_core_refused", "error", err, "fallback", "compat objects")
		c.facts.Core, c.facts.CoreFallback = kernel.CoreCompat, err
		c.objs, err = loadCore(cfg, kernel.CoreCompat, uprobeMulti, probes.Release)
	}
	if err != nil {
		return nil, err
	}
	compat := c.facts.Core == kernel.CoreCompat
	// What this kernel gets, in one line: the table of spanwatch kernel.
	c.log.Info("kernel", kernel.LogArgs(c.facts)...)
	defer func() {
		if err != nil {
			c.Close()
		}
	}()

	c.reader, err = newSeriesReader(&c.objs, c.log, cfg.MaxSeries, compat, cfg.cellBanks())
	if err != nil {
		return nil, err
	}
	c.reader.process = func(tgid uint32) (string, string) {
		return c.splits.process(cfg.ProcRoot, c.objs.SplitComms, tgid, time.Now())
	}
	c.markSplits()
	for i := range c.budgetSets {
		c.budgetSets[i].ids = map[uint64]bool{}
	}
	c.reader.sets = &c.budgetSets
	if compat {
		// The compat core takes slots from free_slots only: all of
		// them, in order (bpf/aggregate.h).
		for slot := uint32(0); slot < cfg.MaxSeries; slot++ {
			if err := c.objs.FreeSlots.Update(nil, slot, ebpf.UpdateAny); err != nil {
				return nil, fmt.Errorf("fill the free slots: %w", err)
			}
		}
	}
	core := c.reader.core
	core.OtherNameId = snapshot.NameID(snapshot.OtherName)
	core.SeriesMax = cfg.MaxSeries
	core.DefaultQuota = cfg.SeriesQuota
	// Generation 1, set 0, no globs: no budgets.
	atomic.StoreUint32(&core.BudgetGen, 1)
	var other bpf.SpanwatchSpanName
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&other.Name[0])), len(other.Name)), snapshot.OtherName)
	if err := c.objs.Names.Put(core.OtherNameId, &other); err != nil {
		return nil, fmt.Errorf("write the (other) name: %w", err)
	}
	c.syncWorkloads()
	c.lastAt = time.Now()

	runCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel

	c.rb, err = overrun.Open(c.objs.Overruns, c.overrunConfig())
	if err != nil {
		return nil, err
	}

	// The sources built in to the core's object (bpf/spanwatch.bpf.c);
	// the agent attaches the configured ones (USDT, tracepoints) beside.
	sc := c.SourceCore()
	if cfg.Sources.UserEvents {
		c.ue, err = sdkevent.Attach(sc)
		if err != nil {
			if !cfg.Sources.Marker {
				return nil, err
			}
			if errors.Is(err, userevents.ErrNotSupported) {
				// Most distributions' kernels leave user_events out: the
				// marker is the expected path there, not an error.
				c.log.Debug("user_events_fallback", "fallback", "marker", "reason", "this kernel has no user_events (Linux 6.4+ with CONFIG_USER_EVENTS=y)")
			} else {
				c.log.Warn("user_events_unavailable", "error", err, "fallback", "marker")
			}
			c.ue = nil
		}
	}
	c.rb.Start()
	c.startInflight(runCtx)
	if cfg.Sources.Marker {
		c.marker, err = marker.Attach(sc, marker.Config{Binaries: cfg.MarkerBinaries, ScanInterval: cfg.ScanInterval})
		if err != nil {
			return nil, err
		}
	}
	_ = ctx
	return c, nil
}

// loadCore loads the core's objects (full or compat) with the maps sized
// from cfg, and the programs of one attach method for user_events: only
// that one is loaded, since where fentry is unavailable (no BTF, no
// trampolines, or a kernel that refuses tracing programs) it would not
// load at all, and the kprobe takes its place. A verifier refusal is a
// *kernel.LoadError.
func loadCore(cfg Config, core kernel.Core, uprobeMulti bool, release string) (objects, error) {
	load := bpf.LoadSpanwatch
	if core == kernel.CoreCompat {
		load = bpf.LoadSpanwatchCompat
	}
	spec, err := load()
	if err != nil {
		return objects{}, fmt.Errorf("load bpf spec: %w", err)
	}
	if uprobeMulti {
		spec.Programs[progUprobeMarker].AttachType = ebpf.AttachTraceUprobeMulti
		spec.Programs[progUprobeMarkerSysV].AttachType = ebpf.AttachTraceUprobeMulti
	}
	for name, n := range cfg.mapSizes(core) {
		spec.Maps[name].MaxEntries = n
	}
	for name, f := range cfg.mapFlags(core, release) {
		spec.Maps[name].Flags |= f
	}
	sizeCellBanks(spec, &cfg, core)
	var objs objects
	var fentryErr error
	objs.method = "kprobe"
	if !cfg.ForceKprobe && haveBTF() {
		var fo fentryObjects
		if fentryErr = spec.LoadAndAssign(&fo, nil); fentryErr == nil {
			objs = objects{SpanwatchMaps: fo.SpanwatchMaps, UprobeMarker: fo.UprobeMarker, UprobeMarkerSysV: fo.UprobeMarkerSysV, tp: fo.Tp, method: "fentry"}
		}
	}
	if objs.method == "kprobe" {
		var ko kprobeObjects
		if err = spec.LoadAndAssign(&ko, nil); err == nil {
			objs = objects{SpanwatchMaps: ko.SpanwatchMaps, UprobeMarker: ko.UprobeMarker, UprobeMarkerSysV: ko.UprobeMarkerSysV, tp: ko.Tp, method: "kprobe"}
			if fentryErr != nil {
				logFentryFallback(cfg.Logger, fentryErr)
			}
		}
	}
	objs.uprobeMulti = uprobeMulti
	if err != nil {
		if lerr := kernel.NewLoadError(string(core)+" core", release, err); lerr != nil {
			cfg.Logger.Debug("bpf_verifier_log", "object", string(core)+" core", "log", kernel.VerifierLog(err))
			return objects{}, lerr
		}
		return objects{}, fmt.Errorf("load bpf programs (needs CAP_BPF and CAP_PERFMON, or root): %w", err)
	}
	return objs, nil
}

// objects are the loaded maps and the programs of one attach method.
type objects struct {
	bpf.SpanwatchMaps
	UprobeMarker     *ebpf.Program // the Go SDK's marker
	UprobeMarkerSysV *ebpf.Program // libspanwatch's marker
	tp               *ebpf.Program // on perf_tp_event
	method           string        // "fentry" or "kprobe"
	uprobeMulti      bool          // the markers are loaded for uprobe_multi links
}

func (o *objects) close() {
	o.SpanwatchMaps.Close()
	for _, p := range []*ebpf.Program{o.UprobeMarker, o.UprobeMarkerSysV, o.tp} {
		if p != nil {
			p.Close()
		}
	}
}

type fentryObjects struct {
	bpf.SpanwatchMaps
	UprobeMarker     *ebpf.Program `ebpf:"uprobe_marker"`
	UprobeMarkerSysV *ebpf.Program `ebpf:"uprobe_marker_sysv"`
	Tp               *ebpf.Program `ebpf:"fentry_perf_tp_event"`
}

type kprobeObjects struct {
	bpf.SpanwatchMaps
	UprobeMarker     *ebpf.Program `ebpf:"uprobe_marker"`
	UprobeMarkerSysV *ebpf.Program `ebpf:"uprobe_marker_sysv"`
	Tp               *ebpf.Program `ebpf:"kprobe_perf_tp_event"`
}

// Map and program names in the BPF object.
const (
	mapOverruns = "overruns"

	progUprobeMarker     = "uprobe_marker"
	progUprobeMarkerSysV = "uprobe_marker_sysv"
)

// HaveUprobeMulti reports whether the kernel has uprobe_multi BPF links
// (6.6+), which attach uprobes with CAP_BPF and CAP_PERFMON where the
// perf_uprobe PMU wants CAP_SYS_ADMIN. The probe loads a program and
// tries a link, so it is false too where BPF is refused altogether.
func HaveUprobeMulti() bool {
	return features.HaveBPFLinkUprobeMulti() == nil
}

// hostName names the node: $NODE_NAME when set (the DaemonSet sets it from
// the pod's node, where os.Hostname is the pod's name), else the host name.
func hostName() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return h
}

// sizes fills in and checks the sizes.
// CheckConfig returns the error New gives cfg's sizes (MaxSeries,
// HistogramCells, SeriesQuota, RingbufBytes, OverrunQueue) before it loads
// anything: the same check.
func CheckConfig(cfg Config) error { return cfg.sizes() }

func (cfg *Config) sizes() error {
	if cfg.MaxSeries == 0 {
		cfg.MaxSeries = DefaultMaxSeries
	}
	if err := CheckMaxSeries(int64(cfg.MaxSeries)); err != nil {
		return fmt.Errorf("max series: %w", err)
	}
	cfg.histogramCellsSet = cfg.HistogramCells != 0
	if cfg.HistogramCells == 0 {
		cfg.HistogramCells = DefaultHistogramCells
	}
	if err := CheckHistogramCells(int64(cfg.HistogramCells)); err != nil {
		return fmt.Errorf("histogram cells: %w", err)
	}
	cfg.HistogramCells = 1 << bits.Len32(cfg.HistogramCells-1)
	if cfg.SeriesQuota == 0 {
		cfg.SeriesQuota = DefaultSeriesQuota
	}
	if err := CheckSeriesQuota(int64(cfg.SeriesQuota)); err != nil {
		return fmt.Errorf("series quota: %w", err)
	}
	if cfg.RingbufBytes != 0 {
		if err := CheckRingbufBytes(int64(cfg.RingbufBytes)); err != nil {
			return fmt.Errorf("ring buffer bytes: %w", err)
		}
	}
	if cfg.OverrunQueue > 0 {
		if err := CheckOverrunQueue(int64(cfg.OverrunQueue)); err != nil {
			return fmt.Errorf("overrun queue: %w", err)
		}
	}
	return nil
}

func haveBTF() bool {
	_, err := os.Stat("/sys/kernel/btf/vmlinux")
	return err == nil
}

// Kernel returns what the collector found on this kernel: the probes, the
// core objects it loaded, and why (kernel.Rows makes the table of it).
func (c *Collector) Kernel() kernel.Facts { return c.facts }

// UserEventsAttached reports whether the user_events source is attached, and
// how ("fentry" or "kprobe").
func (c *Collector) UserEventsAttached() (bool, string) {
	if c.ue == nil {
		return false, ""
	}
	return true, c.ue.Method()
}

// MarkerUprobeMethod reports how the marker's uprobes are attached:
// "uprobe_multi" (a BPF link) or "perf" (the perf_uprobe PMU); "" without
// the marker source.
func (c *Collector) MarkerUprobeMethod() string {
	if c.marker == nil {
		return ""
	}
	return c.marker.Method()
}

// NoUprobeMulti reports whether Config.NoUprobeMulti forces the perf path,
// for USDT tracers loaded beside the collector to follow.
func (c *Collector) NoUprobeMulti() bool { return c.cfg.NoUprobeMulti }

// MarkerBinaries returns the binaries whose marker is uprobed.
func (c *Collector) MarkerBinaries() []string {
	if c.marker == nil {
		return nil
	}
	return c.marker.Binaries()
}

// ScanMarkers scans /proc for new binaries with the marker now, instead of
// waiting for the next scan.
func (c *Collector) ScanMarkers() {
	if c.marker != nil {
		c.marker.Scan()
	}
}

// Maps exposes the aggregation core's maps by their name in
// bpf/aggregate.h (bpf.CoreMaps), for sources loaded from other BPF
// objects that must feed the same aggregates (source.Core.Maps).
func (c *Collector) Maps() map[string]*ebpf.Map {
	return coreMaps(&c.objs.SpanwatchMaps)
}

// SetSeriesQuota sets the series quota of one workload, named by the id
// of its root cgroup (cgroup.Workload.ID; 0 restores the default).
func (c *Collector) SetSeriesQuota(cgroupID uint64, quota uint32) error {
	if quota == 0 {
		if err := c.objs.CgQuota.Delete(cgroupID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("series quota of cgroup %d: %w", cgroupID, err)
		}
		return nil
	}
	if err := c.objs.CgQuota.Put(cgroupID, quota); err != nil {
		return fmt.Errorf("series quota of cgroup %d: %w", cgroupID, err)
	}
	return nil
}

// mapBytesEvery is how often a snapshot reads the maps' memory again.
const mapBytesEvery = 10 * time.Second

// MapBytes returns the memory the kernel charges for the core's maps now
// (they grow with the series where GrowsWithUse), from each map's
// /proc/self/fdinfo as memory.MapInfoBytes counts it.
func (c *Collector) MapBytes() uint64 {
	var total uint64
	for _, m := range c.Maps() {
		if m == nil {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD())); err == nil {
			total += memory.MapInfoBytes(string(b))
		}
	}
	if c.reader != nil && c.reader.banks != nil {
		total += c.reader.banks.mapBytes() // the cell banks made so far
	}
	return total
}

// SetStackDetail keeps (true, the default) or sheds (false) the detail of
// overrun records, what the memory budget sheds first under pressure
// (memory.StackDetail): while shed, an overrun keeps its innermost
// StackFramesShed user frames and no kernel stack or in-span samples,
// and a snapshot keeps a tenth of Config.MaxOverrunsPerSnapshot (the
// rest are counted in Stats.OverrunsDropped, and still delivered to
// OnOverrun). Counts are never shed: the spans stay counted over their
// budget in their series.
func (c *Collector) SetStackDetail(full bool) { c.rb.SetStackDetail(full) }

// SeriesCapacity returns the number of series the kernel can hold.
func (c *Collector) SeriesCapacity() uint32 { return c.cfg.MaxSeries }

// recursionMisses sums the runs the kernel skipped because a BPF program
// was already running on the CPU (fentry and kprobe recursion protection;
// ProgramStats.RecursionMisses, 5.12+): spans lost, counted.
func (c *Collector) recursionMisses() uint64 {
	var n uint64
	for _, p := range []*ebpf.Program{c.objs.tp, c.objs.UprobeMarker, c.objs.UprobeMarkerSysV} {
		if p == nil {
			continue
		}
		if st, err := p.Stats(); err == nil {
			n += st.RecursionMisses
		}
	}
	return n
}

// logQuotas logs, once per workload, that a workload reached its series
// quota: its new names now count in its "(other)" series, which is in the
// workload's root cgroup (bpf/aggregate.h).
func (c *Collector) logQuotas(s *snapshot.Snapshot) {
	for i := range s.Series {
		sr := &s.Series[i]
		if sr.NameID != c.reader.otherNameID || c.quotaSeen[sr.CgroupID] {
			continue
		}
		if c.quotaSeen == nil {
			c.quotaSeen = map[uint64]bool{}
		}
		c.quotaSeen[sr.CgroupID] = true
		c.log.Warn("series_quota_reached", "cgroup_id", sr.CgroupID, "cgroup", sr.Cgroup, "quota", c.cfg.SeriesQuota,
			"effect", "new span names of this workload are counted in its (other) series")
	}
	// A cgroup whose (other) series was evicted (an exited container) is
	// forgotten: the set holds the cgroups over their quota now, not
	// every one that ever was.
	if len(c.quotaSeen) == 0 {
		return
	}
	over := make(map[uint64]bool, len(c.quotaSeen))
	for i := range s.Series {
		if s.Series[i].NameID == c.reader.otherNameID {
			over[s.Series[i].CgroupID] = true
		}
	}
	for cg := range c.quotaSeen {
		if !over[cg] {
			delete(c.quotaSeen, cg)
		}
	}
}

// ErrClosed is returned by a Collector's methods after Close.
var ErrClosed = errors.New("collector closed")

// Snapshot returns what happened since the previous call (or since New).
func (c *Collector) Snapshot() (*snapshot.Snapshot, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	now := time.Now()
	s, err := c.reader.read(now, now.Sub(c.lastAt), c.cfg.IdleEvict)
	if err != nil {
		return nil, err
	}
	c.lastAt = now
	s.Host = hostName()
	// The maps grow with the series, slowly: read again every
	// mapBytesEvery, not at every snapshot (intervals go down to 100 ms).
	if c.mapBytesAt.IsZero() || now.Sub(c.mapBytesAt) >= mapBytesEvery {
		c.mapBytes, c.mapBytesAt = c.MapBytes(), now
	}
	s.Stats.BPFMapBytes = c.mapBytes
	c.sourceEvents(&s.Stats)
	c.sourceHealth(&s.Stats)
	c.userFiles(&s.Stats)
	misses := c.recursionMisses()
	s.Stats.RecursionMisses = misses - c.prevMisses
	c.prevMisses = misses
	// One resolution per cgroup per snapshot, not per series: a node's
	// series far outnumber its cgroups.
	var lastID uint64
	var last cgroup.Info
	resolved := map[uint64]cgroup.Info{}
	for i := range s.Series {
		sr := &s.Series[i]
		if c.cfg.Resolver == nil || sr.CgroupID == 0 {
			continue
		}
		info := last
		if sr.CgroupID != lastID {
			var ok bool
			if info, ok = resolved[sr.CgroupID]; !ok {
				info = c.cfg.Resolver.Resolve(sr.CgroupID)
				resolved[sr.CgroupID] = info
			}
			lastID, last = sr.CgroupID, info
		}
		// A series kept per process (a tgid in its key) was given its
		// process's names when read: the cgroup's are the rest.
		proc, svc := sr.Process, sr.Service
		sr.Identity = identity(info)
		if proc != "" {
			sr.Process, sr.Service = proc, svc
		}
	}
	c.mergeSplit(s)
	c.syncSplits(s, resolved, now)
	c.logQuotas(s)
	// After the resolution above, which walks the cgroup tree when it
	// met a new cgroup.
	c.syncWorkloads()
	s.Overruns, s.Stats.OverrunsDropped, s.Stats.OverrunsQueueDropped = c.rb.Take()
	s.Stats.EarlySamplesDiscarded = c.rb.TakeEarlyDropped()
	return s, nil
}

// Close detaches every source and releases the BPF objects. It is safe to
// call more than once.
func (c *Collector) Close() error {
	c.once.Do(func() {
		if c.cancel != nil {
			c.cancel()
		}
		if c.marker != nil {
			c.marker.Close()
		}
		if c.ue != nil {
			c.ue.Close()
		}
		if c.rb != nil {
			c.rb.Close()
		}
		c.wg.Wait()
		c.mu.Lock()
		c.closed = true
		if c.reader != nil {
			c.reader.close()
		}
		c.mu.Unlock()
		c.objs.close()
		for _, f := range c.closers {
			f()
		}
	})
	return nil
}
