// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Spans of functions of any binary, without uretprobes: func_entry is a
 * uprobe on a function's first instruction, func_return a uprobe on each
 * of its return instructions (internal/funcs finds them). A uretprobe
 * rewrites the return address on the user stack; these read nothing and
 * write nothing there.
 *
 * An entry and a return pair by thread, traced function and stack
 * pointer: at the first instruction the stack pointer points at the
 * return address on x86-64 (the caller's stack pointer on arm64), and at
 * a return instruction it is back at the same place, so recursion and
 * nesting pair right. An entry whose return never runs (longjmp, an
 * exception, a thread that exits) is replaced by the next call at the
 * same place (counted) or evicted from the LRU hash.
 *
 * The attach cookie is the source's index in func_sources: kernel 5.15+.
 * This object includes aggregate.h and is loaded with MapReplacements for
 * the core's maps, so function spans feed the same aggregates as every
 * source.
 */

#include "aggregate.h"

char __license[] SEC("license") = "Dual BSD/GPL";

enum func_sizes {
	FUNC_MAX_SOURCES = 4096, /* traced functions */
	FUNC_MAX_OPEN = 65536,	 /* calls in progress, all threads */
};

/* Counters of func_counters. */
enum func_counter {
	FUNC_COUNTER_UNPAIRED = 0, /* returns without an entry: attached mid-call, or evicted */
	FUNC_COUNTER_REPLACED = 1, /* entries replaced by a call at the same place: their return never ran */
	FUNC_COUNTER_MAX = 4,
};

/* One traced function: mirrored in source/function. */
struct func_source {
	char name[SPAN_NAME_LEN]; /* the span name, NUL-padded */
	__u64 name_id;		  /* span_name_id(name), computed by the collector */
};

struct func_open_key {
	__u64 sp;
	__u32 tid;
	__u32 source;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FUNC_MAX_SOURCES);
	__type(key, __u32);
	__type(value, struct func_source);
} func_sources SEC(".maps");

/* Calls in progress: their start time. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, FUNC_MAX_OPEN);
	__type(key, struct func_open_key);
	__type(value, __u64);
} func_open SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FUNC_COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} func_counters SEC(".maps");

static __always_inline void func_count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&func_counters, &idx);
	if (c)
		__sync_fetch_and_add(c, 1);
}

static __always_inline void open_key(struct pt_regs *ctx, struct func_open_key *k)
{
	k->sp = PT_REGS_SP(ctx);
	k->tid = (__u32)bpf_get_current_pid_tgid();
	k->source = (__u32)bpf_get_attach_cookie(ctx);
}

SEC("uprobe")
int func_entry(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	struct func_open_key k;

	open_key(ctx, &k);
	if (bpf_map_update_elem(&func_open, &k, &now, BPF_NOEXIST)) {
		func_count(FUNC_COUNTER_REPLACED);
		bpf_map_update_elem(&func_open, &k, &now, BPF_ANY);
	}
	return 0;
}

SEC("uprobe")
int func_return(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	struct func_open_key k;
	struct func_source *src;
	struct agg_in in = {};
	__u64 *start, start_ns;

	open_key(ctx, &k);
	start = bpf_map_lookup_elem(&func_open, &k);
	if (!start) {
		func_count(FUNC_COUNTER_UNPAIRED);
		return 0;
	}
	start_ns = *start;
	bpf_map_delete_elem(&func_open, &k);
	src = bpf_map_lookup_elem(&func_sources, &k.source);
	if (!src)
		return 0;
	in.name = src->name;
	in.key.name_id = src->name_id;
	in.key.cgroup_id = bpf_get_current_cgroup_id();
	in.key.kind = SERIES_SPAN;
	in.value = now - start_ns;
	in.source = SOURCE_FUNCTIONS;
#ifdef SW_WALK_USER_FRAMES
	in.uregs = ctx;
#endif
	series_aggregate(ctx, &in);
	return 0;
}

const struct func_source *unused_func_source __attribute__((unused));
const struct func_open_key *unused_func_open_key __attribute__((unused));
const enum func_sizes *unused_func_sizes __attribute__((unused));
const enum func_counter *unused_func_counter __attribute__((unused));
