package bpf

// The feature probes' object (probes.bpf.c), loaded by internal/kernel to
// test what the kernel does with instructions as clang encodes them.
// Regenerate with Debian's clang:
//
//	go generate ./bpf/...
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu" -target amd64,arm64 Probes probes.bpf.c
