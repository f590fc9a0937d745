// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Test only: drives the aggregation core directly, without a probe, through
 * BPF_PROG_TEST_RUN (raw tracepoint programs, 5.10+). Each run aggregates
 * the entries [args[0], args[0] + args[1]) of coretest_in, args[2] times
 * over. The collector's tests and benchmarks load it beside the core with
 * MapReplacements, to check the core against Go (bucket indexes, glob
 * budgets, quotas, names) and to fill the maps quickly.
 */

#include "aggregate.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* internal/coretest's Batch and the values coretest_hot cycles through. */
enum coretest_sizes {
	CORETEST_BATCH = 1 << 16,
	CORETEST_HOT_VALS = 1024, /* a power of two */
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

static long one(__u64 i, struct coretest_ctx *c)
{
	__u32 idx = c->first + (__u32)(i % c->n);
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
	series_aggregate(c->ctx, &in);
	return 0;
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

static long index_one(__u64 i, void *metric)
{
	__u32 k = i;
	__u64 *v = bpf_map_lookup_elem(&coretest_vals, &k);
	__s64 *out = bpf_map_lookup_elem(&coretest_idx, &k);

	if (!v || !out)
		return 1;
	*out = *(__u64 *)metric ? hist_value_index(*v) : hist_duration_index(*v);
	return 0;
}

SEC("raw_tp")
int coretest_index(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 metric = ctx->args[1];

	bpf_loop(ctx->args[0], index_one, &metric, 0);
	return 0;
}

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

static long hot_one(__u64 i, struct hot_ctx *h)
{
	__u32 k = (__u32)(i % h->nvals) & (CORETEST_HOT_VALS - 1);
	__u64 *v = bpf_map_lookup_elem(&coretest_vals, &k);

	if (!v)
		return 1;
	h->in->value = *v;
	series_aggregate(h->ctx, h->in);
	return 0;
}

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
	bpf_loop(ctx->args[0], hot_one, &h, 0);
	return 0;
}
