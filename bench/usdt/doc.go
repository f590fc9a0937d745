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
//
// BenchmarkUSDTNameRead compares, the same way, the sleepable program that
// reads a start probe's name argument (faulting its page in when absent)
// with the ordinary one, on a resident page and on an absent one.
//
// Needs root, cc with sys/sdt.h (systemtap-sdt-dev) and bpftrace; skips
// with the reason otherwise.
package usdtbench
