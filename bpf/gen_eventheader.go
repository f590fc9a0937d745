package bpf

// The EventHeader object (eventheader.bpf.c) is generated separately: the
// collector loads it beside the core, with MapReplacements for the core's
// maps, only when EventHeader sources are configured. Regenerate with
// Debian's clang:
//
//	go generate ./bpf/...
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu" -target amd64,arm64 -type eh_mapping -type eh_tracepoint -type eh_test_in -type eh_reason -type tp_map -type src_pred -type src_labels -type eh_kind -type eh_count -type eh_span_field -type eh_mapping_sizes -type eh_limits -type eh_format -type eh_encoding -type tp_role -type src_index Eventheader eventheader.bpf.c
