// Package collector loads spanwatch's BPF programs, attaches them to the span
// sources, and turns the kernel's aggregates into snapshots.
//
// Sources:
//
//   - user_events: the collector registers the span event itself (so the
//     tracepoint exists before any application starts), attaches fentry on
//     perf_tp_event (a kprobe where fentry is unavailable) filtered by the
//     event's id, and opens a counting perf event on the tracepoint on every
//     CPU, without which perf_tp_event is never reached on that CPU.
//   - marker: for kernels without user_events, the span SDKs call a marker
//     function; the collector finds binaries that contain it by scanning
//     /proc and uprobes the marker in each, once per file, and lets a
//     binary go when no process has run it for two scans. Executables are
//     checked by /proc/PID/exe: the Go SDK's marker (an ABI0 function, its
//     argument on the stack: uprobe_marker) or libspanwatch's
//     (include/spanwatch.h, a C function, its argument in the first
//     argument register, %rdi on x86-64 and x0 on arm64:
//     uprobe_marker_sysv), found in stripped binaries by the magic after
//     its enable word. Shared objects are checked when a process maps one
//     whose file name contains "spanwatch" (libspanwatch.so, the Python,
//     Node.js and Java SDKs' native parts), through /proc/PID/map_files.
//
// The other span sources are packages of their own (package source):
// source/usdt and source/tracepoint load their BPF objects beside the
// core, sharing its maps, and see the collector only through the
// source.Core that SourceCore lends them: the core's maps (Maps, every
// map bpf/aggregate.h defines), label sets, name resolvers, symbolizer
// anchors, in-flight sampling, and the health counters each snapshot
// carries (Stats.SourceEvents). The collector keeps the core: its maps,
// snapshots, budgets, eviction and overrun records.
//
// Snapshot reads the series array and the histogram cells, mapped into
// the collector's memory, where they changed since the last read (dirty
// marks), and returns the window's counts. The cells are in banks
// (banks.go) the collector creates as the slots in use come near them.
// Overrun records are read from the ring buffer continuously by a goroutine
// that only copies them into a bounded queue (Config.OverrunQueue); one
// worker behind it decodes, symbolizes and delivers them (OnOverrun), so a
// slow consumer costs queued records, counted in
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
