// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Spans of functions of any binary, without uretprobes: func_entry is a
 * uprobe on a function's first instruction, func_return a uprobe on each
 * of its return instructions (internal/funcs finds them). A uretprobe
 * rewrites the return address on the user stack; these read nothing and
 * write nothing there.
 *
 * A C, C++ or Rust call pairs by thread, traced function and stack
 * pointer: at the first instruction the stack pointer points at the
 * return address on x86-64 (the caller's stack pointer on arm64), and at
 * a return instruction it is back at the same place, so recursion and
 * nesting pair right. An entry whose return never runs (longjmp, an
 * exception, a thread that exits) is replaced by the next call at the
 * same place (counted) or evicted from the LRU hash.
 *
 * A Go call (func_source.go set) pairs by goroutine instead: a goroutine
 * may return on another thread than it entered on, and its stack is
 * copied elsewhere when it grows or shrinks. Go's register ABI (Go 1.17+)
 * keeps the current g in R14 on x86-64 (X28 on arm64) at a function's
 * entry and at each return; g's first field is its stack {lo, hi}. The
 * key is (g, traced function, stack.hi - SP): the depth from the stack's
 * top survives a copy. g.stack is read from user memory and SP must lie
 * in [lo, hi), else the event is dropped and counted (no_goroutine):
 * nothing pairs on a register that does not hold a g. For a Go function
 * that checks its stack, the entry probe is after that check (internal/
 * funcs), so a call that grows its stack and restarts is entered once.
 * A call a recovered panic unwinds leaves its entry behind until the next
 * call at the same (g, function, depth) replaces it (counted) or the LRU
 * evicts it; so does a call of an exited goroutine whose g is reused.
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
	FUNC_COUNTER_NO_GOROUTINE = 2, /* Go events dropped: g's stack unreadable, or SP outside it */
	FUNC_COUNTER_MAX = 4,
};

/* One traced function: mirrored in source/function. */
struct func_source {
	char name[SPAN_NAME_LEN]; /* the span name, NUL-padded */
	__u64 name_id;		  /* span_name_id(name), computed by the collector */
	__u32 go;		  /* a Go function (register ABI): pair by goroutine */
	__u32 pad;
};

/* A call in progress: (thread, SP) for C, (g, stack.hi - SP) for Go. */
struct func_open_key {
	__u64 sp;
	__u64 thread;
	__u32 source;
	__u32 pad;
};

/* Go's g starts with its stack bounds (runtime/runtime2.go: g.stack). */
struct func_go_stack {
	__u64 lo;
	__u64 hi;
};

#if defined(__TARGET_ARCH_x86)
#define FUNC_GO_G(ctx) (__PT_REGS_CAST(ctx)->r14)
#elif defined(__TARGET_ARCH_arm64)
#define FUNC_GO_G(ctx) (__PT_REGS_CAST(ctx)->regs[28])
#endif

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

/* open_key fills in k for the call the probe sees, and returns the
 * traced function, or NULL when the event is to be dropped. */
static __always_inline struct func_source *open_key(struct pt_regs *ctx, struct func_open_key *k)
{
	struct func_source *src;
	struct func_go_stack st;
	__u64 sp = PT_REGS_SP(ctx), g;

	k->source = (__u32)bpf_get_attach_cookie(ctx);
	k->pad = 0;
	src = bpf_map_lookup_elem(&func_sources, &k->source);
	if (!src)
		return NULL;
	if (!src->go) {
		k->sp = sp;
		k->thread = (__u32)bpf_get_current_pid_tgid();
		return src;
	}
	g = FUNC_GO_G(ctx);
	if (!g || bpf_probe_read_user(&st, sizeof(st), (void *)g) || st.lo > sp || sp >= st.hi) {
		func_count(FUNC_COUNTER_NO_GOROUTINE);
		return NULL;
	}
	k->sp = st.hi - sp;
	k->thread = g;
	return src;
}

SEC("uprobe")
int func_entry(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	struct func_open_key k;

	if (!open_key(ctx, &k))
		return 0;
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

	src = open_key(ctx, &k);
	if (!src)
		return 0;
	start = bpf_map_lookup_elem(&func_open, &k);
	if (!start) {
		func_count(FUNC_COUNTER_UNPAIRED);
		return 0;
	}
	start_ns = *start;
	bpf_map_delete_elem(&func_open, &k);
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
