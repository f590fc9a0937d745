package bpf

// The generated files (spanwatch_x86_bpfel.go and .o,
// spanwatch_arm64_bpfel.go and .o, hist_table.h) are committed, so
// building spanwatch needs no clang. Regenerate with Debian's clang:
//
//	go generate ./bpf/...
//
// The enums listed with -type are the constants C and Go share (counter
// indexes, sources, flags, sizes, bit layouts): bpf2go writes them as Go
// constants, so the two sides cannot drift. A value C keeps as a #define
// is one Go would have to copy by hand: make it an enum member instead,
// keep the enum in BTF (the unused_* pointers at the end of each .bpf.c)
// and list it here. -mcpu=v3 for BPF atomics (kernel 5.12+).
//
// -target amd64,arm64 builds each object twice, once per architecture:
// bpf2go defines __TARGET_ARCH_x86 or __TARGET_ARCH_arm64, which choose
// the layout of struct pt_regs (vmlinux_min.h) that the uprobe and USDT
// programs read through libbpf's PT_REGS_* macros, and where the
// in-flight samplers find a goroutine (inflight.h). The x86 files build
// for 386 and amd64, the arm64 ones for arm64 only; CheckArch refuses to
// load anything on 386. -I/usr/include/x86_64-linux-gnu is there for
// <asm/types.h> (linux/types.h includes it), for both targets: the BPF
// programs use only the fixed-size integer types from it, which are
// asm-generic's int-ll64.h on every 64-bit architecture.
//
//go:generate go run ./internal/gentables
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu" -target amd64,arm64 -type series_key -type series_slot -type budget -type budget_key -type budget_glob -type span_name -type overrun -type core_state -type counter -type span_source -type series_kind -type budget_flags -type slot_state -type core_sizes -type span_event_sizes -type span_status -type span_flags -type budget_bits Spanwatch spanwatch.bpf.c
