package bpf

// The shared source vocabulary's test object (sourcetest.bpf.c: source.h's
// predicates and label caps), loaded by internal/srcspec's tests only.
// Regenerate with Debian's clang:
//
//	go generate ./bpf/...
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu" -target amd64,arm64 -type sourcetest_in -type sourcetest_out -type src_pred -type src_term -type src_operands -type src_labels -type src_sizes -type src_op -type src_counter Sourcetest sourcetest.bpf.c
