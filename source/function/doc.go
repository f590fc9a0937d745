// Package function is the span source for functions of any binary:
// each call of a traced function is a span named after it, measured by a
// uprobe on its first instruction and one on each of its return
// instructions (internal/funcs finds them), never a uretprobe. It loads
// bpf/funcs.bpf.c beside the collector's core, so the spans reach the same
// series, budgets and overrun records as every other source.
//
// So far: functions that internal/funcs finds traceable in binaries that
// are not Go, paired by thread and stack pointer (C, C++, Rust), on the
// full core (kernel 5.17+) with BPF attach cookies (5.15+); tested on
// x86-64. Go binaries are refused: their goroutines move between threads
// and their stacks move, so their calls must be paired by goroutine. The
// rule file has no section for this source yet. Linux only.
package function
