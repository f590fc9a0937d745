// Package ueventsbench measures the emitting thread's time per span over
// user_events against the marker, in one run (issue 28 goal 5), in the
// user_events VM:
//
//	SPANWATCH_VM_QUIET=1 test/vm/run.sh -kernel "$(test/vm/kernel.sh)" ./bench/userevents -- \
//	    -test.run '^$' -test.bench BenchmarkSpanCost -test.benchtime 1x
//
// The test binary starts itself as the application, once per condition
// and round: a process that records spans with the Go SDK (emit.Record:
// one writev of struct span_event per span, as include/spanwatch.h and
// libspanwatch write it, or a call of the nop-first marker function with
// SPANWATCH_EMIT=marker) and prints its thread's time per span. The
// conditions, each run in every round, in an order rotated from round to
// round:
//
//   - none: user_events, nobody listening (the enable bit is 0, no writev);
//   - perf: user_events, a counting perf event on the tracepoint on each
//     CPU and no BPF (the event enabled, every writev delivered);
//   - fentry: user_events, the collector attached as in production (its
//     perf events and its program on fentry/perf_tp_event);
//   - kprobe: the same with collector.Config.ForceKprobe (the
//     collector's force_kprobe setting): the program on kprobe/perf_tp_event,
//     as on kernels that refuse fentry;
//   - marker: SPANWATCH_EMIT=marker, the collector's uprobe on the
//     marker (emit.marker.abi0, whose first instruction is a one-byte nop).
//
// After the rounds, one more run of each BPF condition with the kernel's
// BPF run-time statistics on gives the program's own time per span (the
// statistics cost two clock reads a run, so the timed rounds run without
// them).
//
// Needs root and a kernel with user_events; skips otherwise (fails under
// SPANWATCH_IN_VM=1).
package ueventsbench
