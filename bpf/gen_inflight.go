package bpf

// The in-flight sampler (inflight.bpf.c) is generated separately: the
// collector loads it beside the core, with MapReplacements for the core's
// overruns, counters, inflight_exec and inflight_gprocs maps.
// Regenerate with Debian's clang:
//
//	go generate ./bpf/...
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu" -target amd64,arm64 -type inflight_target -type inflight_tspan -type inflight_slot -type usdt_task_spans -type task_span -type inflight_stack -type inflight_exec_key -type inflight_open -type inflight_candidate -type inflight_sizes -type inflight_watch_sizes -type inflight_target_flags -type overrun_status Inflight inflight.bpf.c
