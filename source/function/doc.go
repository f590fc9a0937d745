// Package function is the span source for functions of any binary:
// each call of a traced function is a span named after it, measured by a
// uprobe on its entry and one on each of its return instructions
// (internal/funcs finds them), never a uretprobe. It loads
// bpf/funcs.bpf.c beside the collector's core, so the spans reach the same
// series, budgets and overrun records as every other source.
//
// Calls of C, C++ and Rust functions pair by thread and stack pointer.
// Calls of Go functions pair by goroutine: the g that Go's register ABI
// keeps in R14 (R28 on arm64), and the depth from the top of that
// goroutine's stack, so that a goroutine that moves to another thread or
// whose stack is copied still pairs; the entry probe of a Go function
// that checks its stack is placed after the check, so a call that grows
// its stack is entered once. Go binaries built before Go 1.17 (x86-64)
// or Go 1.18 (arm64), the register ABI's, are refused.
//
// A call's spans may be labelled by its arguments, read at the entry by
// the function's ABI (the System V ABI's registers for C, AAPCS64's on
// arm64, Go's register ABI for Go; strings as a C string or a pointer
// and a length) and kept
// with the open call, and marked as errors by a predicate over its
// results at the return, in the vocabulary USDT sources use
// (internal/srcspec): labels: {status: arg0.s32, route: {ptr: arg1}},
// error: "ret.s32 == -1" (args.go; docs/functions.md).
//
// A target names its binary by path (binary:), or by the processes
// running it (process:, a glob over the executable's file name): those
// are found by a scan of /proc (source.Processes) when the source
// attaches and every Core.ScanInterval after, and each file they run is
// opened through /proc/PID/exe and attached once, by device and inode,
// however many processes run it and in whatever mount namespace; a file
// no matching process ran for source.ReleaseScans scans is let go.
//
// Needs the full core (kernel 5.17+) and BPF attach cookies on uprobes
// (5.15+). Tested on x86-64 (every test, on the host), and on arm64 in
// the VM (Debian's 6.1 and 6.12 arm64 kernels under qemu, test/vm
// matrix.sh's arm64 lanes): TestExactCounts, TestArgsC, TestParamsC,
// TestArgsGo, TestParamsGo and TestGoStress (-short), with programs
// cross-built before boot (test/vm/cprograms.txt, goprograms.txt). The
// rule file declares it under sources: functions:. Linux only.
package function
