package bpf

// The generated files (spanwatch_bpfel.go and .o, hist_table.h) are
// committed, so building spanwatch needs no clang. Regenerate with Debian's
// clang:
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
// -target bpfel gives the Go files every little-endian architecture, so
// that the code builds and vets on arm64 too; the objects are compiled
// for x86-64 all the same (-D__TARGET_ARCH_x86: pt_regs), and CheckArch
// refuses to load them anywhere else.
//
//go:generate go run ./internal/gentables
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -D__TARGET_ARCH_x86 -I/usr/include/x86_64-linux-gnu" -target bpfel -type series_key -type series_slot -type budget -type budget_key -type budget_glob -type span_name -type overrun -type core_state -type counter -type span_source -type series_kind -type budget_flags -type slot_state -type core_sizes -type span_event_sizes -type span_status -type span_flags -type budget_bits Spanwatch spanwatch.bpf.c
