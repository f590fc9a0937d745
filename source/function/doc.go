// Package function is the span source for functions of any binary:
// each call of a traced function is a span named after it, measured by a
// uprobe on its first instruction and one on each of its return
// instructions (internal/funcs finds them), never a uretprobe. It loads
// bpf/funcs.bpf.c beside the collector's core, so the spans reach the same
// series, budgets and overrun records as every other source.
//
// So far: x86-64 and arm64 functions that internal/funcs finds traceable,
// paired by thread and stack pointer (C, C++, Rust; not yet Go, whose
// goroutines move between threads and whose stacks move), on the full core
// (kernel 5.17+) with BPF attach cookies (5.15+). Linux only.
package function
