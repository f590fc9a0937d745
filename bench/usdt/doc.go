// Package usdtbench compares spanwatch's USDT span source with bpftrace 0.17
// on the same start/done probe pair, in one run:
//
//	go test -bench . -benchtime 1x ./bench/usdt/
//
// It builds testdata/loop.c (a tight loop of bench:start/bench:done USDT pairs) and
// measures, side by side, (a) each BPF program's own cost from the kernel's
// BPF statistics (run_time_ns / run_cnt, kernel.bpf_stats_enabled), and
// (b) the total time each tracer adds per probe hit, against the loop run
// uninstrumented. bpftrace runs the classic latency script: @s[tid] = nsecs
// on start; hist(nsecs - @s[tid]); delete(@s[tid]) on done. spanwatch runs
// its collector core with one USDT source pairing the same probes by thread.
// A fourth copy runs under the floor tracer, a program that reads the
// clock (bpf_ktime_get_ns) and does nothing else at both probes: what any
// tracer timing spans pays before its own work. The ratios are given as
// they are and above the floor, because on some machines the floor is most
// of both tracers' cost (a clock read from a uprobe took 150-230 ns on a
// PVM guest, 30 ns in a warm loop): there the plain ratios tend to 1 for
// reasons that are not the tracers'.
//
// BenchmarkUprobeFloor measures the pieces on the machine it runs on: an
// empty program, helper calls, clock reads, cache lines and pages, each as
// a uprobe on the loop and warm in BPF_PROG_TEST_RUN.
//
// BenchmarkUSDTNameRead compares, the same way, the sleepable program that
// reads a start probe's name argument (faulting its page in when absent)
// with the ordinary one, on a resident page and on an absent one.
//
// Needs root, cc with sys/sdt.h (systemtap-sdt-dev) and bpftrace; skips
// with the reason otherwise.
package usdtbench
