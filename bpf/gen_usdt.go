package bpf

// The USDT object (usdt.bpf.c) is generated separately from spanwatch.bpf.c:
// the collector loads it beside the core with MapReplacements for the core's
// maps. Regenerate with Debian's clang:
//
//	go generate ./bpf/...
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -D__TARGET_ARCH_x86 -I/usr/include/x86_64-linux-gnu" -target amd64 -type usdt_spec -type usdt_arg_spec -type usdt_source -type usdt_test_record -type usdt_ip_key -type usdt_inflight_key Usdt usdt.bpf.c
