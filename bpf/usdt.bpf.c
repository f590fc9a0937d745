// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Spans from USDT probes. Each configured span source (internal/usdt
 * SpanSource) is a slot in usdt_sources; each call site of its probes is a
 * spec in usdt_specs (see usdt.h) whose source field points at that slot.
 *
 *  - usdt_start / usdt_end: a start probe and an end probe, paired in the
 *    kernel by thread or by an argument (a request id) through
 *    usdt_inflight. The end hands the span to span_aggregate().
 *  - usdt_single: one probe that carries the span's duration in an argument.
 *  - usdt_test_args: test only. Fetches every argument of the site into a
 *    ring buffer record, so tests can compare them with what the traced
 *    program passed.
 *
 * This object includes aggregate.h and is loaded with MapReplacements for
 * the core's maps, so USDT spans feed the same aggregates as every source.
 * Needs kernel 5.8+ (ring buffer), 5.15+ for BPF cookies (else the IP map),
 * 4.20+ for semaphores (reference counters).
 */

#include "aggregate.h"
#include "usdt.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define USDT_NO_ARG 0xff
#define USDT_MAX_SOURCES 1024
#define USDT_MAX_INFLIGHT 65536

/* One span source: mirrored in internal/usdt/spec.go. */
struct usdt_source {
	char name[SPAN_NAME_LEN]; /* the span name, unless name_arg is set */
	__u64 name_id;	   /* span_name_id(name), computed by the collector */
	__u8 name_arg;	   /* argument holding a pointer to the name string */
	__u8 key_arg;	   /* pair start and end by this argument, not the thread */
	__u8 status_arg;   /* nonzero = error */
	__u8 duration_arg; /* usdt_single: the duration in ns */
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, USDT_MAX_SOURCES);
	__type(key, __u32);
	__type(value, struct usdt_source);
} usdt_sources SEC(".maps");

struct usdt_inflight_key {
	__u32 source;
	__u32 tgid;
	__u64 key; /* thread id, or the key argument */
};

struct usdt_inflight {
	__u64 start_ns;
	char name[SPAN_NAME_LEN]; /* read at the start when name_arg is set */
};

/*
 * Spans started and not yet ended. LRU, so starts whose end never comes (a
 * thread killed mid-request) cannot fill it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, USDT_MAX_INFLIGHT);
	__type(key, struct usdt_inflight_key);
	__type(value, struct usdt_inflight);
} usdt_inflight SEC(".maps");

/*
 * Spans paired by thread with a fixed name (the common case) keep their
 * start time in task-local storage: one slot per source, no hash map
 * update and delete per span. Sources past the slots, or keyed by an
 * argument, or named by one, use usdt_inflight. Task storage in tracing
 * programs needs kernel 5.11+; without it the collector clears
 * usdt_have_task_storage and this path is never taken (nor verified).
 */
#define USDT_TASK_SLOTS 16

struct usdt_task_spans {
	__u64 start_ns[USDT_TASK_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct usdt_task_spans);
} usdt_task_start SEC(".maps");

volatile const __u32 usdt_have_task_storage = 1;

/*
 * The fast path, for sources paired by thread with a fixed name and no
 * status argument: the collector puts the source's task slot + 1 in bits
 * 32..39 of the cookie, so start needs neither spec nor source, and end
 * takes the name and its id from the source and the cgroup id from the
 * task (task_cgroup_id). Only set with cookies and task storage.
 */
#define USDT_COOKIE_FAST_SLOT(c) (((c) >> 32) & 0xff)

/*
 * task_cgroup_id is bpf_get_current_cgroup_id() for a task from
 * bpf_get_current_task_btf(): the same chain (task->cgroups->dfl_cgrp->kn->id,
 * the cgroup v2 id, or the root's when no v2 hierarchy is mounted), read
 * with BTF loads instead of a helper call that also takes and drops the RCU
 * read lock (the program already runs under RCU). Exact on every span, no
 * cache: a thread moved to another cgroup is counted there from its next
 * span on. Measured on the benchmark loop: done about 25-30 ns cheaper than
 * with the helper (BENCHMARKS.md, USDT). The ___sw types are CO-RE
 * flavours: the loader relocates their fields to the kernel's layout
 * (kernfs_node.id is 64 bits since 5.5; task storage needs 5.11 anyway).
 */
struct kernfs_node___sw { __u64 id; } __attribute__((preserve_access_index));
struct cgroup___sw { struct kernfs_node___sw *kn; } __attribute__((preserve_access_index));
struct css_set___sw { struct cgroup___sw *dfl_cgrp; } __attribute__((preserve_access_index));
struct task_struct___sw { struct css_set___sw *cgroups; } __attribute__((preserve_access_index));

static __always_inline __u64 task_cgroup_id(struct task_struct *task)
{
	struct task_struct___sw *t = (void *)task;

	return t->cgroups->dfl_cgrp->kn->id;
}

static __always_inline int by_task(const struct usdt_spec *spec, const struct usdt_source *src)
{
	return usdt_have_task_storage && src->key_arg == USDT_NO_ARG &&
	       src->name_arg == USDT_NO_ARG && spec->source < USDT_TASK_SLOTS;
}

static __always_inline int inflight_key(struct pt_regs *ctx, const struct usdt_spec *spec,
					const struct usdt_source *src, struct usdt_inflight_key *k)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	k->source = spec->source;
	k->tgid = pid_tgid >> 32;
	if (src->key_arg == USDT_NO_ARG) {
		k->key = (__u32)pid_tgid;
		return 0;
	}
	if (usdt_arg(ctx, spec, src->key_arg, &k->key)) {
		count(COUNTER_READ_ERRORS);
		return -1;
	}
	return 0;
}

static __always_inline int read_name(struct pt_regs *ctx, const struct usdt_spec *spec, __u8 n, char *dst)
{
	__u64 ptr;
	long len;

	if (usdt_arg(ctx, spec, n, &ptr) ||
	    (len = bpf_probe_read_user_str(dst, SPAN_NAME_LEN, (void *)ptr)) < 0) {
		count(COUNTER_READ_ERRORS);
		return -1;
	}
	/* A full buffer: name_cut needs the byte after the first 127. */
	if (len == SPAN_NAME_LEN && bpf_probe_read_user(&dst[SPAN_NAME_LEN - 1], 1, (void *)ptr + SPAN_NAME_LEN - 1))
		dst[SPAN_NAME_LEN - 1] = 0;
	return 0;
}

static __always_inline __u32 read_status(struct pt_regs *ctx, const struct usdt_spec *spec,
					 const struct usdt_source *src)
{
	__u64 v;

	if (src->status_arg == USDT_NO_ARG)
		return SPAN_STATUS_OK;
	if (usdt_arg(ctx, spec, src->status_arg, &v)) {
		count(COUNTER_READ_ERRORS);
		return SPAN_STATUS_OK;
	}
	return v ? SPAN_STATUS_ERROR : SPAN_STATUS_OK;
}

SEC("uprobe")
int usdt_start(struct pt_regs *ctx)
{
	struct usdt_inflight_key k;
	struct usdt_inflight in;
	struct usdt_source *src;
	struct usdt_spec *spec;

	__u64 cookie = usdt_cookie(ctx);
	__u32 fast = USDT_COOKIE_FAST_SLOT(cookie);

	if (usdt_have_task_storage && fast) {
		struct usdt_task_spans *ts = bpf_task_storage_get(&usdt_task_start, bpf_get_current_task_btf(), 0,
								  BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (ts)
			ts->start_ns[(fast - 1) & (USDT_TASK_SLOTS - 1)] = bpf_ktime_get_ns();
		else
			count(COUNTER_READ_ERRORS);
		return 0;
	}
	spec = usdt_spec_from(ctx, cookie);
	if (!spec)
		return 0;
	src = bpf_map_lookup_elem(&usdt_sources, &spec->source);
	if (!src)
		return 0;
	if (by_task(spec, src)) {
		struct usdt_task_spans *ts = bpf_task_storage_get(&usdt_task_start, bpf_get_current_task_btf(), 0,
								  BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!ts) {
			count(COUNTER_READ_ERRORS);
			return 0;
		}
		ts->start_ns[spec->source & (USDT_TASK_SLOTS - 1)] = bpf_ktime_get_ns();
		return 0;
	}
	if (inflight_key(ctx, spec, src, &k))
		return 0;
	if (src->name_arg != USDT_NO_ARG) {
		if (read_name(ctx, spec, src->name_arg, in.name))
			return 0;
	} else {
		in.name[0] = 0;
	}
	in.start_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&usdt_inflight, &k, &in, BPF_ANY);
	return 0;
}

static __always_inline int usdt_end_slow(struct pt_regs *ctx, __u64 cookie, __u64 now)
{
	struct usdt_inflight_key k;
	struct usdt_inflight *in;
	struct usdt_source *src;
	struct usdt_spec *spec;
	struct span_event ev = {};

	spec = usdt_spec_from(ctx, cookie);
	if (!spec)
		return 0;
	src = bpf_map_lookup_elem(&usdt_sources, &spec->source);
	if (!src)
		return 0;
	if (by_task(spec, src)) {
		struct usdt_task_spans *ts = bpf_task_storage_get(&usdt_task_start, bpf_get_current_task_btf(), 0, 0);
		__u32 slot = spec->source & (USDT_TASK_SLOTS - 1);
		__u64 start;

		if (!ts)
			return 0;
		start = ts->start_ns[slot];
		if (!start)
			return 0;
		ts->start_ns[slot] = 0;
		ev.duration_ns = now - start;
		__builtin_memcpy(ev.name, src->name, sizeof(ev.name));
	} else {
		if (inflight_key(ctx, spec, src, &k))
			return 0;
		in = bpf_map_lookup_elem(&usdt_inflight, &k);
		if (!in)
			return 0;
		ev.duration_ns = now - in->start_ns;
		if (src->name_arg != USDT_NO_ARG)
			__builtin_memcpy(ev.name, in->name, sizeof(ev.name));
		else
			__builtin_memcpy(ev.name, src->name, sizeof(ev.name));
		bpf_map_delete_elem(&usdt_inflight, &k);
	}
	ev.status = read_status(ctx, spec, src);
	span_aggregate(ctx, &ev, SOURCE_USDT);
	return 0;
}

SEC("uprobe")
int usdt_end(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 cookie = usdt_cookie(ctx);
	__u32 fast = USDT_COOKIE_FAST_SLOT(cookie);

	if (usdt_have_task_storage && fast) {
		struct task_struct *task = bpf_get_current_task_btf();
		struct usdt_task_spans *ts = bpf_task_storage_get(&usdt_task_start, task, 0, 0);
		__u32 slot = (fast - 1) & (USDT_TASK_SLOTS - 1);
		struct usdt_source *src;
		struct agg_in in = {};
		__u64 start;

		if (!ts)
			return 0;
		start = ts->start_ns[slot];
		if (!start)
			return 0;
		ts->start_ns[slot] = 0;
		/* Fast-path sources take the task slots' indexes in usdt_sources. */
		src = bpf_map_lookup_elem(&usdt_sources, &slot);
		if (!src)
			return 0;
		in.key.name_id = src->name_id;
		in.key.cgroup_id = task_cgroup_id(task);
		in.name = src->name;
		in.value = now - start;
		in.source = SOURCE_USDT;
		series_aggregate(ctx, &in);
		return 0;
	}
	return usdt_end_slow(ctx, cookie, now);
}

SEC("uprobe")
int usdt_single(struct pt_regs *ctx)
{
	struct usdt_source *src;
	struct usdt_spec *spec;
	struct span_event ev = {};

	spec = usdt_spec(ctx);
	if (!spec)
		return 0;
	src = bpf_map_lookup_elem(&usdt_sources, &spec->source);
	if (!src)
		return 0;
	if (usdt_arg(ctx, spec, src->duration_arg, &ev.duration_ns)) {
		count(COUNTER_READ_ERRORS);
		return 0;
	}
	if (src->name_arg != USDT_NO_ARG) {
		if (read_name(ctx, spec, src->name_arg, ev.name))
			return 0;
	} else {
		__builtin_memcpy(ev.name, src->name, sizeof(ev.name));
	}
	ev.status = read_status(ctx, spec, src);
	span_aggregate(ctx, &ev, SOURCE_USDT);
	return 0;
}

/* Test only: every argument of the site that fired. */
struct usdt_test_record {
	__u32 spec_id;
	__u32 arg_cnt;
	__u32 err_mask; /* bit n: argument n could not be read */
	__u32 tid;
	__u64 args[USDT_MAX_ARGS];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 << 10);
} usdt_test_events SEC(".maps");

SEC("uprobe")
int usdt_test_args(struct pt_regs *ctx)
{
	struct usdt_test_record *r;
	struct usdt_spec *spec;
	__u32 id;

	if (usdt_spec_id(ctx, &id))
		return 0;
	spec = bpf_map_lookup_elem(&usdt_specs, &id);
	if (!spec)
		return 0;
	r = bpf_ringbuf_reserve(&usdt_test_events, sizeof(*r), 0);
	if (!r)
		return 0;
	r->spec_id = id;
	r->arg_cnt = spec->arg_cnt;
	r->err_mask = 0;
	r->tid = (__u32)bpf_get_current_pid_tgid();
	for (__u32 i = 0; i < USDT_MAX_ARGS; i++) {
		r->args[i] = 0;
		if (i < spec->arg_cnt && usdt_arg(ctx, spec, i, &r->args[i]))
			r->err_mask |= 1 << i;
	}
	bpf_ringbuf_submit(r, 0);
	return 0;
}

/* Keep these types in BTF so bpf2go generates their Go mirrors. */
const struct usdt_spec *unused_usdt_spec __attribute__((unused));
const struct usdt_source *unused_usdt_source __attribute__((unused));
const struct usdt_test_record *unused_usdt_test_record __attribute__((unused));
const struct usdt_ip_key *unused_usdt_ip_key __attribute__((unused));
