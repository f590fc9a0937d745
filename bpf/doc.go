// Package bpf holds spanwatch's eBPF programs and their generated loaders.
//
// spanwatch.bpf.c holds the span sources for applications using the span
// SDK (user_events through fentry or a kprobe on perf_tp_event, and the
// SDK's marker uprobe); aggregate.h holds the aggregation core every source
// calls: one series per span name, cgroup, label values and kind, in a
// series array shared by all CPUs and updated with atomic instructions,
// with a Prometheus native (schema 6) latency histogram kept in a table of
// cells shared by all series; budgets, names, the loss counters and the
// overrun ring buffer. The collector maps the series array and the cells
// into its memory and reads only what changed (dirty bitmaps);
// docs/series.md says why. span_event.h is the payload layout that emit/
// mirrors in Go (through internal/spanevent for its sizes).
//
// The objects come in two builds (internal/kernel chooses at load time):
// the full ones, for kernels with BPF atomics (5.12+), bpf_loop (5.17+) and
// task storage, and the compat ones (gen_compat.go, SPANWATCH_COMPAT), for
// 5.10 to 5.16, which do with the plain atomic add and bounded loops
// (aggregate.h says what differs). Both need a ring buffer (5.8+), BTF
// for fentry (5.5+, the kprobe is the fallback), and CAP_BPF with
// CAP_PERFMON, or root. Each is built for x86-64 and for arm64 (the
// layout of struct pt_regs differs, and where a goroutine's g is kept):
// the Go side builds on 386, amd64 and arm64, and CheckArch refuses to
// load them anywhere but amd64 and arm64.
//
// The values C and Go share are C enums that bpf2go writes as Go constants
// (gen.go); Go code uses the generated constants, and the few Go-only
// mirrors (internal/eventheader, internal/srcspec, internal/tpsource) have
// tests that compare them with the generated values.
package bpf
