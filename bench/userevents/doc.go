// Package ueventsbench measures the emitting thread's time per span over
// user_events against the marker, in one run (issue 28 goal 5), in the
// user_events VM:
//
//	SPANWATCH_VM_QUIET=1 test/vm/run.sh -kernel "$(test/vm/kernel.sh)" ./bench/userevents -- \
//	    -test.run TestApplication -test.bench BenchmarkSpanCost -test.benchtime 1x \
//	    -uevbench.spans 10000 -uevbench.rounds 15
//
// The test binary starts itself as the application, once per run: a
// process that records spans with the Go SDK (emit.Record: one writev of
// struct span_event per span, the index and the event in two iovecs, as
// include/spanwatch.h and libspanwatch write it; or, with
// SPANWATCH_EMIT=marker, a call of the marker function whose first
// instruction is a one-byte nop) on one locked thread, and prints the
// thread's CPU time and the wall time per span. A round is three blocks,
// in an order rotated from round to round; each block sets its listener up
// once and runs the application four times, its two modes alternating:
//
//   - no collector: none (user_events, nobody listening: the enable bit is
//     0 and no writev is made) and perf (a counting perf event on the
//     span event's tracepoint on each CPU, no BPF, opened for the run);
//   - the collector as in production (the user_events source and the
//     marker; its program on fentry/perf_tp_event): fentry (user_events)
//     and marker (the marker uprobed);
//   - the same collector with ForceKprobe (force_kprobe in the agent's
//     configuration; kernels that refuse fentry get this path): kprobe
//     (its program on kprobe/perf_tp_event) and marker_k.
//
// Ratios are taken within a round; their median and range over the
// rounds are printed. After the rounds, one more run of each BPF mode with
// the kernel's BPF run-time statistics on gives the program's own time per
// span (the statistics cost two clock reads a run, so the timed rounds run
// without them).
//
// Needs root and a kernel with user_events; skips otherwise (fails under
// SPANWATCH_IN_VM=1).
package ueventsbench
