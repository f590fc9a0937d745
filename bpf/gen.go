package bpf

// The generated files (spanwatch_x86_bpfel.go and .o) are committed, so
// building spanwatch needs no clang. Regenerate with Debian's clang:
//
//	go generate ./bpf/...
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -D__TARGET_ARCH_x86 -I/usr/include/x86_64-linux-gnu" -target amd64 -type stats_key -type span_agg -type budget -type span_name -type overrun -type span_event Spanwatch spanwatch.bpf.c
