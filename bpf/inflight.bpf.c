// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Stacks of spans that are still running past their budget.
 *
 * A span that never ends (a request stuck on a lock, a query that hangs)
 * never reaches span_aggregate(), so it would capture no stack. USDT spans
 * with a start probe are known in the kernel while they run (usdt_inflight);
 * collector/inflight scans them and, for each one paired by thread that is
 * over its budget, puts the thread in inflight_watch with a number of
 * samples to take. Two programs then sample that thread:
 *
 *  - inflight_on_cpu: a perf event program on a CPU clock, attached to every
 *    CPU only while inflight_watch is not empty: the thread is running.
 *  - inflight_off_cpu: a raw tracepoint on sched_switch: the thread is going
 *    off the CPU (blocking, or preempted); the kernel stack says on what.
 *
 * Each sample is an ordinary struct overrun in the core's ring buffer with
 * OVERRUN_STILL_RUNNING set in status and the time run so far as duration,
 * plus the user and kernel stacks. The object is loaded with MapReplacements
 * for the core's overruns and counters maps. Needs kernel 5.8+ (ring buffer)
 * and CAP_BPF with CAP_PERFMON, or root.
 */

#include "aggregate.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* Set in struct overrun's status: the span had not ended when sampled. */
#define OVERRUN_STILL_RUNNING 0x80000000u

#define INFLIGHT_MAX_WATCH 1024

/* One thread to sample, written by collector/inflight. */
struct inflight_target {
	__u64 start_ns;	 /* bpf_ktime_get_ns() at the span's start */
	__u64 name_id;
	__u64 budget_ns;
	__u32 pid;	 /* the thread's process, to ignore a reused tid */
	__u32 source;	 /* SOURCE_* of the span */
	__s32 samples;	 /* samples left to take; 0 or less: done */
	__u32 flags;	 /* BUDGET_CAPTURE_KERNEL is implied: always on */
	char name[SPAN_NAME_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, INFLIGHT_MAX_WATCH);
	__type(key, __u32); /* thread id */
	__type(value, struct inflight_target);
} inflight_watch SEC(".maps");

static __always_inline int sample(void *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct inflight_target *w;
	struct overrun *r;

	w = bpf_map_lookup_elem(&inflight_watch, &tid);
	if (!w || w->pid != pid_tgid >> 32 || w->samples <= 0)
		return 0;
	/* Two CPUs may race between the test and the decrement: at most one
	 * sample too many. (Using the value XADD returns needs -mcpu=v3.) */
	__sync_fetch_and_add(&w->samples, -1);

	r = bpf_ringbuf_reserve(&overruns, sizeof(*r), 0);
	if (!r) {
		count(COUNTER_RINGBUF_DROPS);
		return 0;
	}
	r->ts_ns = bpf_ktime_get_ns();
	r->name_id = w->name_id;
	r->cgroup_id = bpf_get_current_cgroup_id();
	r->duration_ns = r->ts_ns - w->start_ns;
	r->budget_ns = w->budget_ns;
	r->start_ns = 0;
	r->pid = pid_tgid >> 32;
	r->tid = tid;
	r->status = OVERRUN_STILL_RUNNING;
	r->source = w->source;
	__builtin_memset(r->trace_id, 0, sizeof(r->trace_id));
	__builtin_memset(r->span_id, 0, sizeof(r->span_id));
	__builtin_memcpy(r->name, w->name, sizeof(r->name));
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	r->ustack_len = bpf_get_stack(ctx, r->ustack, sizeof(r->ustack), BPF_F_USER_STACK);
	r->kstack_len = bpf_get_stack(ctx, r->kstack, sizeof(r->kstack), 0);
	bpf_ringbuf_submit(r, 0);
	return 0;
}

SEC("perf_event")
int inflight_on_cpu(void *ctx)
{
	return sample(ctx);
}

/* sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next):
 * it runs in prev's context, so "current" is the thread going off the CPU. */
SEC("raw_tp/sched_switch")
int inflight_off_cpu(void *ctx)
{
	return sample(ctx);
}

/* Keep the type in BTF so bpf2go generates its Go mirror. */
const struct inflight_target *unused_inflight_target __attribute__((unused));
