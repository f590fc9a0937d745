// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Test only: drives the aggregation core directly, without a probe, through
 * BPF_PROG_TEST_RUN (raw tracepoint programs, 5.10+). Each run aggregates
 * the entries [args[0], args[0] + args[1]) of coretest_in, args[2] times
 * over. The collector's tests and benchmarks load it beside the core with
 * MapReplacements, to check the core against Go (bucket indexes, glob
 * budgets, quotas, names) and to fill the maps quickly.
 *
 * Built with SPANWATCH_COMPAT (no bpf_loop before 5.17), each run does at
 * most CORETEST_COMPAT_RUN values, in a bounded loop over a subprogram;
 * internal/coretest splits its work in runs that size.
 */

#include "aggregate.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* internal/coretest's Batch and the values coretest_hot cycles through. */
enum coretest_sizes {
	CORETEST_BATCH = 1 << 16,
	CORETEST_HOT_VALS = 1024, /* a power of two */
	CORETEST_COMPAT_RUN = 32, /* values a run of the compat object does */
};

struct coretest_in {
	char name[SPAN_NAME_LEN];
	__u64 cgroup_id;
	__u64 value;
	__u64 labels[SERIES_LABELS];
	__u16 labelset;
	__u8 kind;
	__u8 error;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << 20);
	__type(key, __u32);
	__type(value, struct coretest_in);
} coretest_input SEC(".maps");

struct coretest_ctx {
	void *ctx;
	__u32 first;
	__u32 n;
};

/* aggregate_entry aggregates entry idx of coretest_input. */
static __always_inline int aggregate_entry(void *ctx, __u32 idx)
{
	struct coretest_in *e = bpf_map_lookup_elem(&coretest_input, &idx);
	struct span_event ev = {};
	struct agg_in in = {};

	if (!e)
		return 1;
	__builtin_memcpy(ev.name, e->name, sizeof(ev.name));
	name_cut(ev.name);
	in.key.name_id = span_name_id(ev.name);
	in.key.cgroup_id = e->cgroup_id;
	__builtin_memcpy(in.key.labels, e->labels, sizeof(in.key.labels));
	in.key.labelset = e->labelset;
	in.key.kind = e->kind;
	in.name = ev.name;
	in.ev = &ev;
	in.value = e->value;
	in.source = SOURCE_USDT;
	in.error = e->error;
	series_aggregate(ctx, &in);
	return 0;
}

#ifndef SPANWATCH_COMPAT
static long one(__u64 i, struct coretest_ctx *c)
{
	return aggregate_entry(c->ctx, c->first + (__u32)(i % c->n));
}

SEC("raw_tp")
int coretest_run(struct bpf_raw_tracepoint_args *ctx)
{
	struct coretest_ctx c = {.ctx = ctx, .first = ctx->args[0], .n = ctx->args[1]};
	__u64 total = ctx->args[1] * ctx->args[2];

	if (!c.n)
		return 0;
	bpf_loop(total, one, &c, 0);
	return 0;
}
#else
/* A subprogram: the loop below walks it once a value, not the core
 * inlined CORETEST_COMPAT_RUN times. */
static __noinline int compat_one(void *ctx, __u32 idx)
{
	return aggregate_entry(ctx, idx);
}

SEC("raw_tp")
int coretest_run(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 first = ctx->args[0], n = ctx->args[1];
	__u64 total = ctx->args[1] * ctx->args[2];

	if (!n)
		return 0;
	for (__u32 i = 0; i < CORETEST_COMPAT_RUN; i++) {
		if (i >= total)
			break;
		compat_one(ctx, first + i % n);
	}
	return 0;
}
#endif

/* The bucket index of each value in args[0..], for comparison with Go. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CORETEST_BATCH);
	__type(key, __u32);
	__type(value, __u64);
} coretest_vals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CORETEST_BATCH);
	__type(key, __u32);
	__type(value, __s64);
} coretest_idx SEC(".maps");

static __always_inline int index_of(__u32 k, __u64 metric)
{
	__u64 *v = bpf_map_lookup_elem(&coretest_vals, &k);
	__s64 *out = bpf_map_lookup_elem(&coretest_idx, &k);

	if (!v || !out)
		return 1;
	*out = metric ? hist_value_index(*v) : hist_duration_index(*v);
	return 0;
}

#ifndef SPANWATCH_COMPAT
static long index_one(__u64 i, void *metric)
{
	return index_of(i, *(__u64 *)metric);
}

SEC("raw_tp")
int coretest_index(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 metric = ctx->args[1];

	bpf_loop(ctx->args[0], index_one, &metric, 0);
	return 0;
}
#else
static __noinline int compat_index(__u32 k, __u64 metric)
{
	return index_of(k, metric);
}

/* Values args[2] to args[2] + min(args[0], CORETEST_COMPAT_RUN). */
SEC("raw_tp")
int coretest_index(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 first = ctx->args[2];

	for (__u32 i = 0; i < CORETEST_COMPAT_RUN; i++) {
		if (i >= ctx->args[0])
			break;
		compat_index(first + i, ctx->args[1]);
	}
	return 0;
}
#endif

const struct coretest_in *unused_coretest_in __attribute__((unused));
const enum coretest_sizes *unused_coretest_sizes __attribute__((unused));

/* The core alone: args[0] values of entry 0 of coretest_input, its name
 * hashed once, the value taken from coretest_vals[i % args[1]] (args[1]
 * <= CORETEST_HOT_VALS), as a USDT fast path hands them to series_aggregate. */
struct hot_ctx {
	void *ctx;
	struct agg_in *in;
	__u32 nvals;
	__u32 hint; /* as a USDT fast path keeps it in task storage */
};

static __always_inline int hot_value(struct hot_ctx *h, __u64 i)
{
	__u32 k = (__u32)(i % h->nvals) & (CORETEST_HOT_VALS - 1);
	__u64 *v = bpf_map_lookup_elem(&coretest_vals, &k);

	if (!v)
		return 1;
	h->in->value = *v;
	series_aggregate(h->ctx, h->in);
	return 0;
}

#ifndef SPANWATCH_COMPAT
static long hot_one(__u64 i, struct hot_ctx *h)
{
	return hot_value(h, i);
}
#else
static __noinline int compat_hot(struct hot_ctx *h, __u64 i)
{
	if (!h)
		return 1;
	return hot_value(h, i);
}
#endif

SEC("raw_tp")
int coretest_hot(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 zero = 0;
	struct coretest_in *e = bpf_map_lookup_elem(&coretest_input, &zero);
	struct agg_in in = {};
	struct hot_ctx h = {.ctx = ctx, .in = &in, .nvals = ctx->args[1]};

	if (!e || !h.nvals)
		return 0;
	in.key.name_id = e->value; /* the caller puts the name's id there */
	in.key.cgroup_id = e->cgroup_id;
	in.name = e->name;
	in.source = SOURCE_USDT;
	if (ctx->args[2])
		in.hint = &h.hint;
#ifndef SPANWATCH_COMPAT
	bpf_loop(ctx->args[0], hot_one, &h, 0);
#else
	for (__u32 i = 0; i < CORETEST_COMPAT_RUN; i++) {
		if (i >= ctx->args[0])
			break;
		compat_hot(&h, i);
	}
#endif
	return 0;
}
