package bpf

// The function spans' object (funcs.bpf.c), loaded beside the core with
// MapReplacements for the core's maps by source/function. Regenerate with
// Debian's clang:
//
//	go generate ./bpf/...
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu" -target amd64,arm64 -type func_source -type func_open_key -type func_sizes -type func_counter -type func_operand_kind -type func_call -type func_operand -type src_pred -type src_labels -type src_counter Funcs funcs.bpf.c
