/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Spans of the span SDKs while they run: the SDKs send a span event with
 * SPAN_F_START when a span begins (emit.Start, the OpenTelemetry
 * processor's OnStart, spanwatch_span_start in include/spanwatch.h) and the
 * usual event when it ends. spanwatch.bpf.c hands the first to
 * inflight_start() instead of the aggregation core, and the second to
 * inflight_end() before it: here each thread of execution keeps a stack of
 * its open spans, which internal/inflight scans for spans past their
 * budget and bpf/inflight.bpf.c samples while they run.
 *
 * A thread of execution is the event's exec_id: a Go goroutine's g
 * pointer, so that a span follows its goroutine from thread to thread, or
 * the OS thread when exec_id is 0 (C, C++). For goroutines the samplers
 * need to know which goroutine a thread runs: the Go runtime keeps g in
 * thread-local storage, at a fixed offset from the thread's fs base.
 * inflight_start() finds that offset once per process, by looking for the
 * event's g pointer near the fs base, and records it in inflight_gprocs.
 *
 * The maps are defined here; inflight.bpf.c is loaded with
 * MapReplacements for them. inflight_start and inflight_end are BPF
 * subprograms, not inlined: their locals stay out of the caller's frame,
 * whose stack the aggregation core's own calls need.
 */
#ifndef SPANWATCH_INFLIGHT_H
#define SPANWATCH_INFLIGHT_H

#include "aggregate.h"
#include <bpf/bpf_core_read.h>

/* The event's logical thread: a goroutine, or 0 for the OS thread. */
#define SPAN_EXEC_ID(ev) ((ev)->exec_id)

enum inflight_sizes {
	/* Open spans kept per thread of execution; deeper ones are counted
	 * in depth but not kept (the outermost stay watched). */
	INFLIGHT_DEPTH = 4,
	/* Words below a Go thread's fs base where g may sit: -8 when the Go
	 * linker links alone, further down when a C linker lays out the TLS
	 * block (cgo). */
	INFLIGHT_TLS_SCAN = 16,
};

/* Set in struct overrun's status by the in-flight samplers (the span's
 * error flag is bit 0): the span had not ended when sampled, and the
 * thread was off the CPU. internal/inflight decodes them. */
enum overrun_status {
	OVERRUN_STILL_RUNNING = 0x80000000u,
	OVERRUN_OFF_CPU = 0x40000000u,
};

struct inflight_open {
	__u64 start_ns;	  /* bpf_ktime_get_ns() at the start event */
	__u64 start_real; /* the event's start_ns (CLOCK_REALTIME), its identity */
	__u64 name_id;	  /* span_name_id() of name */
	__u32 source;	  /* SOURCE_* the start came from */
	__u32 flags;	  /* the start event's SPAN_F_* */
	char name[SPAN_NAME_LEN];
};

struct inflight_exec_key {
	__u32 tgid;
	__u32 _pad;
	__u64 exec; /* the goroutine's g pointer, or the thread id */
};

struct inflight_stack {
	__u32 depth; /* open spans, also those past INFLIGHT_DEPTH */
	__u32 tid;   /* the thread that started the newest span */
	__u64 goroutine; /* 1: exec is a g pointer */
	struct inflight_open spans[INFLIGHT_DEPTH];
};

/*
 * Open spans by thread of execution. LRU: threads and goroutines that die
 * mid-span cannot fill it. The collector sizes it before loading.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct inflight_exec_key);
	__type(value, struct inflight_stack);
} inflight_exec SEC(".maps");

/* Go processes: tgid -> where g sits relative to the fs base (negative). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __s64);
} inflight_gprocs SEC(".maps");

/* A zeroed entry to insert from: too large for the BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct inflight_stack);
} inflight_zero SEC(".maps");

/* The x86-64 fs base of a task: where its thread-local storage ends. */
struct thread_struct___sw {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct task_struct___fs {
	struct thread_struct___sw thread;
} __attribute__((preserve_access_index));

static __always_inline __u64 task_fsbase(void *task)
{
	return BPF_CORE_READ((struct task_struct___fs *)task, thread.fsbase);
}

/* learn_tls records where g sits in the calling Go thread's TLS, found by
 * looking for g in the words below its fs base. */
static __always_inline void learn_tls(__u32 tgid, __u64 g)
{
	__u64 words[INFLIGHT_TLS_SCAN];
	__u64 fs = task_fsbase((void *)bpf_get_current_task());

	if (!fs || bpf_probe_read_user(words, sizeof(words), (void *)(fs - sizeof(words))))
		return;
#pragma unroll
	for (int i = INFLIGHT_TLS_SCAN - 1; i >= 0; i--) {
		if (words[i] == g) {
			__s64 off = -(__s64)((INFLIGHT_TLS_SCAN - i) * 8);
			bpf_map_update_elem(&inflight_gprocs, &tgid, &off, BPF_ANY);
			return;
		}
	}
}

/*
 * inflight_start pushes a started span on its thread of execution's stack.
 * ev->name is cut and NUL-padded afterwards (name_cut, span_name_id), as
 * the core does to a span's name.
 */
static __noinline __attribute__((unused)) void inflight_start(struct span_event *ev, __u32 source)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct inflight_exec_key k = {.tgid = pid_tgid >> 32};
	__u64 g = SPAN_EXEC_ID(ev);
	struct inflight_stack *e;

	k.exec = g ? g : (__u32)pid_tgid;
	e = bpf_map_lookup_elem(&inflight_exec, &k);
	if (!e) {
		__u32 zero = 0;
		struct inflight_stack *z = bpf_map_lookup_elem(&inflight_zero, &zero);

		if (!z)
			return;
		if (g)
			learn_tls(k.tgid, g);
		bpf_map_update_elem(&inflight_exec, &k, z, BPF_NOEXIST);
		e = bpf_map_lookup_elem(&inflight_exec, &k);
		if (!e)
			return;
	}
	__u32 d = e->depth;
	e->depth = d + 1;
	e->tid = (__u32)pid_tgid;
	e->goroutine = g != 0;
	if (d >= INFLIGHT_DEPTH)
		return;
	struct inflight_open *o = &e->spans[d];
	o->start_ns = bpf_ktime_get_ns();
	o->start_real = ev->start_ns;
	o->source = source;
	o->flags = ev->flags;
	name_cut(ev->name);
	__u64 id = span_name_id(ev->name);
	if (o->name_id != id) {
		o->name_id = id;
		__builtin_memcpy(o->name, ev->name, sizeof(o->name));
	}
}

/*
 * inflight_end pops an ended span, found by its start time, from its
 * thread of execution's stack; spans opened inside it and never ended are
 * dropped with it. An end without a start (a span recorded after the
 * fact) changes nothing.
 */
static __noinline __attribute__((unused)) void inflight_end(struct span_event *ev)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct inflight_exec_key k = {.tgid = pid_tgid >> 32};
	__u64 g = SPAN_EXEC_ID(ev);
	struct inflight_stack *e;

	if (!ev->start_ns)
		return;
	k.exec = g ? g : (__u32)pid_tgid;
	e = bpf_map_lookup_elem(&inflight_exec, &k);
	if (!e || !e->depth)
		return;
	__u32 d = e->depth;
	if (d > INFLIGHT_DEPTH) {
		/* The span is one of those past the kept ones, or, when a kept
		 * one matches, the nesting was broken: look. */
		d = INFLIGHT_DEPTH;
	}
#pragma unroll
	for (int i = INFLIGHT_DEPTH - 1; i >= 0; i--) {
		if (i < d && e->spans[i].start_real == ev->start_ns) {
			e->depth = i;
			return;
		}
	}
	if (e->depth > INFLIGHT_DEPTH)
		e->depth--;
}

#endif
