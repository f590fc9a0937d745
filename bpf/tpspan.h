/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Spans from the fields of a tracepoint event, whatever decoded them (the
 * fixed offsets of a user_event's format, or an EventHeader walk): the
 * roles of internal/tpsource. A single event carries its duration; a start
 * event records when it ran (and the span's name, when spans are named by a
 * field) in an in-flight map keyed by source, process and thread or key
 * field; the end event times the span from it. The status value of the
 * single or end event marks an error when nonzero.
 *
 * An error predicate and labels (bpf/source.h) apply to the single, end
 * or metric event's operands, which the decoder fetched into
 * tp_vals.ops; without a predicate the status value decides.
 *
 * The including object defines the in-flight map (an LRU hash of struct
 * tp_inflight_key -> struct tp_inflight) and passes it in. Needs
 * aggregate.h and source.h first.
 */
#ifndef SPANWATCH_TPSPAN_H
#define SPANWATCH_TPSPAN_H

enum tp_role {
	TP_SINGLE = 1,
	TP_START = 2,
	TP_END = 3,
	TP_METRIC = 4, /* one event whose value field feeds a metric series */
};

enum tp_result {
	TP_OK = 0,
	TP_UNPAIRED,	  /* an end without its start */
	TP_INFLIGHT_FULL, /* a start could not be recorded */
};

/* What a decoder fetched from one event, for one source. */
struct tp_vals {
	__u64 duration; /* a single event's, in ns; a metric's value (signed) */
	__u64 key;	/* pairs by key: the key field */
	__u64 status;	/* nonzero: an error */
	__u32 have_name; /* name holds the span name read from the event */
	__u32 by_key;	 /* pair by key, not by thread */
	char name[SPAN_NAME_LEN];
	struct src_operands ops; /* for the predicate and the labels */
};

/* What a source maps besides its fields: the error predicate (when
 * has_pred) and the labels. */
struct tp_map {
	struct src_pred pred;
	struct src_labels labels;
	__u32 has_pred;
	__u32 _pad;
};

struct tp_inflight_key {
	__u32 source;
	__u32 tgid;
	__u64 key; /* thread id, or the key field */
};

struct tp_inflight {
	__u64 start_ns;
	__u32 have_name;
	__u32 _pad;
	char name[SPAN_NAME_LEN];
};

/*
 * tp_span plays role for source with the values v (fixed: the span name
 * when neither event names it), at time now, building the span in ev and
 * handing it to the core with source id src_id.
 */
static __always_inline __u32 tp_span(void *ctx, void *inflight, __u32 role, __u32 source, const char *fixed,
				     const struct tp_map *map, struct tp_vals *v, struct span_event *ev, __u64 now,
				     __u32 src_id)
{
	struct tp_inflight_key k = {};
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	k.source = source;
	k.tgid = pid_tgid >> 32;
	k.key = v->by_key ? v->key : (__u32)pid_tgid;
	if (role == TP_START) {
		struct tp_inflight in = {};
		in.start_ns = now;
		if (v->have_name) {
			in.have_name = 1;
			__builtin_memcpy(in.name, v->name, sizeof(in.name));
		}
		if (bpf_map_update_elem(inflight, &k, &in, BPF_ANY))
			return TP_INFLIGHT_FULL;
		return TP_OK;
	}
	__builtin_memset(ev, 0, sizeof(*ev));
	if (role == TP_END) {
		struct tp_inflight *in = bpf_map_lookup_elem(inflight, &k);
		if (!in)
			return TP_UNPAIRED;
		__u32 have_name = in->have_name;
		ev->duration_ns = now - in->start_ns;
		if (have_name)
			__builtin_memcpy(ev->name, in->name, sizeof(ev->name));
		bpf_map_delete_elem(inflight, &k);
		if (!have_name) {
			if (v->have_name)
				__builtin_memcpy(ev->name, v->name, sizeof(ev->name));
			else
				__builtin_memcpy(ev->name, fixed, sizeof(ev->name));
		}
	} else {
		ev->duration_ns = v->duration;
		if (v->have_name)
			__builtin_memcpy(ev->name, v->name, sizeof(ev->name));
		else
			__builtin_memcpy(ev->name, fixed, sizeof(ev->name));
	}
	/* span_aggregate_cg, with the source's labels and predicate. */
	struct agg_in in = {};
	name_cut(ev->name);
	in.key.name_id = span_name_id(ev->name);
	in.key.cgroup_id = bpf_get_current_cgroup_id();
	in.key.kind = role == TP_METRIC ? SERIES_METRIC : SERIES_SPAN;
	in.name = ev->name;
	in.ev = role == TP_METRIC ? 0 : ev;
	in.value = ev->duration_ns;
	in.source = src_id;
	if (map && map->has_pred)
		in.error = src_pred_holds(&map->pred, &v->ops);
	else
		in.error = v->status != 0;
	if (map)
		src_labels_apply(&map->labels, &v->ops, &in.key);
	series_aggregate(ctx, &in);
	return TP_OK;
}

/*
 * tp_copy_name copies a name of len bytes at src (a buffer readable up to
 * SPAN_NAME_LEN past it) into dst, SPAN_NAME_LEN bytes zeroed by the
 * caller: all of it when it fits, else its first SPAN_NAME_LEN bytes, so
 * that the core's name_cut() (aggregate.h) finds the byte past the cut and
 * cuts on a UTF-8 character boundary, and counts the cut.
 */
static __always_inline void tp_copy_name(char *dst, const __u8 *src, __u32 len)
{
	if (len > SPAN_NAME_LEN)
		len = SPAN_NAME_LEN;
	asm volatile("" : "+r"(len));
	if (len > SPAN_NAME_LEN)
		return;
	if (len)
		bpf_probe_read_kernel(dst, len, src);
}

#endif
