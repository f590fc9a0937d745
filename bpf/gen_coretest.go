package bpf

// The core's test object (coretest.bpf.c), loaded by the collector's tests
// and benchmarks only. Regenerate with Debian's clang:
//
//	go generate ./bpf/...
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu" -target amd64,arm64 -type coretest_in -type coretest_sizes Coretest coretest.bpf.c
