package bpf

// The compat objects: spanwatch.bpf.c, usdt.bpf.c and coretest.bpf.c built
// with SPANWATCH_COMPAT, for kernels without BPF atomics beyond a plain add
// (before 5.12) or without bpf_loop (before 5.17): Linux 5.10 to 5.16 (see
// aggregate.h for what the core does differently). The collector chooses
// them at load time from feature probes (internal/kernel); their maps and
// programs have the objects' names, so the loaders assign them to the
// same Go types. Regenerate with Debian's clang:
//
//	go generate ./bpf/...
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -DSPANWATCH_COMPAT -I/usr/include/x86_64-linux-gnu" -target amd64,arm64 SpanwatchCompat spanwatch.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -DSPANWATCH_COMPAT -I/usr/include/x86_64-linux-gnu" -target amd64,arm64 UsdtCompat usdt.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -DSPANWATCH_COMPAT -I/usr/include/x86_64-linux-gnu" -target amd64,arm64 CoretestCompat coretest.bpf.c
