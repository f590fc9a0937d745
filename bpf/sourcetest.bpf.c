// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Test only: runs source.h's predicate evaluator and label capping on
 * inputs written by the test, through BPF_PROG_TEST_RUN (raw tracepoint
 * programs, 5.10+), so internal/srcspec can hold the kernel's answers
 * against its Go reference. Each run handles sourcetest_in[0, args[0]).
 */

#include "aggregate.h"
#include "source.h"

char __license[] SEC("license") = "Dual BSD/GPL";

struct sourcetest_in {
	struct src_pred pred;
	struct src_operands ops;
	struct src_labels labels;
	__u32 _pad;
};

struct sourcetest_out {
	__u64 labels[SERIES_LABELS];
	__u32 holds;
	__u16 labelset;
	__u8 other;
	__u8 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << 16);
	__type(key, __u32);
	__type(value, struct sourcetest_in);
} sourcetest_input SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << 16);
	__type(key, __u32);
	__type(value, struct sourcetest_out);
} sourcetest_output SEC(".maps");

static long one(__u64 i, void *unused)
{
	__u32 idx = i;
	struct sourcetest_in *in = bpf_map_lookup_elem(&sourcetest_input, &idx);
	struct sourcetest_out *out = bpf_map_lookup_elem(&sourcetest_output, &idx);
	struct series_key key = {};

	if (!in || !out)
		return 1;
	out->holds = src_pred_holds(&in->pred, &in->ops);
	src_labels_apply(&in->labels, &in->ops, &key);
	__builtin_memcpy(out->labels, key.labels, sizeof(out->labels));
	out->labelset = key.labelset;
	out->other = key.other;
	return 0;
}

SEC("raw_tp")
int sourcetest_run(struct bpf_raw_tracepoint_args *ctx)
{
	bpf_loop(ctx->args[0], one, 0, 0);
	return 0;
}

const struct sourcetest_in *unused_sourcetest_in __attribute__((unused));
const struct sourcetest_out *unused_sourcetest_out __attribute__((unused));
const enum src_sizes *unused_src_sizes __attribute__((unused));
const enum src_op *unused_src_op __attribute__((unused));
const enum src_counter *unused_src_counter __attribute__((unused));
