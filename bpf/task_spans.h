/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The USDT spans a thread has open: a stack per thread, in task storage
 * (usdt.bpf.c's usdt_task_start), so nested and recursive start/end pairs
 * pair the way the calls did. A start pushes {start time, source}; an end
 * of source S takes the newest open span of S: the top of the stack in
 * the common case, else the newest one below it (starts and ends of
 * different sources that interleave), which is marked taken (source
 * TASK_SPAN_TAKEN) and dropped once it reaches the top.
 *
 * The stack is a ring of TASK_SPANS_DEPTH entries: a start past the depth
 * overwrites the oldest open span, whose end then finds no start (both
 * counted by usdt.bpf.c), so a thread whose ends are sometimes skipped
 * (an exception path without the end probe) cannot fill it for good.
 *
 * Spans named by a probe argument keep their name in a second task
 * storage (usdt_task_names) at the same index, so threads that only run
 * spans of fixed names never allocate it. Its last entry is a scratch
 * buffer for single probes. Spans labelled by arguments of their start
 * probe keep those values there too.
 *
 * Readers from other tasks (inflight.bpf.c's task iterator) walk the live
 * entries from the top: entry (pos - 1 - d) % TASK_SPANS_DEPTH for d in
 * [0, depth), skipping taken ones. Entries are written before pos and
 * depth move, so a reader sees whole entries, perhaps one span late.
 */
#ifndef SPANWATCH_TASK_SPANS_H
#define SPANWATCH_TASK_SPANS_H

enum task_spans_sizes {
	TASK_SPANS_DEPTH = 16, /* a power of two */
};

#define TASK_SPAN_TAKEN 0xffffffffu /* task_span.source of a span taken from below the top */

/* task_span.flags */
enum task_span_flags {
	TASK_SPAN_NAMED = 1, /* its name is in usdt_task_names at the same index */
	TASK_SPAN_VALS = 2,  /* its start values are in usdt_task_names too */
	TASK_SPAN_VALS_OK_SHIFT = 8, /* bit 8 + i: start value i was read */
};

/* Arguments of a start probe kept with its open span until the end (the
 * labels a source takes from its start probe). */
enum task_span_vals_sizes {
	TASK_SPAN_VALS_MAX = 3,
};

struct task_span_vals {
	__u64 v[TASK_SPAN_VALS_MAX];
};

struct task_span {
	__u64 start_ns; /* bpf_ktime_get_ns() at the start */
	__u32 source;	/* index in usdt_sources, or TASK_SPAN_TAKEN */
	__u32 flags;	/* TASK_SPAN_* */
};

struct usdt_task_spans {
	__u32 pos;   /* ring position of the next start; the top is pos - 1 */
	__u32 depth; /* open spans, at most TASK_SPANS_DEPTH */
	struct task_span s[TASK_SPANS_DEPTH];
	/* The series slot (+ 1) this thread's last span of each fast-path
	 * source went to: the core checks it against the key (agg_in.hint)
	 * before looking the key up. */
	__u32 hint[TASK_SPANS_DEPTH];
};

/*
 * Where usdt.bpf.c builds a name from several pieces (string arguments
 * given as pointer and length, separators, a prefix) before copying it
 * into a slot: a piece of at most SPAN_NAME_LEN bytes is written at an
 * offset below SPAN_NAME_LEN, so the verifier sees every write inside it
 * without knowing how the offset and the length relate.
 */
struct task_name_buf {
	__u64 w[(SPAN_NAME_LEN * 2 + 8) / 8];
};

struct task_span_names {
	/* [TASK_SPANS_DEPTH]: a single probe's name, read and aggregated
	 * by one program run (per task, so no other run can touch it). */
	struct span_name name[TASK_SPANS_DEPTH + 1];
	struct task_name_buf scratch;
	/* Start values of open spans with TASK_SPAN_VALS, by index. */
	struct task_span_vals vals[TASK_SPANS_DEPTH];
};

#endif
