// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Stacks of spans that are still running past their budget.
 *
 * A span that never ends (a request stuck on a lock, a query that hangs)
 * never reaches span_aggregate(), so it would capture no stack. USDT spans
 * with a start probe are known in the kernel while they run: in
 * usdt_inflight, or, for spans paired by thread with a fixed name on 5.11+,
 * in the task storage usdt_task_start (see usdt.bpf.c). internal/inflight
 * scans the first from user space and the second with inflight_scan, a task
 * iterator, and puts each thread whose span is over its budget in
 * inflight_watch with a number of samples to take. Two programs then sample
 * that thread:
 *
 *  - inflight_on_cpu: a perf event program on a CPU clock, attached to every
 *    CPU only while inflight_watch is not empty: the thread is running.
 *  - inflight_off_cpu: a raw tracepoint on sched_switch: the thread is going
 *    off the CPU (blocking, or preempted); the kernel stack says on what.
 *  - inflight_blocked: a sleepable task iterator, run by each scan while a
 *    thread is watched, for a thread that blocked before it was watched and
 *    stays blocked (a deadlock): it walks the thread's user frame pointers
 *    from its saved registers (bpf_task_pt_regs, bpf_copy_from_user_task:
 *    5.18+) and takes its kernel stack with bpf_get_task_stack.
 *
 * Each sample is an ordinary struct overrun in the core's ring buffer with
 * OVERRUN_STILL_RUNNING set in status and the time run so far as duration,
 * plus the user and kernel stacks. The object is loaded with MapReplacements
 * for the core's overruns and counters maps. Needs kernel 5.8+ (ring buffer)
 * and CAP_BPF with CAP_PERFMON, or root.
 */

#include "aggregate.h"
#include "task_spans.h"
#include <bpf/bpf_core_read.h>

char __license[] SEC("license") = "Dual BSD/GPL";

/* Set in struct overrun's status: the span had not ended when sampled. */
#define OVERRUN_STILL_RUNNING 0x80000000u

#define INFLIGHT_MAX_WATCH 1024

/* inflight_target.flags: the entry was made by inflight_scan, which also
 * removes it when the span ends. */
#define TARGET_FROM_TASK 1

/* One thread to sample, written by internal/inflight or inflight_scan. */
struct inflight_target {
	__u64 start_ns;	 /* bpf_ktime_get_ns() at the span's start */
	__u64 name_id;
	__u64 budget_ns;
	__u32 pid;	 /* the thread's process, to ignore a reused tid */
	__u32 source;	 /* SOURCE_* of the span */
	__s32 samples;	 /* samples left to take; 0 or less: done */
	__u32 flags;	 /* TARGET_* */
	char name[SPAN_NAME_LEN];
};

/* LRU: entries of threads that died mid-span cannot fill it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
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

/*
 * The spans paired by thread in task storage: a stack per thread
 * (task_spans.h). The maps are usdt.bpf.c's; the collector loads this
 * object with MapReplacements for usdt_task_start and usdt_task_names.
 */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct usdt_task_spans);
} usdt_task_start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_span_names);
} usdt_task_names SEC(".maps");

/* USDT sources (usdt.bpf.c's usdt_sources indexes). */
#define INFLIGHT_SOURCES 1024

/* Per USDT source of fixed name: its span and budget, written by
 * internal/inflight from usdt_sources and budgets; budget_ns 0 means not
 * watched. Spans named by an argument take their name from usdt_task_names
 * and their budget from budgets (exact names). */
struct inflight_slot {
	__u64 budget_ns;
	__u64 name_id;
	__s32 samples;
	__u32 _pad;
	char name[SPAN_NAME_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, INFLIGHT_SOURCES);
	__type(key, __u32);
	__type(value, struct inflight_slot);
} inflight_slots SEC(".maps");

/* The few kernel types the iterator reads, relocated against the running
 * kernel's BTF (CO-RE). */
struct kernfs_node {
	__u64 id;
} __attribute__((preserve_access_index));

struct cgroup {
	struct kernfs_node *kn;
} __attribute__((preserve_access_index));

struct css_set {
	struct cgroup *dfl_cgrp;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	char comm[16];
	struct css_set *cgroups;
} __attribute__((preserve_access_index));

/* The task state field was "state" before 5.14, "__state" since. */
struct task_struct___new {
	unsigned int __state;
} __attribute__((preserve_access_index));

struct task_struct___old {
	long state;
} __attribute__((preserve_access_index));

struct bpf_iter_meta {
	void *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} __attribute__((preserve_access_index));

/*
 * inflight_scan visits every task: a task whose storage holds a span over
 * its slot's budget gets an inflight_watch entry (once per span: an entry
 * for the same start is left alone, even when its samples are used up); an
 * entry of ours whose span ended is removed. Task storage in tracing
 * programs and task iterators need kernel 5.11+ and BTF.
 */
/* The open spans of a task, for inflight_scan's loop. */
struct scan_state {
	struct task_struct *task;
	struct usdt_task_spans *ts;
	struct inflight_target *w;
	struct inflight_target *t;
	__u64 now;
	__u32 pos, depth;
	int found;
	int watched;
};

static long scan_one(__u32 d, struct scan_state *st)
{
	struct usdt_task_spans *ts = st->ts;
	struct inflight_slot *sl;
	__u64 budget, name_id;

	if (d >= st->depth || !ts)
		return 1;
	__u32 i = (st->pos - 1 - d) & (TASK_SPANS_DEPTH - 1);
	__u64 start = ts->s[i].start_ns;
	__u32 source = ts->s[i].source;
	__u32 flags = ts->s[i].flags;

	if (!start || source == TASK_SPAN_TAKEN)
		return 0;
	if (st->w && (st->w->flags & TARGET_FROM_TASK) && st->w->start_ns == start) {
		st->watched = 1; /* already watched, or sampled */
		return 1;
	}
	sl = bpf_map_lookup_elem(&inflight_slots, &source);
	if (!sl || st->now < start)
		return 0;
	budget = sl->budget_ns;
	name_id = sl->name_id;
	if (flags & TASK_SPAN_NAMED) {
		struct task_span_names *tn = bpf_task_storage_get(&usdt_task_names, st->task, 0, 0);
		struct budget *b;

		/* The first overdue span is the one sampled: the target's
		 * name is the scratch buffer until one is found. */
		if (!tn || st->found || !st->t)
			return 0;
		__builtin_memcpy(st->t->name, tn->name[i].name, sizeof(st->t->name));
		name_cut(st->t->name);
		name_id = span_name_id(st->t->name);
		b = bpf_map_lookup_elem(&budgets, &name_id);
		budget = b ? b->budget_ns : 0;
	}
	if (!budget || st->now - start <= budget)
		return 0;
	if (!st->found && st->t) {
		st->t->start_ns = start;
		st->t->name_id = name_id;
		st->t->budget_ns = budget;
		st->t->samples = sl->samples;
		if (!(flags & TASK_SPAN_NAMED))
			__builtin_memcpy(st->t->name, sl->name, sizeof(sl->name));
		st->found = 1;
	}
	return 0;
}

/*
 * inflight_scan visits every task: a task whose stack of open USDT spans
 * holds one over its budget gets an inflight_watch entry (once per span:
 * an entry for the same start is left alone, even when its samples are
 * used up); an entry of ours whose span ended is removed. Task storage in
 * tracing programs and task iterators need kernel 5.11+ and BTF.
 */
SEC("iter/task")
int inflight_scan(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct inflight_target t = {};
	struct scan_state st = {.t = &t};
	__u32 tid;

	if (!task)
		return 0;
	tid = task->pid;
	st.task = task;
	st.now = bpf_ktime_get_ns();
	st.w = bpf_map_lookup_elem(&inflight_watch, &tid);
	st.ts = bpf_task_storage_get(&usdt_task_start, task, 0, 0);
	if (st.ts) {
		st.pos = st.ts->pos;
		st.depth = st.ts->depth;
		bpf_loop(TASK_SPANS_DEPTH, scan_one, &st, 0);
		if (st.watched)
			return 0;
	}
	if (st.found) {
		t.pid = task->tgid;
		t.source = SOURCE_USDT;
		t.flags = TARGET_FROM_TASK;
		bpf_map_update_elem(&inflight_watch, &tid, &t, BPF_ANY);
	} else if (st.w && (st.w->flags & TARGET_FROM_TASK)) {
		bpf_map_delete_elem(&inflight_watch, &tid);
	}
	return 0;
}

static __always_inline long task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(((struct task_struct___new *)t)->__state))
		return BPF_CORE_READ((struct task_struct___new *)t, __state);
	return BPF_CORE_READ((struct task_struct___old *)t, state);
}

/* One user frame as frame pointers lay it out: the caller's saved frame
 * pointer, then the return address. */
struct user_frame {
	__u64 next;
	__u64 ret;
};

SEC("iter.s/task")
int inflight_blocked(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct inflight_target *w;
	struct user_frame fr;
	struct pt_regs *regs;
	struct overrun *r;
	__u64 bp, n = 1;
	__u32 tid;

	if (!task)
		return 0;
	tid = task->pid;
	w = bpf_map_lookup_elem(&inflight_watch, &tid);
	if (!w || w->pid != task->tgid || w->samples <= 0)
		return 0;
	/* A running or runnable thread is the CPU clock's to sample. */
	if (task_state(task) == 0)
		return 0;
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs)
		return 0;
	__sync_fetch_and_add(&w->samples, -1);

	r = bpf_ringbuf_reserve(&overruns, sizeof(*r), 0);
	if (!r) {
		count(COUNTER_RINGBUF_DROPS);
		return 0;
	}
	r->ts_ns = bpf_ktime_get_ns();
	r->name_id = w->name_id;
	r->cgroup_id = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
	r->duration_ns = r->ts_ns - w->start_ns;
	r->budget_ns = w->budget_ns;
	r->start_ns = 0;
	r->pid = task->tgid;
	r->tid = tid;
	r->status = OVERRUN_STILL_RUNNING;
	r->source = w->source;
	__builtin_memset(r->trace_id, 0, sizeof(r->trace_id));
	__builtin_memset(r->span_id, 0, sizeof(r->span_id));
	__builtin_memcpy(r->name, w->name, sizeof(r->name));
	bpf_probe_read_kernel_str(r->comm, sizeof(r->comm), task->comm);

	/* The user frame-pointer walk the kernel does for the current thread
	 * (perf_callchain_user), done here for a sleeping one. */
	bpf_probe_read_kernel(&r->ustack[0], sizeof(r->ustack[0]), &regs->ip);
	bpf_probe_read_kernel(&bp, sizeof(bp), &regs->bp);
	for (int i = 1; i < MAX_USTACK; i++) {
		if (!bp || bpf_copy_from_user_task(&fr, sizeof(fr), (void *)bp, task, 0) || !fr.ret)
			break;
		r->ustack[i] = fr.ret;
		n++;
		if (fr.next <= bp) /* frames go up the stack */
			break;
		bp = fr.next;
	}
	r->ustack_len = n * sizeof(__u64);
	r->kstack_len = bpf_get_task_stack(task, r->kstack, sizeof(r->kstack), 0);
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

/* Keep the types in BTF so bpf2go generates their Go mirrors. */
const struct inflight_target *unused_inflight_target __attribute__((unused));
const struct inflight_slot *unused_inflight_slot __attribute__((unused));
const struct usdt_task_spans *unused_usdt_task_spans __attribute__((unused));
const struct task_span *unused_task_span __attribute__((unused));
