// Package collector loads spanwatch's BPF programs, attaches them to the span
// sources, and turns the kernel's aggregates into snapshots.
//
// Span sources are packages of their own (package source), and see the
// collector only through the source.Core that SourceCore lends them: the
// core's maps (Maps, every map bpf/aggregate.h defines), the core
// object's own source programs, label sets, name resolvers, symbolizer
// anchors, in-flight sampling, and the health counters each snapshot
// carries (Stats.SourceEvents, Stats.Sources). Two are built in to the
// core's object and attached by New as Config.Sources chooses:
// source/sdkevent (the SDKs' user_event, on kernels with user_events) and
// source/marker (the SDKs' marker function, uprobed in every binary that
// has it, on every kernel). The agent attaches the configured ones
// (source/usdt, source/tracepoint), which load their BPF objects beside
// the core, sharing its maps. The collector keeps the core: its maps,
// snapshots, budgets, eviction and overrun records.
//
// Snapshot reads the series array and the histogram cells, mapped into
// the collector's memory, where they changed since the last read (dirty
// marks), and returns the window's counts. The cells are in banks
// (banks.go) the collector creates as the slots in use come near them.
// Overrun records are read by the overrun pipeline, package
// collector/overrun: a goroutine reads the ring buffer continuously and
// only copies records into a bounded queue (Config.OverrunQueue); one
// worker behind it decodes, joins, symbolizes and delivers them
// (OnOverrun), so a slow consumer costs queued records, counted in
// Stats.OverrunsQueueDropped, and never backs up into the ring buffer.
//
// Needs Linux 5.10+ and CAP_BPF + CAP_PERFMON (or root); CAP_SYS_PTRACE
// to read other users' /proc/PID/exe. The BPF objects are chosen at load
// from the kernel's features (internal/kernel): the full ones, or the
// compat ones on 5.10 to 5.16; the collector logs what the kernel gets
// in one line (msg=kernel), and CheckKernel is `spanwatch kernel`. The
// marker's uprobes attach as uprobe_multi links (6.6+); on older kernels,
// or with Config.NoUprobeMulti, through the perf_uprobe PMU, which needs
// CAP_SYS_ADMIN.
//
// The maps are sized at load from Config (the agent's memory budget plans
// them with EstimateMapBytes). On the full objects from Linux 6.1 the
// hashes that fill with series, names and workloads are created with
// BPF_F_NO_PREALLOC (GrowsWithUse; not on PREEMPT_RT kernels): the kernel
// charges their elements as they are inserted; everything else is
// allocated whole at load (docs/memory.md).
package collector
