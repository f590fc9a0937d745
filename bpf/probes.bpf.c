// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Load tests of kernel features that a probe must compile the way the
 * objects do (internal/kernel): BPF atomics beyond the plain add, as clang
 * encodes them. probe_atomics is a socket filter run once through
 * BPF_PROG_TEST_RUN with probe_val = 5: the fetch-and-add leaves 6 and
 * returns 5, the compare-and-exchange finds 6 and leaves 9, the exchange
 * finds 9 and leaves 10, the or leaves 11; the program returns 5 + 6 + 9.
 */

#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>

char __license[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} probe_val SEC(".maps");

SEC("socket")
int probe_atomics(void *skb)
{
	__u32 zero = 0;
	__u64 *v = bpf_map_lookup_elem(&probe_val, &zero);

	if (!v)
		return 0;
	__u64 old = __sync_fetch_and_add(v, 1);
	__u64 prev = __sync_val_compare_and_swap(v, 6, 9);
	__u64 x = __sync_lock_test_and_set(v, 10);
	__sync_fetch_and_or(v, 1);
	return old + prev + x;
}
