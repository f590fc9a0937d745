// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Stacks of spans that are still running past their budget: where a slow
 * span's time goes, and where a span that never ends is stuck.
 *
 * Spans are known in the kernel while they run: SDK spans (user_events, the
 * marker) in inflight_exec, a stack of open spans per thread of execution
 * (a goroutine or a thread, see inflight.h); USDT spans in usdt_inflight
 * or, paired by thread with a fixed name on 5.11+, in the task storage
 * usdt_task_start (usdt.bpf.c). internal/inflight scans them (the first
 * two from user space, the third with inflight_scan, a task iterator) and
 * puts each thread of execution with spans over their budget in
 * inflight_watch, with a number of samples to take. The samplers then take
 * its stacks, one overrun record per overdue span it has open:
 *
 *  - inflight_on_cpu: a perf event program on a CPU clock, attached to every
 *    CPU only while inflight_watch is not empty: the thread (or the thread
 *    running the goroutine) is on the CPU.
 *  - inflight_off_cpu: a raw tracepoint on sched_switch: the thread blocks
 *    (not when it is preempted); the kernel stack says on what. At most one
 *    such sample per period_ns, so many short waits do not use up the
 *    samples.
 *  - inflight_blocked: a sleepable task iterator, run by each scan while
 *    something is watched: a thread that stays blocked (a deadlock, a read
 *    that never returns) is sampled from its saved registers (user frame
 *    pointers, bpf_copy_from_user_task: 5.18+) and its kernel stack; a
 *    goroutine the Go scheduler parked (a channel, a lock, time.Sleep) is
 *    on no thread: it is sampled from its saved context in the runtime's g
 *    (g.sched), which is what Go's own tracebacks read.
 *
 * A goroutine is matched by the g pointer the Go runtime keeps in the
 * thread's TLS (at the offset inflight.h learned, relative to the thread
 * pointer) or, on arm64 without cgo, in x28 (task_g), so its
 * samples follow it from thread to thread and never belong to another
 * goroutine the thread runs next.
 *
 * Each sample is an ordinary struct overrun in the core's ring buffer with
 * OVERRUN_STILL_RUNNING (and OVERRUN_OFF_CPU off the CPU) in status, the time
 * run so far as duration and the span's start (CLOCK_REALTIME, from its
 * start event) as start_ns, plus the user and kernel stacks. The object is
 * loaded with MapReplacements for the core's overruns, counters,
 * inflight_exec and inflight_gprocs maps. Needs kernel 5.8+ (ring buffer)
 * and CAP_BPF with CAP_PERFMON, or root.
 */

#include "aggregate.h"
#include "inflight.h"
#include "task_spans.h"

char __license[] SEC("license") = "Dual BSD/GPL";

enum inflight_watch_sizes {
	INFLIGHT_MAX_WATCH = 1024,
	INFLIGHT_TARGET_SPANS = 4, /* a power of two */
	/* Watched goroutines, for inflight_blocked to find the parked
	 * ones: written by internal/inflight at each scan, ended by a zero
	 * tgid. */
	INFLIGHT_MAX_PARKED = 64,
	/* USDT sources: usdt.bpf.c's usdt_sources indexes. */
	INFLIGHT_SOURCES = 1024,
	/* Span names sampled from their start (inflight_early). */
	INFLIGHT_MAX_EARLY = 1024,
};

/* inflight_target.flags */
enum inflight_target_flags {
	TARGET_FROM_TASK = 1, /* made by inflight_scan, which removes it too */
	TARGET_SDK = 2,	      /* spans of inflight_exec: slot is their depth */
	TARGET_GOROUTINE = 4, /* the key's exec is a g pointer */
};

/* One overdue span of a watched thread of execution. */
struct inflight_tspan {
	__u64 start_ns;	  /* bpf_ktime_get_ns() at its start */
	__u64 start_real; /* CLOCK_REALTIME start from its start event, or 0 */
	__u64 name_id;
	__u64 budget_ns;
	__u32 slot;	  /* its depth in inflight_exec, or its task slot */
	__u32 source;	  /* SOURCE_* */
	char name[SPAN_NAME_LEN];
};

/* A thread of execution to sample, written by internal/inflight or
 * inflight_scan. */
struct inflight_target {
	__u32 pid;	  /* its process, to ignore a reused tid */
	__u32 flags;	  /* TARGET_* */
	__s32 samples;	  /* samples left to take; 0 or less: done */
	__u32 nspans;
	__u64 last_ns;	  /* when it was last sampled */
	__u64 period_ns;  /* off-CPU samples at least this far apart */
	struct inflight_tspan spans[INFLIGHT_TARGET_SPANS];
};

/* LRU: entries of threads that died mid-span cannot fill it. Keyed like
 * inflight_exec: the goroutine's g pointer, or the thread id. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, INFLIGHT_MAX_WATCH);
	__type(key, struct inflight_exec_key);
	__type(value, struct inflight_target);
} inflight_watch SEC(".maps");

/* inflight_scan builds a target here: too large for the BPF stack. Only
 * the scan uses it, and scans do not run at once (internal/inflight). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct inflight_target);
} inflight_scratch SEC(".maps");

/*
 * Spans sampled from their start (a budget's sample_from_start): the budget
 * in nanoseconds by the name id of the span's start event (exact names),
 * written by internal/inflight. While it is not empty the CPU clock stays
 * attached, and a thread (or goroutine) that is not in inflight_watch is
 * sampled at each tick for each open span of inflight_exec with a name
 * here, whatever its age: inflight_watch takes over once the scan finds the
 * span over its budget. Off the CPU such spans are not sampled before that.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, INFLIGHT_MAX_EARLY);
	__type(key, __u64);
	__type(value, __u64);
} inflight_early SEC(".maps");

/* Watched goroutines (INFLIGHT_MAX_PARKED). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, INFLIGHT_MAX_PARKED);
	__type(key, __u32);
	__type(value, struct inflight_exec_key);
} inflight_parked SEC(".maps");

/*
 * The spans paired by thread in task storage: a stack of open spans per
 * thread (task_spans.h). The maps are usdt.bpf.c's; the collector loads
 * this object with MapReplacements for usdt_task_start and usdt_task_names.
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

/* Per USDT source paired by thread: its span and budget, written by
 * internal/inflight from usdt_sources and budgets; budget_ns 0 means not
 * watched. A source named by an argument has no name here: its spans'
 * names come from usdt_task_names and their budgets from budgets (exact
 * names). */
struct inflight_slot {
	__u64 budget_ns;
	__u64 name_id;
	__s32 samples;
	__u32 _pad;
	__u64 period_ns;
	char name[SPAN_NAME_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, INFLIGHT_SOURCES);
	__type(key, __u32);
	__type(value, struct inflight_slot);
} inflight_slots SEC(".maps");

/* The few kernel types the programs read, relocated against the running
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

static __always_inline long task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(((struct task_struct___new *)t)->__state))
		return BPF_CORE_READ((struct task_struct___new *)t, __state);
	return BPF_CORE_READ((struct task_struct___old *)t, state);
}

/* span_open reports whether the target's span s is still open: its start
 * is where the target saw it. Task storage cannot be read from the CPU
 * clock's interrupt or from sched_switch (bpf_task_storage_get returns
 * NULL there, seen on 6.18): those callers pass no task, and a USDT span
 * that ended since the last scan may get a sample or two more, which the
 * collector's Joiner drops (they follow the span's end). Targets that
 * usdt_inflight holds (neither flag) are checked by the scan only. */
static __always_inline int span_open(struct inflight_exec_key *k, struct inflight_target *w, struct inflight_tspan *s,
				     struct task_struct *task)
{
	if (w->flags & TARGET_SDK) {
		struct inflight_stack *e = bpf_map_lookup_elem(&inflight_exec, k);
		__u32 i = s->slot;

		if (!e || i >= INFLIGHT_DEPTH || i >= e->depth)
			return 0;
		return e->spans[i].start_ns == s->start_ns;
	}
	if ((w->flags & TARGET_FROM_TASK) && task) {
		struct usdt_task_spans *ts = bpf_task_storage_get(&usdt_task_start, task, 0, 0);
		__u32 i = s->slot & (TASK_SPANS_DEPTH - 1);

		if (!ts)
			return 0;
		/* Still on the stack (below the top), and not taken. */
		return ((ts->pos - 1 - i) & (TASK_SPANS_DEPTH - 1)) < ts->depth &&
		       ts->s[i].source != TASK_SPAN_TAKEN && ts->s[i].start_ns == s->start_ns;
	}
	return 1;
}

/* take decides whether a watched thread of execution is sampled now: it has
 * samples left, and, when paced (sched_switch), the last sample is a period
 * old. The iterator's samples are paced by the scans. */
static __always_inline int take(struct inflight_target *w, __u32 tgid, __u64 now, int paced)
{
	if (w->pid != tgid || w->samples <= 0)
		return 0;
	if (paced && now - w->last_ns < w->period_ns)
		return 0;
	w->last_ns = now;
	/* Two CPUs may race between the test and the decrement: at most one
	 * sample too many. (Using the value XADD returns needs -mcpu=v3.) */
	__sync_fetch_and_add(&w->samples, -1);
	return 1;
}

/* record reserves and fills an overrun record for span s, stacks left to
 * the caller; NULL when the ring buffer is full (counted). */
static __always_inline struct overrun *record(struct inflight_tspan *s, __u64 now, __u32 tgid, __u32 tid, __u32 status,
					      __u64 cgroup_id)
{
	struct overrun *r = bpf_ringbuf_reserve(&overruns, sizeof(*r), 0);

	if (!r) {
		count(COUNTER_RINGBUF_DROPS);
		return 0;
	}
	r->ts_ns = now;
	r->name_id = s->name_id;
	r->cgroup_id = cgroup_id;
	r->duration_ns = now - s->start_ns;
	r->budget_ns = s->budget_ns;
	r->start_ns = s->start_real;
	r->pid = tgid;
	r->tid = tid;
	r->status = OVERRUN_STILL_RUNNING | status;
	r->source = s->source;
	__builtin_memset(r->trace_id, 0, sizeof(r->trace_id));
	__builtin_memset(r->span_id, 0, sizeof(r->span_id));
	__builtin_memcpy(r->name, s->name, sizeof(r->name));
	__builtin_memset(r->labels, 0, sizeof(r->labels));
	r->labelset = 0;
	r->kind = SERIES_SPAN;
	r->other = 0;
	r->tgid = 0; /* aggregate.h fills it where a series key is */
	return r;
}

/* sample_current samples the target of the current thread's k: one record
 * per overdue span still open, with the current stacks. */
static __always_inline void sample_current(void *ctx, struct inflight_exec_key *k, struct inflight_target *w,
					   __u32 tid, __u32 status, __u64 now)
{
	if (!take(w, k->tgid, now, status & OVERRUN_OFF_CPU))
		return;
	for (__u32 i = 0; i < INFLIGHT_TARGET_SPANS; i++) {
		struct inflight_tspan *s = &w->spans[i];
		struct overrun *r;

		if (i >= w->nspans)
			break;
		if (!span_open(k, w, s, 0))
			continue;
		r = record(s, now, k->tgid, tid, status, bpf_get_current_cgroup_id());
		if (!r)
			return;
		bpf_get_current_comm(r->comm, sizeof(r->comm));
		r->ustack_len = bpf_get_stack(ctx, r->ustack, sizeof(r->ustack), BPF_F_USER_STACK);
		r->kstack_len = bpf_get_stack(ctx, r->kstack, sizeof(r->kstack), 0);
		bpf_ringbuf_submit(r, 0);
	}
}

/* sample_early samples, on the CPU, the open spans of k (in inflight_exec)
 * whose names are in inflight_early: one record per such span, its duration
 * the time run so far, below its budget or not. The collector's Joiner keeps
 * the records of a span that ends over its budget and drops the others. */
static __always_inline void sample_early(void *ctx, struct inflight_exec_key *k, __u32 tid, __u64 now)
{
	struct inflight_stack *e = bpf_map_lookup_elem(&inflight_exec, k);
	struct inflight_tspan s = {};

	if (!e)
		return;
	for (__u32 i = 0; i < INFLIGHT_DEPTH; i++) {
		struct inflight_open *o = &e->spans[i];
		struct overrun *r;
		__u64 *budget;

		if (i >= e->depth)
			break;
		budget = bpf_map_lookup_elem(&inflight_early, &o->name_id);
		if (!budget || now < o->start_ns)
			continue;
		s.start_ns = o->start_ns;
		s.start_real = o->start_real;
		s.name_id = o->name_id;
		s.budget_ns = *budget;
		s.source = o->source;
		__builtin_memcpy(s.name, o->name, sizeof(s.name));
		r = record(&s, now, k->tgid, tid, 0, bpf_get_current_cgroup_id());
		if (!r)
			return;
		bpf_get_current_comm(r->comm, sizeof(r->comm));
		r->ustack_len = bpf_get_stack(ctx, r->ustack, sizeof(r->ustack), BPF_F_USER_STACK);
		r->kstack_len = bpf_get_stack(ctx, r->kstack, sizeof(r->kstack), 0);
		bpf_ringbuf_submit(r, 0);
	}
}

/* still_runnable reports whether the thread sched_switch switches out
 * (prev) is still runnable: preempted, not blocked. */
static __always_inline int still_runnable(struct bpf_raw_tracepoint_args *ctx)
{
	return ctx->args[0] || task_state((struct task_struct *)ctx->args[1]) == 0;
}

/* sample looks up the current thread, and the goroutine it runs, among the
 * watched ones; with early (the CPU clock), one that is not watched has its
 * spans sampled from their start where inflight_early names them. With switch_ctx (sched_switch), a thread that is still
 * runnable is not sampled: checked only for a watched one, as the lookups
 * that miss are what every other context switch pays. */
static __always_inline int sample(void *ctx, __u32 status, struct bpf_raw_tracepoint_args *switch_ctx, int early)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct inflight_exec_key k = {.tgid = pid_tgid >> 32, .exec = (__u32)pid_tgid};
	struct inflight_target *w;
	__u64 now;
	__s64 *off;

	w = bpf_map_lookup_elem(&inflight_watch, &k);
	off = bpf_map_lookup_elem(&inflight_gprocs, &k.tgid);
	/* Keep clang from testing w | off: the verifier refuses pointer
	 * arithmetic. */
	asm volatile("" : "+r"(w));
	if (!w && !off && !early)
		return 0;
	if (switch_ctx && still_runnable(switch_ctx))
		return 0;
	now = bpf_ktime_get_ns();
	if (w)
		sample_current(ctx, &k, w, (__u32)pid_tgid, status, now);
	else if (early)
		sample_early(ctx, &k, (__u32)pid_tgid, now);
	if (!off)
		return 0;
	__u64 g = task_g((void *)bpf_get_current_task(), *off, 1);
	if (!g)
		return 0;
	k.exec = g;
	w = bpf_map_lookup_elem(&inflight_watch, &k);
	if ((w ? !(w->flags & TARGET_GOROUTINE) : !early) || !g_on_its_stack(g))
		return 0;
	if (w)
		sample_current(ctx, &k, w, (__u32)pid_tgid, status, now);
	else
		sample_early(ctx, &k, (__u32)pid_tgid, now);
	return 0;
}

/* The early path runs only while inflight_early has names: a thread that
 * is in neither map costs the clock's tick two failed look-ups, as it does
 * while anything is watched. */
SEC("perf_event")
int inflight_on_cpu(void *ctx)
{
	return sample(ctx, 0, 0, 1);
}

/* sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next):
 * it runs in prev's context, so "current" is the thread going off the CPU.
 * A thread still runnable (preempted, also where preempt is false, as on
 * the way back to user space) is the CPU clock's to sample: only one that
 * blocks is sampled here. */
SEC("raw_tp/sched_switch")
int inflight_off_cpu(struct bpf_raw_tracepoint_args *ctx)
{
	return sample(ctx, OVERRUN_OFF_CPU, ctx, 0);
}

/* inflight_scan's walk of one task's stack of open spans. */
struct scan_state {
	struct task_struct *task;
	struct usdt_task_spans *ts;
	struct inflight_target *t;
	__u64 now;
	__u32 pos, depth;
	__u32 n;
};

/* scan_one looks at the j-th oldest open span of the task. */
static long scan_one(__u32 j, struct scan_state *st)
{
	struct usdt_task_spans *ts = st->ts;
	struct inflight_target *t = st->t;
	struct inflight_slot *sl;
	__u64 budget, name_id;

	if (!ts || !t || j >= st->depth || st->n >= INFLIGHT_TARGET_SPANS)
		return 1;
	__u32 i = (st->pos - st->depth + j) & (TASK_SPANS_DEPTH - 1);
	__u64 start = ts->s[i].start_ns;
	__u32 source = ts->s[i].source;
	__u32 flags = ts->s[i].flags;

	if (!start || source == TASK_SPAN_TAKEN || st->now < start)
		return 0;
	sl = bpf_map_lookup_elem(&inflight_slots, &source);
	if (!sl)
		return 0;
	struct inflight_tspan *s = &t->spans[st->n & (INFLIGHT_TARGET_SPANS - 1)];
	budget = sl->budget_ns;
	name_id = sl->name_id;
	if (flags & TASK_SPAN_NAMED) {
		struct task_span_names *tn = bpf_task_storage_get(&usdt_task_names, st->task, 0, 0);
		struct budget *b;

		if (!tn)
			return 0;
		/* The target's name is the scratch buffer. */
		__builtin_memcpy(s->name, tn->name[i].name, sizeof(s->name));
		name_cut(s->name);
		name_id = span_name_id(s->name);
		struct core_state *c = core_get();

		b = c ? budget_exact(name_id, budget_word(c)) : NULL;
		budget = b ? b->budget_ns : 0;
	}
	if (!budget || st->now - start <= budget)
		return 0;
	if (!(flags & TASK_SPAN_NAMED))
		__builtin_memcpy(s->name, sl->name, sizeof(s->name));
	s->start_ns = start;
	s->name_id = name_id;
	s->budget_ns = budget;
	s->slot = i;
	s->source = SOURCE_USDT;
	t->samples = sl->samples;
	t->period_ns = sl->period_ns;
	st->n++;
	return 0;
}

/*
 * inflight_scan visits every task: a task whose stack of open USDT spans
 * holds spans over their budgets (the oldest first) gets an
 * inflight_watch entry (once per span: an entry for the same starts is
 * left alone, even when its samples are used up); an entry of ours whose
 * spans all ended is removed. Task storage in tracing programs and task
 * iterators need kernel 5.11+ and BTF.
 */
SEC("iter/task")
int inflight_scan(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct inflight_target *w, *t;
	struct inflight_exec_key k = {};
	struct scan_state st = {};
	__u32 n = 0, zero = 0;

	if (!task)
		return 0;
	t = bpf_map_lookup_elem(&inflight_scratch, &zero);
	if (!t)
		return 0;
	k.tgid = task->tgid;
	k.exec = (__u32)task->pid;
	w = bpf_map_lookup_elem(&inflight_watch, &k);
	if (w && !(w->flags & TARGET_FROM_TASK))
		return 0; /* the watcher's own */
	st.ts = bpf_task_storage_get(&usdt_task_start, task, 0, 0);
	if (st.ts) {
		st.task = task;
		st.t = t;
		st.now = bpf_ktime_get_ns();
		st.pos = st.ts->pos;
		st.depth = st.ts->depth;
		/* Unknown to the verifier, as the callback's starting state
		 * must be (see glob_try in aggregate.h), and 0: depth is at
		 * most TASK_SPANS_DEPTH. */
		st.n = st.depth / (2 * TASK_SPANS_DEPTH);
		bpf_loop(TASK_SPANS_DEPTH, scan_one, &st, 0);
		n = st.n;
	}
	if (!n) {
		if (w)
			bpf_map_delete_elem(&inflight_watch, &k);
		return 0;
	}
	/* The same spans as watched already: keep its samples count. */
	if (w && w->nspans == n && w->spans[0].start_ns == t->spans[0].start_ns)
		return 0;
	t->pid = task->tgid;
	t->flags = TARGET_FROM_TASK;
	t->nspans = n;
	t->last_ns = 0;
	bpf_map_update_elem(&inflight_watch, &k, t, BPF_ANY);
	return 0;
}

/* What inflight_list reports of a span open at least min_age_ns. */
struct inflight_candidate {
	struct inflight_exec_key key;
	__u32 slot; /* its depth */
	__u32 goroutine;
	__u32 tid;  /* the thread that started the newest span */
	__u32 source;
	__u32 flags; /* the start event's SPAN_F_* */
	__u32 _pad2;
	__u64 start_ns;
	__u64 start_real;
	__u64 name_id;
	char name[SPAN_NAME_LEN];
};

/* inflight_list's settings: [0] the least age of a span it reports (the
 * smallest budget), written by internal/inflight before each scan. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} inflight_cfg SEC(".maps");

struct bpf_iter__bpf_map_elem {
	struct bpf_iter_meta *meta;
	void *map;
	void *key;
	void *value;
} __attribute__((preserve_access_index));

/*
 * inflight_list walks inflight_exec in the kernel and writes out the open
 * spans old enough to be over some budget, so that a scan reads a few
 * records instead of every thread of execution's stack. Map element
 * iterators need kernel 5.9+.
 */
SEC("iter/bpf_map_elem")
int inflight_list(struct bpf_iter__bpf_map_elem *ctx)
{
	struct inflight_exec_key *k = ctx->key;
	struct inflight_stack *e = ctx->value;
	struct inflight_candidate c = {};
	__u32 zero = 0;
	__u64 *min_age = bpf_map_lookup_elem(&inflight_cfg, &zero);
	__u64 now = bpf_ktime_get_ns();

	if (!k || !e || !min_age)
		return 0;
	for (__u32 i = 0; i < INFLIGHT_DEPTH; i++) {
		struct inflight_open *o = &e->spans[i];

		if (i >= e->depth)
			break;
		if (now < o->start_ns || now - o->start_ns < *min_age)
			continue;
		c.key = *k;
		c.slot = i;
		c.goroutine = e->goroutine != 0;
		c.tid = e->tid;
		c.source = o->source;
		c.flags = o->flags;
		c.start_ns = o->start_ns;
		c.start_real = o->start_real;
		c.name_id = o->name_id;
		__builtin_memcpy(c.name, o->name, sizeof(c.name));
		bpf_seq_write(ctx->meta->seq, &c, sizeof(c));
	}
	return 0;
}

/* One user frame as frame pointers lay it out: the caller's saved frame
 * pointer, then the return address (x86-64's push rbp; arm64's frame
 * record at x29, which Go's arm64 frames keep too). */
struct user_frame {
	__u64 next;
	__u64 ret;
};

/* frame_readable says whether the frame record at bp lies below limit.
 * A global function: verified once, its result unknown to the caller, so
 * that the walk's loop states stay alike: comparing the two unknowns in
 * the loop itself had the verifier tell each iteration apart (past its
 * million instructions). */
SW_GLOBAL int frame_readable(__u64 bp, __u64 limit)
{
	return bp && bp + sizeof(struct user_frame) > bp && bp + sizeof(struct user_frame) <= limit;
}

/* walk fills r's user stack from pc and a frame pointer, reading the
 * task's memory: the frame-pointer walk the kernel does for the current
 * thread (perf_callchain_user), done for a thread that is not running.
 * It reads below limit only: the end of the stack's area, which
 * remote_area took (the frames of a thread's or goroutine's stack are in
 * one area, its stack). */
static __always_inline void walk(struct overrun *r, struct task_struct *task, __u64 pc, __u64 bp, __u64 limit)
{
	struct user_frame fr;
	__u64 n = 1;

	r->ustack[0] = pc;
	for (int i = 1; i < MAX_USTACK; i++) {
		if (!frame_readable(bp, limit) || bpf_copy_from_user_task(&fr, sizeof(fr), (void *)bp, task, 0) || !fr.ret)
			break;
		r->ustack[i] = fr.ret;
		n++;
		if (fr.next <= bp) /* frames go up the stack */
			break;
		bp = fr.next;
	}
	r->ustack_len = n * sizeof(__u64);
}

/*
 * sample_asleep samples the spans of a thread of execution that is not on
 * a CPU, from a saved context (pc, bp), reading its memory through task:
 * one record per span still open, each with the stack walked into it.
 * kernel says whether the task's kernel stack belongs to it (a thread
 * blocked in the kernel; not a parked goroutine). One ring buffer
 * reservation is held at a time: 6.1's verifier lost track of a second
 * one held across the loop ("Unreleased reference"), and a target rarely
 * has more than one span open, so walking once per record costs little.
 */
static __always_inline void sample_asleep(struct task_struct *task, struct inflight_exec_key *k, struct inflight_target *w,
					  __u64 now, __u32 tid, __u64 pc, __u64 bp, int kernel)
{
	__u64 cg = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
	__u64 limit;

	if (!take(w, k->tgid, now, 0))
		return;
	/* Looked at once, for every record's walk. */
	limit = bp ? remote_area(task, bp, sizeof(struct user_frame)) : 0;
	for (__u32 i = 0; i < INFLIGHT_TARGET_SPANS; i++) {
		struct inflight_tspan *s = &w->spans[i];
		struct overrun *r;

		if (i >= w->nspans)
			break;
		if (!span_open(k, w, s, task))
			continue;
		r = record(s, now, k->tgid, tid, OVERRUN_OFF_CPU, cg);
		if (!r)
			break;
		bpf_probe_read_kernel_str(r->comm, sizeof(r->comm), task->comm);
		r->kstack_len = kernel ? bpf_get_task_stack(task, r->kstack, sizeof(r->kstack), 0) : 0;
		walk(r, task, pc, bp, limit);
		bpf_ringbuf_submit(r, 0);
	}
}

/* The start of the Go runtime's struct g (runtime/runtime2.go), stable on
 * amd64 and arm64 since Go 1.5: stack bounds, the stack guards, _panic, _defer, m,
 * and the saved context sched (gobuf: sp, pc, g, ctxt, then lr and bp,
 * with a ret word between ctxt and lr before Go 1.25). */
#define G_WORDS 14
#define G_STACK_LO 0
#define G_STACK_HI 1
#define G_M 6
#define G_SCHED_SP 7
#define G_SCHED_PC 8
#define G_SCHED_BP_NEW 12 /* Go 1.25+ */
#define G_SCHED_BP_OLD 13 /* before: lr at 12 is 0 on amd64, and on arm64
				  * when mcall saved the context (a parked g) */

/* How far below its function's stack pointer a frame pointer may be. On
 * x86-64 rbp is at or above rsp. Go's arm64 prologue stores the frame
 * record (x29, x30) at 8 bytes below the new stack pointer and points x29
 * at it (STP (R29, R30), -8(RSP); SUB $8, RSP, R29: cmd/internal/obj/arm64),
 * so a parked g's sched.bp, saved by mcall from its caller's frame, is
 * sched.sp - 8. */
#if defined(__TARGET_ARCH_arm64)
#define G_FP_BELOW_SP 8
#else
#define G_FP_BELOW_SP 0
#endif

/* inflight_blocked's look at the watched goroutines of one process. */
struct parked_state {
	struct task_struct *task; /* the process's main thread */
	__u64 now;
	__u32 tgid;
};

/*
 * sample_parked samples the i-th goroutine of inflight_parked if it belongs
 * to the process, is watched with samples left and the Go scheduler parked
 * it (it has no m), from its saved context in the runtime's g (g.sched),
 * which Go's own tracebacks read. A zero tgid ends the list.
 */
static long sample_parked(__u64 i, struct parked_state *ps)
{
	__u32 key = i;
	struct inflight_exec_key *p = bpf_map_lookup_elem(&inflight_parked, &key);
	struct inflight_exec_key k = {};
	struct inflight_target *t;
	__u64 gw[G_WORDS];

	if (!p || !p->tgid)
		return 1;
	if (p->tgid != ps->tgid)
		return 0;
	k.tgid = p->tgid;
	k.exec = p->exec;
	t = bpf_map_lookup_elem(&inflight_watch, &k);
	if (!t || !(t->flags & TARGET_GOROUTINE) || t->samples <= 0)
		return 0;
	if (remote_read(gw, sizeof(gw), k.exec, ps->task))
		return 0;
	if (gw[G_M] || !gw[G_SCHED_SP] || !gw[G_SCHED_PC])
		return 0; /* on a thread: the thread samplers see it */
	__u64 bp = gw[G_SCHED_BP_NEW];
	__u64 lo = gw[G_SCHED_SP] - G_FP_BELOW_SP;
	if (bp < lo || bp >= gw[G_STACK_HI])
		bp = gw[G_SCHED_BP_OLD];
	if (bp < lo || bp >= gw[G_STACK_HI])
		return 0;
	sample_asleep(ps->task, &k, t, ps->now, 0, gw[G_SCHED_PC], bp, 0);
	return 0;
}

/*
 * inflight_blocked samples, at each scan, what the clock and sched_switch
 * cannot see: a watched thread that sleeps (or the watched goroutine
 * blocked in a system call on it), from its saved registers; and, at each
 * process's main thread, every watched goroutine of it that the Go
 * scheduler parked (sample_parked). Sleepable task iterators and
 * bpf_copy_from_user_task need kernel 5.18+ (bpf_loop 5.17+).
 */
SEC("iter.s/task")
int inflight_blocked(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct inflight_exec_key k = {};
	struct inflight_target *w = 0;
	__u64 now = bpf_ktime_get_ns();
	__s64 *off;

	if (!task)
		return 0;
	k.tgid = task->tgid;
	/* A running or runnable thread is the CPU clock's to sample. */
	if (task_state(task) != 0) {
		struct inflight_target *t;

		k.exec = (__u32)task->pid;
		t = bpf_map_lookup_elem(&inflight_watch, &k);
		if (t && !(t->flags & TARGET_GOROUTINE))
			w = t;
		off = bpf_map_lookup_elem(&inflight_gprocs, &k.tgid);
		if (!w && off) {
			__u64 g = task_g(task, *off, 0);

			if (g) {
				k.exec = g;
				t = bpf_map_lookup_elem(&inflight_watch, &k);
				if (t && (t->flags & TARGET_GOROUTINE))
					w = t;
			}
		}
		if (w) {
			struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
			__u64 ip = 0, bp = 0;

			if (regs) {
				/* The instruction pointer and the frame
				 * pointer (rbp; x29 on arm64). */
				bpf_probe_read_kernel(&ip, sizeof(ip), &PT_REGS_IP(regs));
				bpf_probe_read_kernel(&bp, sizeof(bp), &PT_REGS_FP(regs));
				sample_asleep(task, &k, w, now, task->pid, ip, bp, 1);
			}
		}
	}
	if (task->pid != task->tgid)
		return 0;
	/* Parked goroutines of this process: every watched one with samples
	 * left, each walked in a callback so that the walk is verified
	 * once, not once per entry of the list. */
	struct parked_state ps = {.task = task, .tgid = k.tgid, .now = now};
	bpf_loop(INFLIGHT_MAX_PARKED, sample_parked, &ps, 0);
	return 0;
}

/* Keep the types in BTF so bpf2go generates their Go mirrors. */
const struct inflight_target *unused_inflight_target __attribute__((unused));
const struct inflight_slot *unused_inflight_slot __attribute__((unused));
const struct usdt_task_spans *unused_usdt_task_spans __attribute__((unused));
const struct task_span *unused_task_span __attribute__((unused));
const struct inflight_stack *unused_inflight_stack __attribute__((unused));
const struct inflight_exec_key *unused_inflight_exec_key __attribute__((unused));
const struct inflight_candidate *unused_inflight_candidate __attribute__((unused));
const enum inflight_sizes *unused_inflight_sizes __attribute__((unused));
const enum inflight_watch_sizes *unused_inflight_watch_sizes __attribute__((unused));
const enum inflight_target_flags *unused_inflight_target_flags __attribute__((unused));
const enum overrun_status *unused_overrun_status __attribute__((unused));
