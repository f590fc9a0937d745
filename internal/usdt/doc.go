// Package usdt finds USDT (systemtap SDT) probes in ELF files and attaches
// eBPF programs to them, the way libbpf does it, in pure Go.
//
// Probe discovery reads the .note.stapsdt notes of an executable or shared
// library (Open, ParseNotes): provider, name, call-site address, semaphore
// and the argument string of every call site, with the call site and the
// semaphore translated to the file offsets that uprobes and their reference
// counters (semaphores, kernel 4.20+) take.
//
// Each call site's argument string ("-4@%eax 8@-16(%rbp) -8@$5" on x86-64,
// "8@x0 4@[sp, 16]" on arm64) is parsed into argument specs (ParseArgs):
// where the value lives (a register, memory at a register plus an offset, or
// a constant), its size and its signedness. The specs are written into a BPF
// array map, one per call site, and the BPF helper usdt_arg() in
// bpf/usdt.h fetches argument N from the probe's registers or user memory.
// The spec id travels in the uprobe's attach cookie (kernel 5.15+); on older
// kernels an instruction-pointer-to-spec hash map is the fallback, keyed by
// a site's place in the executable's code (the same in every process, PIE
// too), or by process for sites attached in one (pid:).
//
// Spans come from probes as declared in a config file's sources: section
// (DecodeSources, which package config calls for the usdt: list, and which
// also checks sources against binaries present on the machine): a
// start/end pair matched in the kernel by thread (a stack of
// open spans per thread, so nesting and recursion pair right) or by an
// argument, a single probe that carries a duration (or none), or an
// argument metric. Error predicates, labels and metric values come from
// the shared vocabulary of internal/srcspec and bpf/source.h. Span names
// passed as string arguments are read by sleepable programs that can fault
// their page in where the kernel allows it, and through /proc/PID/mem by
// the Tracer elsewhere. Each finished span or value is handed to the
// aggregation core in bpf/aggregate.h, so budgets, rules, stacks and
// webhooks treat it like any other. docs/sources.md documents every option.
package usdt
