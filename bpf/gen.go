package bpf

// The generated files (spanwatch_x86_bpfel.go and .o, hist_table.h) are
// committed, so building spanwatch needs no clang. Regenerate with Debian's
// clang:
//
//	go generate ./bpf/...
//
// The enums listed with -type are the constants C and Go share (counter
// indexes, sources, flags, sizes): bpf2go writes them as Go constants, so
// the two sides cannot drift. -mcpu=v3 for BPF atomics (kernel 5.12+).
//
//go:generate go run ./internal/gentables
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -D__TARGET_ARCH_x86 -I/usr/include/x86_64-linux-gnu" -target amd64 -type series_key -type series_slot -type budget -type budget_glob -type span_name -type overrun -type cell_chunk -type core_state -type counter -type span_source -type series_kind -type budget_flags -type slot_state -type core_sizes -type span_event_sizes -type span_status -type span_flags Spanwatch spanwatch.bpf.c
