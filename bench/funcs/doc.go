// Package funcsbench compares spanwatch's function span source with
// bpftrace 0.17's uprobe + uretprobe on the same C function, in one run:
//
//	go test -run '^$' -bench . -benchtime 1x ./bench/funcs/
//
// It builds testdata/loop.c (a tight loop of calls of work(), a small
// function gcc -O2 keeps out of line) and measures, side by side, (a) each
// BPF program's own cost from the kernel's BPF statistics (run_time_ns /
// run_cnt, kernel.bpf_stats_enabled), and (b) the total time each tracer
// adds per call, against the loop run untraced. bpftrace runs the classic
// latency script: @start[tid] = nsecs at the entry (uprobe);
// @h[comm] = hist(nsecs - @start[tid]); delete(@start[tid]) at the return
// (uretprobe). spanwatch runs its collector core with one function source
// on work: a uprobe on its entry and one on its return instruction,
// paired by thread and stack pointer.
//
// BenchmarkTraps says where the added time goes apart from the programs:
// an empty program attached to work() by each kind of probe the two
// tracers use (a uprobe on the entry, one on the return instruction, a
// uretprobe, and the two pairs), each on its own copy of the loop.
//
// BenchmarkGoFuncVsSDK measures a Go function the same way against the Go
// SDK: testdata/goloop's main.work traced by the function source (paired
// by goroutine) against the same work inside a span of emit with the
// agent listening through the marker, both against work untraced, with
// both sources' span counts checked exact. It needs go on PATH to build
// testdata/goloop.
//
// A traced call costs tens of microseconds on the machines this was
// written on (each uprobe trap, under nested virtualization), so a run
// of 200,000 calls takes seconds and the comparison runs 5 trios, not 9
// as bench/usdt does.
//
// Needs root, cc and bpftrace; skips with the reason otherwise. Linux on
// x86-64 only (the function source's pairing is tested there so far).
package funcsbench
