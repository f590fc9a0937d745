/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The aggregation core: every span source (user_events, the Go SDK's marker
 * uprobe, USDT probes) builds a struct span_event and calls span_aggregate().
 *
 * The maps are defined here. An object that includes this header and is
 * loaded beside spanwatch.bpf.c must be loaded with MapReplacements for
 * span_stats, budgets, budget_gen, names, overruns, counters and zero_stats,
 * so that every
 * source feeds the same aggregates.
 */
#ifndef SPANWATCH_AGGREGATE_H
#define SPANWATCH_AGGREGATE_H

#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "span_event.h"

/* Log-linear histogram: must match snapshot/histogram.go. */
#define HIST_SUB_BITS 3
#define HIST_SUB (1 << HIST_SUB_BITS)
#define HIST_MAX_EXP 37
#define HIST_BUCKETS ((HIST_MAX_EXP - HIST_SUB_BITS + 2) * HIST_SUB) /* 288 */

#define MAX_USTACK 127 /* the kernel's default perf_event_max_stack */
#define MAX_KSTACK 64

/* Span sources, as reported in overrun records. */
#define SOURCE_USER_EVENTS 1
#define SOURCE_MARKER 2
#define SOURCE_USDT 3

/* Budget flags. */
#define BUDGET_CAPTURE_KERNEL 1 /* capture the kernel stack as well */

/* Indexes of the counters map. */
enum counter {
	COUNTER_EVENTS = 0,	  /* unused: the collector sums the series' counts */
	COUNTER_RINGBUF_DROPS = 1, /* overrun records lost: ring buffer full */
	COUNTER_STATS_FULL = 2,	  /* events lost: no room for a new series */
	COUNTER_SHORT = 3,	  /* payloads shorter than struct span_event */
	COUNTER_READ_ERRORS = 4,  /* payloads that could not be read */
	COUNTER_MAX = 8,
};

struct stats_key {
	__u64 name_id;
	__u64 cgroup_id;
};

struct span_agg {
	__u64 count;
	__u64 errors;
	__u64 sum_ns;
	__u64 max_ns;
	__u64 over_budget;
	/* This CPU's copy of the series' budget, valid while budget_gen
	 * equals the budget_gen map: saves a hash lookup per span. */
	__u64 budget_ns;
	__u32 budget_flags;
	__u32 budget_gen;
	__u64 hist[HIST_BUCKETS];
};

struct budget {
	__u64 budget_ns;
	__u32 flags;
	__u32 _pad;
};

struct span_name {
	char name[SPAN_NAME_LEN];
};

struct overrun {
	__u64 ts_ns; /* CLOCK_MONOTONIC (bpf_ktime_get_ns) when the span ended */
	__u64 name_id;
	__u64 cgroup_id;
	__u64 duration_ns;
	__u64 budget_ns;
	__u64 start_ns;
	__u32 pid;
	__u32 tid;
	__u32 status;
	__u32 source;
	__s32 ustack_len; /* bytes of ustack filled, or -errno */
	__s32 kstack_len; /* bytes of kstack filled, 0 when not asked, or -errno */
	__u8 trace_id[SPAN_TRACE_ID_LEN];
	__u8 span_id[SPAN_SPAN_ID_LEN];
	char comm[16];
	char name[SPAN_NAME_LEN];
	__u64 ustack[MAX_USTACK];
	__u64 kstack[MAX_KSTACK];
};

/*
 * Per-CPU aggregates, preallocated: a non-preallocated per-CPU hash refills
 * its free lists asynchronously, so a burst of new series fails with ENOMEM
 * (seen from a few hundred inserts in a row). Memory is max_entries x
 * sizeof(struct span_agg) x CPUs; the collector sizes max_entries to the
 * CPU count before loading (collector.Config.MaxSeries).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct stats_key);
	__type(value, struct span_agg);
} span_stats SEC(".maps");

/* A zeroed value to insert new series from: too large for the BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct span_agg);
} zero_stats SEC(".maps");

/* name_id -> budget, written by the collector from the rule file. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct budget);
} budgets SEC(".maps");

/*
 * The budgets' generation: the collector adds one after every change to
 * budgets, so series re-read their budget (an array lookup, which the
 * verifier inlines, instead of a hash lookup per span).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} budget_gen SEC(".maps");

/* name_id -> name, written here the first time a series appears. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct span_name);
} names SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} overruns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);
	if (c)
		*c += 1;
}

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

static __always_inline __u32 hist_index(__u64 v)
{
	if (v < HIST_SUB)
		return v;
	__u32 e = log2_u64(v);
	if (e > HIST_MAX_EXP)
		return HIST_BUCKETS - 1;
	return (e - HIST_SUB_BITS + 1) * HIST_SUB + ((v >> (e - HIST_SUB_BITS)) & (HIST_SUB - 1));
}

/*
 * span_name_id hashes the name up to its first NUL (all 64 bytes when there
 * is none) and zeroes the bytes after it, so the same name always gets the
 * same id whatever garbage follows its terminator. Must match NameID in
 * snapshot/nameid.go.
 */
static __always_inline __u64 span_name_id(struct span_event *ev)
{
	__u64 h = 0xcbf29ce484222325ULL;
	__u64 *w = (__u64 *)ev->name;
	int done = 0;

#pragma unroll
	for (int i = 0; i < SPAN_NAME_LEN / 8; i++) {
		__u64 x = w[i];
		if (done) {
			w[i] = 0;
			continue;
		}
		/* Lowest byte that is zero: exact for the lowest one. */
		__u64 z = (x - 0x0101010101010101ULL) & ~x & 0x8080808080808080ULL;
		if (z) {
			__u64 lowest = z & (~z + 1);
			x &= (lowest >> 7) - 1;
			w[i] = x;
			done = 1;
		}
		h ^= x;
		h *= 0x100000001b3ULL;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h ? h : 1;
}

/*
 * span_aggregate_key adds one finished span to the aggregates of name_id and
 * cgroup_id (the cgroup v2 id of the task the span ran in) and, when the span
 * is slower than its budget, sends an overrun record with the current
 * thread's user stack. ctx is the program's context (for bpf_get_stack).
 * name_id must be span_name_id(ev), computed on this very ev->name (which it
 * leaves NUL-padded): sources that know it and the cgroup id more cheaply
 * than span_name_id() and the helper (usdt.bpf.c's fast path) call this
 * directly; the others call span_aggregate().
 */
static __always_inline void span_aggregate_key(void *ctx, struct span_event *ev, __u32 source, __u64 name_id,
					       __u64 cgroup_id)
{
	struct stats_key key = {};
	struct span_agg *st;
	__u64 d = ev->duration_ns;

	key.name_id = name_id;
	key.cgroup_id = cgroup_id;

	st = bpf_map_lookup_elem(&span_stats, &key);
	if (!st) {
		__u32 zero = 0;
		struct span_agg *z = bpf_map_lookup_elem(&zero_stats, &zero);
		if (!z)
			return;
		/* EEXIST from a racing insert on another CPU is fine: look up. */
		bpf_map_update_elem(&span_stats, &key, z, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&span_stats, &key);
		if (!st) {
			count(COUNTER_STATS_FULL);
			return;
		}
		bpf_map_update_elem(&names, &key.name_id, ev->name, BPF_NOEXIST);
	}

	st->count++;
	if (ev->status != SPAN_STATUS_OK)
		st->errors++;
	st->sum_ns += d;
	if (d > st->max_ns)
		st->max_ns = d;
	__u32 idx = hist_index(d);
	if (idx < HIST_BUCKETS)
		st->hist[idx]++;

	__u32 zero = 0;
	__u32 *gen = bpf_map_lookup_elem(&budget_gen, &zero);
	if (gen && st->budget_gen != *gen) {
		struct budget *b = bpf_map_lookup_elem(&budgets, &key.name_id);
		st->budget_ns = b ? b->budget_ns : 0;
		st->budget_flags = b ? b->flags : 0;
		st->budget_gen = *gen;
	}
	if (!st->budget_ns || d <= st->budget_ns)
		return;
	st->over_budget++;

	struct overrun *r = bpf_ringbuf_reserve(&overruns, sizeof(*r), 0);
	if (!r) {
		count(COUNTER_RINGBUF_DROPS);
		return;
	}
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	r->ts_ns = bpf_ktime_get_ns();
	r->name_id = key.name_id;
	r->cgroup_id = key.cgroup_id;
	r->duration_ns = d;
	r->budget_ns = st->budget_ns;
	r->start_ns = ev->start_ns;
	r->pid = pid_tgid >> 32;
	r->tid = (__u32)pid_tgid;
	r->status = ev->status;
	r->source = source;
	__builtin_memcpy(r->trace_id, ev->trace_id, sizeof(r->trace_id));
	__builtin_memcpy(r->span_id, ev->span_id, sizeof(r->span_id));
	__builtin_memcpy(r->name, ev->name, sizeof(r->name));
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	r->ustack_len = bpf_get_stack(ctx, r->ustack, sizeof(r->ustack), BPF_F_USER_STACK);
	r->kstack_len = 0;
	if (st->budget_flags & BUDGET_CAPTURE_KERNEL)
		r->kstack_len = bpf_get_stack(ctx, r->kstack, sizeof(r->kstack), 0);
	bpf_ringbuf_submit(r, 0);
}

/* span_aggregate_cg is span_aggregate_key for ev's name; ev may be modified. */
static __always_inline void span_aggregate_cg(void *ctx, struct span_event *ev, __u32 source, __u64 cgroup_id)
{
	__u64 id = span_name_id(ev);
	span_aggregate_key(ctx, ev, source, id, cgroup_id);
}

/*
 * span_aggregate is span_aggregate_cg for the current task's cgroup, as
 * bpf_get_current_cgroup_id() reports it.
 */
static __always_inline void span_aggregate(void *ctx, struct span_event *ev, __u32 source)
{
	span_aggregate_cg(ctx, ev, source, bpf_get_current_cgroup_id());
}

#endif
