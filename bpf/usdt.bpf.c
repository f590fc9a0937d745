// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Spans and argument metrics from USDT probes. Each configured source
 * (internal/usdt SpanSource) is a slot in usdt_sources; each call site of
 * its probes is a spec in usdt_specs (see usdt.h) whose source field points
 * at that slot.
 *
 *  - usdt_start / usdt_end: a start probe and an end probe, paired in the
 *    kernel by thread (a stack per thread in task storage, task_spans.h,
 *    so nested and recursive pairs pair right) or by an argument (a request
 *    id) through usdt_inflight. The end evaluates the source's error
 *    predicate and labels over its own arguments and hands the span to the
 *    core (series_aggregate).
 *  - usdt_single: one probe that carries the span's duration in an
 *    argument (or none: spans of duration 0, counted), or a metric value.
 *  - usdt_start_s / usdt_single_s: the same, sleepable (uprobe.s, kernel
 *    6.0+; uprobe.multi.s on 6.6+), for sources named by a string argument:
 *    a sleepable program may fault in the page the string is on, which
 *    bpf_probe_read_user_str cannot (gcc's -z separate-code puts string
 *    literals in a .rodata segment that is often not resident). They use
 *    the bpf_copy_from_user_str kfunc (6.12+) where the kernel has it,
 *    else fault the page in with bpf_copy_from_user and read again.
 *  - A name that cannot be read (no sleepable uprobes, or a bad pointer)
 *    is looked up in usdt_names, where the collector writes the names it
 *    read through /proc/PID/mem; failing that the span is counted under a
 *    placeholder naming the process and address, "(name@ADDR.TGID)", and
 *    the collector is asked (usdt_name_requests) to read it: it reports
 *    the placeholder's series under the name it read, or as
 *    "(unreadable name)". No span is dropped for its name.
 *  - usdt_test_args: test only. Fetches every argument of the site into a
 *    ring buffer record, so tests can compare them with what the traced
 *    program passed.
 *
 * The fast paths: a start of a source paired by thread with a fixed name,
 * and its end when the source has no error predicate, labels or metric,
 * need neither spec nor arguments: the collector sets USDT_COOKIE_FAST and
 * the source's index in the cookie.
 *
 * This object includes aggregate.h and is loaded with MapReplacements for
 * the core's maps, so USDT spans feed the same aggregates as every source.
 * Needs kernel 5.11+ (task storage in tracing programs; the full core needs
 * 5.17+ anyway), 5.15+ for BPF cookies (else the IP map and no fast path),
 * 4.20+ for semaphores (reference counters). Built with SPANWATCH_COMPAT
 * (5.10+), thread stacks and names live in LRU hashes keyed by thread id,
 * and there are no sleepable programs.
 */

#include "aggregate.h"
#include "source.h"
#include "usdt.h"
#include "task_spans.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define USDT_NO_ARG SRC_NO_ARG
#define USDT_MAX_SOURCES 1024
#define USDT_MAX_INFLIGHT 65536

/* usdt_source.flags */
enum usdt_source_flags {
	USDT_SRC_ERROR = 1,  /* the error predicate applies */
	USDT_SRC_METRIC = 2, /* a metric: value_arg is the value */
	USDT_SRC_COMPOSED = 4, /* the name is built from name_segs */
};

/*
 * A name built from pieces (USDT_SRC_COMPOSED): text, NUL-terminated
 * strings and strings given as pointer and length, in order, up to
 * USDT_NAME_SEGS pieces or the first USDT_SEG_END. name_arg is then the
 * first string argument, so every reader that asks "is this source named
 * by an argument" still asks name_arg.
 */
enum usdt_name_sizes {
	USDT_NAME_SEGS = 8,
	USDT_SEG_TEXT = 16, /* text bytes one piece holds */
};

enum usdt_seg_kind {
	USDT_SEG_END = 0,
	USDT_SEG_TEXT_KIND = 1, /* text[0..text_len) */
	USDT_SEG_STR = 2,	/* a NUL-terminated string at argument arg */
	USDT_SEG_MEM = 3,	/* len_arg's value in bytes at argument arg */
};

struct usdt_name_seg {
	__u8 kind;     /* USDT_SEG_* */
	__u8 arg;      /* the argument holding the string's address */
	__u8 len_arg;  /* USDT_SEG_MEM: the argument holding its length */
	__u8 text_len; /* USDT_SEG_TEXT_KIND: bytes of text */
	__u8 _pad[4];
	char text[USDT_SEG_TEXT];
};

/* Counters of usdt_counters: what did not go the straight way. */
enum usdt_counter {
	USDT_COUNTER_UNPAIRED = 0,	/* ends without an open start */
	USDT_COUNTER_NEST_OVERFLOW = 1, /* starts that overwrote a thread's oldest open span */
	USDT_COUNTER_NAME_FALLBACK = 2, /* names counted under a placeholder */
	USDT_COUNTER_NAME_CACHED = 3,	/* names taken from usdt_names */
	USDT_COUNTER_NAME_REQ_DROPS = 4, /* placeholder requests lost: ring buffer full */
	USDT_COUNTER_NO_STORAGE = 5,	/* starts lost: task storage could not be allocated */
	USDT_COUNTER_MAX = 8,
};

/* One source: mirrored in internal/usdt/spec.go. */
struct usdt_source {
	char name[SPAN_NAME_LEN]; /* the span or metric name, unless name_arg is set */
	__u64 name_id;		  /* span_name_id(name), computed by the collector */
	__u8 name_arg;		  /* argument holding a pointer to the name string */
	__u8 key_arg;		  /* pair start and end by this argument, not the thread */
	__u8 value_arg;		  /* usdt_single: the duration in ns, or the metric value */
	__u8 flags;		  /* USDT_SRC_* */
	__u16 end_args;		  /* arguments the end (or single) probe fetches: bit n is arg n */
	__u16 _pad;
	struct src_pred error;
	struct src_labels labels;
	__u32 _pad2;
	struct usdt_name_seg name_segs[USDT_NAME_SEGS]; /* USDT_SRC_COMPOSED */
	/* Arguments of the start probe kept with the open span: at the end
	 * they are operands USDT_START_OPERAND + i (labels from the start). */
	__u8 start_arg[TASK_SPAN_VALS_MAX];
	__u8 start_n;
	__u32 _pad3;
};

/* The operand of the first start value: after the 12 arguments. */
#define USDT_START_OPERAND USDT_MAX_ARGS

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, USDT_MAX_SOURCES);
	__type(key, __u32);
	__type(value, struct usdt_source);
} usdt_sources SEC(".maps");

struct usdt_inflight_key {
	__u32 source;
	__u32 tgid;
	__u64 key; /* the key argument */
};

struct usdt_inflight {
	__u64 start_ns;
	char name[SPAN_NAME_LEN]; /* read at the start when name_arg is set */
	struct task_span_vals vals; /* read at the start when start_n is set */
	__u32 vals_ok;		    /* bit i: vals.v[i] was read */
	__u32 _pad;
};

/*
 * Spans paired by an argument, started and not yet ended. LRU, so starts
 * whose end never comes (a request abandoned) cannot fill it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, USDT_MAX_INFLIGHT);
	__type(key, struct usdt_inflight_key);
	__type(value, struct usdt_inflight);
} usdt_inflight SEC(".maps");

/* The open spans of each thread (task_spans.h). */
#ifndef SPANWATCH_COMPAT
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
#else
/* No task storage in uprobe programs before 5.11: hashes keyed by the
 * thread id, least recently used first out, so threads that exit with
 * spans open cannot fill them (the collector sizes them). A thread only
 * ever touches its own entry. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct usdt_task_spans);
} usdt_task_start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct task_span_names);
} usdt_task_names SEC(".maps");

/* A zeroed entry to insert from: too large for the BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct task_span_names);
} usdt_task_zero SEC(".maps");
#endif

/* Names the collector read for the fallback, by process and address. */
struct usdt_name_key {
	__u32 tgid;
	__u32 _pad;
	__u64 addr;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct usdt_name_key);
	__type(value, struct span_name);
} usdt_names SEC(".maps");

/* Placeholders the collector should read the name of. */
struct usdt_name_request {
	__u32 tgid;
	__u32 _pad;
	__u64 addr;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 << 10);
} usdt_name_requests SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, USDT_COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} usdt_counters SEC(".maps");

/*
 * What each source's probes did (usdt_source_counts, by usdt_sources'
 * index): hits are its end and single probes that found their source
 * (the ends of pairs, paired or not: a start alone makes nothing, and
 * counting starts too cost the start's fast path 15%); unpaired are its
 * ends without an open start, nest_overflow its starts lost to deeper
 * ones on a full thread stack. A source attached and never hit is
 * reported silent (source/usdt): a runtime whose probes need a switch to
 * fire looks idle otherwise.
 */
struct usdt_source_counts {
	__u64 hits;
	__u64 unpaired;
	__u64 nest_overflow;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, USDT_MAX_SOURCES);
	__type(key, __u32);
	__type(value, struct usdt_source_counts);
} usdt_source_counts SEC(".maps");

/* source_hit counts a hit of source and returns its counts (or NULL). */
static __always_inline struct usdt_source_counts *source_hit(__u32 source)
{
	struct usdt_source_counts *sc = bpf_map_lookup_elem(&usdt_source_counts, &source);

	if (sc)
		sc->hits++;
	return sc;
}

#ifndef SPANWATCH_COMPAT
/* Set by the collector before loading: the kernel has the
 * bpf_copy_from_user_str kfunc (6.12+). */
volatile const __u32 usdt_have_str_kfunc = 0;

extern int bpf_copy_from_user_str(void *dst, __u32 dst__sz, const void *unsafe_ptr__ign, __u64 flags) __weak __ksym;
#endif

/* The cookie's fast-path bit and the source index beside it (the spec
 * id is in the low 32 bits, USDT_COOKIE_SPEC). */
enum usdt_cookie_bits {
	USDT_COOKIE_SOURCE_SHIFT = 32,
	USDT_COOKIE_SOURCE_MASK = 0xffff,
	USDT_COOKIE_FAST_BIT = 63,
};

#define USDT_COOKIE_FAST (1ULL << USDT_COOKIE_FAST_BIT)
#define USDT_COOKIE_SOURCE(c) ((__u32)((c) >> USDT_COOKIE_SOURCE_SHIFT) & USDT_COOKIE_SOURCE_MASK)

static __always_inline void usdt_count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&usdt_counters, &idx);
	if (c)
		__sync_fetch_and_add(c, 1);
}

#ifndef SPANWATCH_COMPAT
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

/* spans_get returns the current thread's stack of open spans. */
static __always_inline struct usdt_task_spans *spans_get(int create)
{
	return bpf_task_storage_get(&usdt_task_start, bpf_get_current_task_btf(), 0,
				    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

/* names_get returns the current thread's name slots. */
static __always_inline struct task_span_names *names_get(int create)
{
	return bpf_task_storage_get(&usdt_task_names, bpf_get_current_task_btf(), 0,
				    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

static __always_inline __u64 current_cgroup_id(void)
{
	return task_cgroup_id(bpf_get_current_task_btf());
}
#else
/* thread_get returns the current thread's entry of map (usdt_task_start
 * or usdt_task_names), inserting a zeroed one when create is set. */
static __always_inline void *thread_get(void *map, int create)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), zero = 0;
	void *v = bpf_map_lookup_elem(map, &tid), *z;

	if (v || !create)
		return v;
	z = bpf_map_lookup_elem(&usdt_task_zero, &zero);
	if (!z)
		return 0;
	bpf_map_update_elem(map, &tid, z, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, &tid);
}

static __always_inline struct usdt_task_spans *spans_get(int create)
{
	return thread_get(&usdt_task_start, create);
}

static __always_inline struct task_span_names *names_get(int create)
{
	return thread_get(&usdt_task_names, create);
}

/* No BTF pointers to the task in uprobe programs before 5.11: the
 * helper. */
static __always_inline __u64 current_cgroup_id(void)
{
	return bpf_get_current_cgroup_id();
}
#endif

/* usdt_arg_get is usdt_arg as a global function: verified once. */
SW_GLOBAL int usdt_arg_get(sw_ctx_regs *ctx, const struct usdt_spec *spec, __u32 n, __u64 *res)
{
	if (!spec || !res)
		return -22;
	return usdt_arg((struct pt_regs *)ctx, spec, n, res);
}

/* usdt_fetch reads the arguments in mask into o. An argument that cannot
 * be read is left out of o->ok and counted. */
SW_GLOBAL int usdt_fetch(sw_ctx_regs *ctx, const struct usdt_spec *spec, __u32 mask, struct src_operands *o)
{
	if (!spec || !o)
		return 0;
	o->ok = 0;
	o->is_signed = 0;
	for (__u32 i = 0; i < USDT_MAX_ARGS; i++) {
		if (!((mask >> i) & 1))
			continue;
		if (usdt_arg_get(ctx, spec, i, &o->v[i & (SRC_OPERANDS - 1)])) {
			count(COUNTER_READ_ERRORS);
			continue;
		}
		o->ok |= 1 << i;
		o->is_signed |= (__u32)(spec->args[i].is_signed & 1) << i;
	}
	return 0;
}

/* hex writes the n low nibbles of v, most significant first. */
static __always_inline void hex(__u8 *dst, __u64 v, int n)
{
#pragma unroll
	for (int i = 0; i < 16; i++) {
		if (i >= n)
			break;
		__u64 d = (v >> (4 * (n - 1 - i))) & 15;
		/* '0' + d, and 39 more for a..f, where 9 - d wraps. The
		 * empty asm hides that a10 is 0 or 1: clang would make the
		 * product a branch, and 24 digits of branches are 2^24 paths
		 * to a verifier that does not prune them (1M instructions
		 * processed on 5.10, 737k on 6.1; 6.18 prunes them). */
		__u64 a10 = (9 - d) >> 63;
		asm volatile("" : "+r"(a10));
		dst[i] = '0' + d + a10 * 39;
	}
}

/*
 * usdt_name_unread fills dst with the name at addr that could not be read:
 * the collector's copy from usdt_names, else the placeholder
 * "(name@ADDR.TGID)" (16 and 8 hex digits), asking the collector to read
 * it. A global function: verified once.
 */
SW_GLOBAL int usdt_name_unread(__u64 addr, struct span_name *dst)
{
	struct usdt_name_key k = {.tgid = bpf_get_current_pid_tgid() >> 32, .addr = addr};
	struct span_name *cached;
	struct usdt_name_request *r;

	if (!dst)
		return 0;
	cached = bpf_map_lookup_elem(&usdt_names, &k);
	if (cached) {
		/* By words: both are 8-byte aligned (map values, and names at
		 * multiples of 8 in them). */
		__u64 *d = (__u64 *)dst, *c = (__u64 *)cached;
#pragma unroll
		for (int i = 0; i < SPAN_NAME_LEN / 8; i++)
			d[i] = c[i];
		usdt_count(USDT_COUNTER_NAME_CACHED);
		return 0;
	}
	__u8 *n = (__u8 *)dst->name;
	__builtin_memcpy(n, "(name@", 6);
	hex(n + 6, addr, 16);
	n[22] = '.';
	hex(n + 23, k.tgid, 8);
	n[31] = ')';
	n[32] = 0;
	n[SPAN_NAME_LEN - 1] = 0;
	usdt_count(USDT_COUNTER_NAME_FALLBACK);
	r = bpf_ringbuf_reserve(&usdt_name_requests, sizeof(*r), 0);
	if (!r) {
		usdt_count(USDT_COUNTER_NAME_REQ_DROPS);
		return 0;
	}
	r->tgid = k.tgid;
	r->_pad = 0;
	r->addr = addr;
	bpf_ringbuf_submit(r, 0);
	return 0;
}

/* usdt_name_id cuts a name read from user memory (name_cut), hashes it
 * and leaves it NUL-padded. Global: verified once. */
SW_GLOBAL __u64 usdt_name_id(struct span_name *n)
{
	if (!n)
		return 0;
	name_cut(n->name);
	return span_name_id(n->name);
}

/*
 * read_name reads the string argument n into dst (SPAN_NAME_LEN bytes,
 * with the byte after the first SPAN_NAME_LEN - 1 at the end, as name_cut
 * wants). Sleepable programs can fault its page in; when the string
 * cannot be read, usdt_name_unread names it.
 */
static __always_inline void read_name(struct pt_regs *ctx, const struct usdt_spec *spec, __u8 n,
				      struct span_name *dst, int sleepable)
{
	__u64 ptr = 0;
	long len;
#ifndef SPANWATCH_COMPAT
	char b;
#endif

	if (usdt_arg_get((sw_ctx_regs *)ctx, spec, n, &ptr)) {
		count(COUNTER_READ_ERRORS);
		usdt_name_unread(0, dst);
		return;
	}
#ifndef SPANWATCH_COMPAT
	if (sleepable && usdt_have_str_kfunc) {
		len = bpf_copy_from_user_str(dst->name, SPAN_NAME_LEN, (void *)ptr, 0);
	} else {
		len = bpf_probe_read_user_str(dst->name, SPAN_NAME_LEN, (void *)ptr);
		if (sleepable && len < 0 && bpf_copy_from_user(&b, 1, (void *)ptr) == 0) {
			/* The page is resident now; the string may go on
			 * into the next one. */
			len = bpf_probe_read_user_str(dst->name, SPAN_NAME_LEN, (void *)ptr);
			if (len < 0 && bpf_copy_from_user(&b, 1, (void *)((ptr | 4095) + 1)) == 0)
				len = bpf_probe_read_user_str(dst->name, SPAN_NAME_LEN, (void *)ptr);
		}
	}
#else
	/* No sleepable uprobes before 6.0 (and no kfuncs here). */
	len = bpf_probe_read_user_str(dst->name, SPAN_NAME_LEN, (void *)ptr);
#endif
	if (len < 0) {
		usdt_name_unread(ptr, dst);
		return;
	}
	/* A full buffer: name_cut needs the byte after the first 127. */
	if (len == SPAN_NAME_LEN) {
#ifndef SPANWATCH_COMPAT
		long err = sleepable ? bpf_copy_from_user(&dst->name[SPAN_NAME_LEN - 1], 1, (void *)ptr + SPAN_NAME_LEN - 1)
				     : bpf_probe_read_user(&dst->name[SPAN_NAME_LEN - 1], 1, (void *)ptr + SPAN_NAME_LEN - 1);
#else
		long err = bpf_probe_read_user(&dst->name[SPAN_NAME_LEN - 1], 1, (void *)ptr + SPAN_NAME_LEN - 1);
#endif
		if (err)
			dst->name[SPAN_NAME_LEN - 1] = 0;
	}
}

/*
 * name_seg appends one piece of a composed name to nb at off (the bytes
 * written so far) and returns the new count. A string is read exactly:
 * its length from its argument, clamped to what is left of the name (a
 * negative length is an error, a huge one is cut), never trusted. A piece
 * that cannot be read is written as "?" and counted as a read error.
 */
static __always_inline __u32 name_seg(sw_ctx_regs *ctx, const struct usdt_spec *spec, const struct usdt_name_seg *sg,
				      struct task_name_buf *nb, __u32 off, int sleepable)
{
	__u64 ptr = 0, len = 0, n;
	long err;

	if (!spec || !sg || !nb)
		return off;
	if (off >= SPAN_NAME_LEN)
		return SPAN_NAME_LEN;
	char *d = (char *)nb->w + off;
	__u32 room = SPAN_NAME_LEN - off;

	switch (sg->kind) {
	case USDT_SEG_TEXT_KIND:
		__builtin_memcpy(d, sg->text, USDT_SEG_TEXT);
		n = sg->text_len;
		if (n > room)
			n = room;
		return off + n;
	case USDT_SEG_STR:
		if (usdt_arg_get(ctx, spec, sg->arg, &ptr))
			break;
		err = bpf_probe_read_user_str(d, room + 1, (void *)ptr);
#ifndef SPANWATCH_COMPAT
		if (sleepable && err < 0 && bpf_copy_from_user(&len, 1, (void *)ptr) == 0) {
			/* The page is resident now; the string may go on into
			 * the next one. */
			err = bpf_probe_read_user_str(d, room + 1, (void *)ptr);
			if (err < 0 && bpf_copy_from_user(&len, 1, (void *)((ptr | 4095) + 1)) == 0)
				err = bpf_probe_read_user_str(d, room + 1, (void *)ptr);
		}
#endif
		if (err <= 0)
			break;
		return off + err - 1;
	case USDT_SEG_MEM:
		if (usdt_arg_get(ctx, spec, sg->arg, &ptr) || usdt_arg_get(ctx, spec, sg->len_arg, &len))
			break;
		if ((__s64)len < 0)
			break;
		n = len < room ? len : room;
		/* The verifier does not relate n to room: bound it by a
		 * constant it sees (the compiler would drop this otherwise). */
		asm volatile("" : "+r"(n));
		if (n > SPAN_NAME_LEN)
			n = SPAN_NAME_LEN;
#ifndef SPANWATCH_COMPAT
		if (sleepable)
			err = bpf_copy_from_user(d, n, (void *)ptr);
		else
#endif
			err = bpf_probe_read_user(d, n, (void *)ptr);
		if (err)
			break;
		return off + n;
	default:
		return off;
	}
	count(COUNTER_READ_ERRORS);
	d[0] = '?';
	return off + 1;
}

/* The pieces as global functions: verified once. */
SW_GLOBAL __u32 usdt_name_piece(sw_ctx_regs *ctx, const struct usdt_spec *spec, const struct usdt_name_seg *sg,
			      struct task_name_buf *nb, __u32 off)
{
	return name_seg(ctx, spec, sg, nb, off, 0);
}

#ifndef SPANWATCH_COMPAT
SW_GLOBAL __u32 usdt_name_piece_s(sw_ctx_regs *ctx, const struct usdt_spec *spec, const struct usdt_name_seg *sg,
				struct task_name_buf *nb, __u32 off)
{
	return name_seg(ctx, spec, sg, nb, off, 1);
}
#endif

/*
 * name_compose builds the name of a USDT_SRC_COMPOSED source in nb and
 * copies it into dst, with the byte after the first SPAN_NAME_LEN - 1 at
 * the end, as name_cut wants.
 */
static __always_inline void name_compose(sw_ctx_regs *ctx, const struct usdt_spec *spec, const struct usdt_source *src,
					 struct task_name_buf *nb, struct span_name *dst, int sleepable)
{
	__u32 off = 0;

	for (int i = 0; i < USDT_NAME_SEGS; i++) {
		if (src->name_segs[i].kind == USDT_SEG_END)
			break;
#ifndef SPANWATCH_COMPAT
		if (sleepable)
			off = usdt_name_piece_s(ctx, spec, &src->name_segs[i], nb, off);
		else
#endif
			off = usdt_name_piece(ctx, spec, &src->name_segs[i], nb, off);
	}
	asm volatile("" : "+r"(off));
	if (off > SPAN_NAME_LEN)
		off = SPAN_NAME_LEN;
	if (off < SPAN_NAME_LEN)
		((char *)nb->w)[off] = 0;
	__u64 *d = (__u64 *)dst->name;
#pragma unroll
	for (int i = 0; i < SPAN_NAME_LEN / 8; i++)
		d[i] = nb->w[i];
}

SW_GLOBAL int usdt_name_compose(sw_ctx_regs *ctx, const struct usdt_spec *spec, const struct usdt_source *src,
				struct task_name_buf *nb, struct span_name *dst)
{
	if (!spec || !src || !nb || !dst)
		return 0;
	name_compose(ctx, spec, src, nb, dst, 0);
	return 0;
}

#ifndef SPANWATCH_COMPAT
SW_GLOBAL int usdt_name_compose_s(sw_ctx_regs *ctx, const struct usdt_spec *spec, const struct usdt_source *src,
				  struct task_name_buf *nb, struct span_name *dst)
{
	if (!spec || !src || !nb || !dst)
		return 0;
	name_compose(ctx, spec, src, nb, dst, 1);
	return 0;
}
#endif

/*
 * source_name reads the name of a source named by arguments into dst:
 * one NUL-terminated string (read_name, with the collector's fallback),
 * or a composed name (tn is the thread's name storage, for its scratch).
 */
static __always_inline void source_name(struct pt_regs *ctx, const struct usdt_spec *spec, const struct usdt_source *src,
					struct task_span_names *tn, struct span_name *dst, int sleepable)
{
	if (!(src->flags & USDT_SRC_COMPOSED)) {
		read_name(ctx, spec, src->name_arg, dst, sleepable);
		return;
	}
	if (!tn) {
		usdt_count(USDT_COUNTER_NO_STORAGE);
		usdt_name_unread(0, dst);
		return;
	}
#ifndef SPANWATCH_COMPAT
	if (sleepable) {
		usdt_name_compose_s((sw_ctx_regs *)ctx, spec, src, &tn->scratch, dst);
		return;
	}
#endif
	usdt_name_compose((sw_ctx_regs *)ctx, spec, src, &tn->scratch, dst);
}

/*
 * usdt_start_vals reads the start arguments a source keeps with its open
 * span into out and returns the bits of those read. Global: verified
 * once.
 */
SW_GLOBAL __u32 usdt_start_vals(sw_ctx_regs *ctx, const struct usdt_spec *spec, const struct usdt_source *src,
				struct task_span_vals *out)
{
	__u32 ok = 0;

	if (!spec || !src || !out)
		return 0;
	for (__u32 i = 0; i < TASK_SPAN_VALS_MAX; i++) {
		out->v[i] = 0;
		if (i >= src->start_n)
			continue;
		if (usdt_arg_get(ctx, spec, src->start_arg[i], &out->v[i])) {
			count(COUNTER_READ_ERRORS);
			continue;
		}
		ok |= 1 << i;
	}
	return ok;
}

/* spans_push opens a span of source on the thread's stack (ts), at the
 * index *idx names; the oldest open span gives way when it is full. */
static __always_inline void spans_push(struct usdt_task_spans *ts, __u32 idx, __u32 source, __u64 start, __u32 flags)
{
	struct task_span *e = &ts->s[idx & (TASK_SPANS_DEPTH - 1)];

	if (ts->depth < TASK_SPANS_DEPTH) {
		ts->depth++;
	} else {
		/* e is the oldest open span: its source loses it. */
		__u32 lost = e->source;
		struct usdt_source_counts *sc = bpf_map_lookup_elem(&usdt_source_counts, &lost);

		if (sc)
			sc->nest_overflow++;
		usdt_count(USDT_COUNTER_NEST_OVERFLOW);
	}
	e->start_ns = start;
	e->source = source;
	e->flags = flags;
	ts->pos++;
}

/* A span taken from a thread's stack. */
struct taken {
	__u64 start_ns;
	__u32 idx;
	__u32 flags;
};

/* spans_drop_taken drops the spans taken from below that are on top of
 * the stack now. */
static __always_inline void spans_drop_taken(struct usdt_task_spans *ts)
{
	__u32 pos = ts->pos, depth = ts->depth;

	for (__u32 d = 0; d < TASK_SPANS_DEPTH; d++) {
		if (!depth || ts->s[(pos - 1) & (TASK_SPANS_DEPTH - 1)].source != TASK_SPAN_TAKEN)
			break;
		pos--;
		depth--;
	}
	ts->pos = pos;
	ts->depth = depth;
}

/* spans_drop is spans_drop_taken as a global function. */
SW_GLOBAL int spans_drop(struct usdt_task_spans *ts)
{
	if (ts)
		spans_drop_taken(ts);
	return 0;
}

/*
 * spans_take_deep takes the newest open span of source, marking it taken
 * when it is below the top, and drops taken spans from the top. It returns
 * 0 and fills t, or -1 when the thread has no open span of source. A
 * global function: the rare path, verified once.
 */
SW_GLOBAL int spans_take_deep(struct usdt_task_spans *ts, __u32 source, struct taken *t)
{
	if (!ts || !t)
		return -1;
	__u32 pos = ts->pos, depth = ts->depth;
	int found = -1;

	for (__u32 d = 0; d < TASK_SPANS_DEPTH; d++) {
		if (d >= depth)
			break;
		__u32 i = (pos - 1 - d) & (TASK_SPANS_DEPTH - 1);
		if (ts->s[i].source != source)
			continue;
		t->start_ns = ts->s[i].start_ns;
		t->idx = i;
		t->flags = ts->s[i].flags;
		ts->s[i].source = TASK_SPAN_TAKEN;
		found = 0;
		break;
	}
	spans_drop_taken(ts);
	return found;
}

/* spans_take takes the newest open span of source: the top of the stack
 * in the common case. */
static __always_inline int spans_take(struct usdt_task_spans *ts, __u32 source, struct taken *t)
{
	__u32 pos = ts->pos, depth = ts->depth;
	__u32 top = (pos - 1) & (TASK_SPANS_DEPTH - 1);

	if (!depth)
		return -1;
	if (ts->s[top].source != source)
		return spans_take_deep(ts, source, t);
	t->start_ns = ts->s[top].start_ns;
	t->idx = top;
	t->flags = ts->s[top].flags;
	ts->pos = pos - 1;
	ts->depth = depth - 1;
	/* A span taken from below earlier may be on top now. */
	if (depth > 1 && ts->s[(pos - 2) & (TASK_SPANS_DEPTH - 1)].source == TASK_SPAN_TAKEN)
		spans_drop(ts);
	return 0;
}

static __always_inline int inflight_key(struct pt_regs *ctx, const struct usdt_spec *spec,
					const struct usdt_source *src, struct usdt_inflight_key *k)
{
	k->source = spec->source;
	k->tgid = bpf_get_current_pid_tgid() >> 32;
	if (usdt_arg_get((sw_ctx_regs *)ctx, spec, src->key_arg, &k->key)) {
		count(COUNTER_READ_ERRORS);
		return -1;
	}
	return 0;
}

/* start_slow opens a span with the site's spec: by key argument, or on the
 * thread's stack, reading its name when an argument names it. */
static __always_inline int start_slow(struct pt_regs *ctx, __u64 cookie, __u64 now, int sleepable)
{
	struct usdt_spec *spec = usdt_spec_from(ctx, cookie);
	struct usdt_source *src;

	if (!spec)
		return 0;
	src = bpf_map_lookup_elem(&usdt_sources, &spec->source);
	if (!src)
		return 0;
	if (src->key_arg != USDT_NO_ARG) {
		struct usdt_inflight_key k;
		struct usdt_inflight *in;
		struct usdt_inflight zero = {};

		if (inflight_key(ctx, spec, src, &k))
			return 0;
		if (bpf_map_update_elem(&usdt_inflight, &k, &zero, BPF_ANY))
			return 0;
		in = bpf_map_lookup_elem(&usdt_inflight, &k);
		if (!in)
			return 0;
		if (src->name_arg != USDT_NO_ARG) {
			struct task_span_names *tn = 0;

			if (src->flags & USDT_SRC_COMPOSED)
				tn = names_get(1);
			source_name(ctx, spec, src, tn, (struct span_name *)in->name, sleepable);
		}
		if (src->start_n)
			in->vals_ok = usdt_start_vals((sw_ctx_regs *)ctx, spec, src, &in->vals);
		in->start_ns = now;
		return 0;
	}
	struct usdt_task_spans *ts = spans_get(1);
	__u32 flags = 0;

	if (!ts) {
		usdt_count(USDT_COUNTER_NO_STORAGE);
		return 0;
	}
	__u32 idx = ts->pos & (TASK_SPANS_DEPTH - 1);
	if (src->name_arg != USDT_NO_ARG || src->start_n) {
		struct task_span_names *tn = names_get(1);
		if (!tn) {
			usdt_count(USDT_COUNTER_NO_STORAGE);
		} else {
			if (src->name_arg != USDT_NO_ARG) {
				source_name(ctx, spec, src, tn, &tn->name[idx], sleepable);
				flags = TASK_SPAN_NAMED;
			}
			if (src->start_n) {
				__u32 ok = usdt_start_vals((sw_ctx_regs *)ctx, spec, src, &tn->vals[idx]);
				flags |= TASK_SPAN_VALS | (ok << TASK_SPAN_VALS_OK_SHIFT);
			}
		}
	}
	spans_push(ts, idx, spec->source, now, flags);
	return 0;
}

static __always_inline int start(struct pt_regs *ctx, int sleepable)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 cookie = usdt_cookie(ctx);

	if (cookie & USDT_COOKIE_FAST) {
		struct usdt_task_spans *ts = spans_get(1);
		if (!ts) {
			usdt_count(USDT_COUNTER_NO_STORAGE);
			return 0;
		}
		spans_push(ts, ts->pos, USDT_COOKIE_SOURCE(cookie), now, 0);
		return 0;
	}
	return start_slow(ctx, cookie, now, sleepable);
}

SEC("uprobe")
int usdt_start(struct pt_regs *ctx)
{
	return start(ctx, 0);
}

#ifndef SPANWATCH_COMPAT
SEC("uprobe.s")
int usdt_start_s(struct pt_regs *ctx)
{
	return start(ctx, 1);
}
#endif

/*
 * finish evaluates the source's error predicate and labels over the
 * operands (ops is NULL when the source has neither) and hands the value
 * to the core. in carries the name, its id, the cgroup and the value.
 */
static __always_inline void finish(struct pt_regs *ctx, const struct usdt_source *src,
				   const struct src_operands *ops, struct agg_in *in)
{
	if (ops) {
		if (src->flags & USDT_SRC_ERROR)
			in->error = src_pred_holds(&src->error, ops);
		if (src->labels.labelset)
			src_labels_apply(&src->labels, ops, &in->key);
	}
	in->source = SOURCE_USDT;
	series_aggregate(ctx, in);
}

/*
 * usdt_end ends the newest open span of the site's source on the thread's
 * stack (or, for a source paired by a key argument, the span of that key).
 * On the fast path (USDT_COOKIE_FAST: a source paired by thread with a
 * fixed name, no predicate, labels or metric) it reads no spec and no
 * argument. One call of the core, so the verifier walks it once.
 */
SEC("uprobe")
int usdt_end(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 cookie = usdt_cookie(ctx);
	struct usdt_inflight *inf = 0;
	struct usdt_inflight_key k;
	struct usdt_task_spans *ts;
	struct src_operands ops, *opsp = 0;
	struct usdt_source *src;
	struct usdt_spec *spec = 0;
	struct agg_in in = {};
	struct usdt_source_counts *sc;
	struct task_span_vals *vals = 0;
	__u32 vals_ok = 0;
	struct taken t;
	__u32 source;

	if (cookie & USDT_COOKIE_FAST) {
		source = USDT_COOKIE_SOURCE(cookie);
	} else {
		spec = usdt_spec_from(ctx, cookie);
		if (!spec)
			return 0;
		source = spec->source;
	}
	sc = source_hit(source);
	src = bpf_map_lookup_elem(&usdt_sources, &source);
	if (!src)
		return 0;
	in.name = src->name;
	in.key.name_id = src->name_id;
	if (spec && src->key_arg != USDT_NO_ARG) {
		if (inflight_key(ctx, spec, src, &k))
			return 0;
		inf = bpf_map_lookup_elem(&usdt_inflight, &k);
		if (!inf) {
			usdt_count(USDT_COUNTER_UNPAIRED);
			if (sc)
				sc->unpaired++;
			return 0;
		}
		in.value = now - inf->start_ns;
		if (src->name_arg != USDT_NO_ARG) {
			in.name = inf->name;
			in.key.name_id = usdt_name_id((struct span_name *)inf->name);
		}
		if (src->start_n) {
			vals = &inf->vals;
			vals_ok = inf->vals_ok;
		}
	} else {
		ts = spans_get(0);
		if (!ts || spans_take(ts, source, &t)) {
			usdt_count(USDT_COUNTER_UNPAIRED);
			if (sc)
				sc->unpaired++;
			return 0;
		}
		in.value = now - t.start_ns;
		/* Where this thread's last span of the source went: the core
		 * checks the key there before hashing it. */
		in.hint = &ts->hint[source & (TASK_SPANS_DEPTH - 1)];
		if (t.flags & (TASK_SPAN_NAMED | TASK_SPAN_VALS)) {
			struct task_span_names *tn = names_get(0);
			if (tn && (t.flags & TASK_SPAN_NAMED)) {
				struct span_name *n = &tn->name[t.idx & (TASK_SPANS_DEPTH - 1)];
				in.name = n->name;
				in.key.name_id = usdt_name_id(n);
			}
			if (tn && (t.flags & TASK_SPAN_VALS)) {
				vals = &tn->vals[t.idx & (TASK_SPANS_DEPTH - 1)];
				vals_ok = t.flags >> TASK_SPAN_VALS_OK_SHIFT;
			}
		}
	}
	in.key.cgroup_id = current_cgroup_id();
	if (spec && (src->end_args || src->start_n)) {
		__builtin_memset(&ops, 0, sizeof(ops));
		usdt_fetch((sw_ctx_regs *)ctx, spec, src->end_args, &ops);
		/* The start's values: operands after the arguments. A span
		 * without them (no storage at its start) leaves them unread. */
		if (vals) {
#pragma unroll
			for (int i = 0; i < TASK_SPAN_VALS_MAX; i++)
				ops.v[USDT_START_OPERAND + i] = vals->v[i];
			ops.ok |= (vals_ok & ((1 << TASK_SPAN_VALS_MAX) - 1)) << USDT_START_OPERAND;
		}
		opsp = &ops;
	}
	finish(ctx, src, opsp, &in);
	if (inf)
		bpf_map_delete_elem(&usdt_inflight, &k);
	return 0;
}

static __always_inline int single(struct pt_regs *ctx, int sleepable)
{
	struct usdt_spec *spec = usdt_spec(ctx);
	struct src_operands ops, *opsp = 0;
	struct usdt_source *src;
	struct agg_in in = {};

	if (!spec)
		return 0;
	source_hit(spec->source);
	src = bpf_map_lookup_elem(&usdt_sources, &spec->source);
	if (!src)
		return 0;
	if (src->end_args) {
		__builtin_memset(&ops, 0, sizeof(ops));
		usdt_fetch((sw_ctx_regs *)ctx, spec, src->end_args, &ops);
		opsp = &ops;
		if (src->value_arg != USDT_NO_ARG) {
			__u32 k = src->value_arg & (SRC_OPERANDS - 1);
			if (!((ops.ok >> k) & 1))
				return 0; /* counted by usdt_fetch */
			in.value = ops.v[k];
		}
	}
	if (src->flags & USDT_SRC_METRIC)
		in.key.kind = SERIES_METRIC;
	in.name = src->name;
	in.key.name_id = src->name_id;
	if (src->name_arg != USDT_NO_ARG) {
		struct task_span_names *tn = names_get(1);
		if (!tn) {
			usdt_count(USDT_COUNTER_NO_STORAGE);
			return 0;
		}
		struct span_name *n = &tn->name[TASK_SPANS_DEPTH];
		source_name(ctx, spec, src, tn, n, sleepable);
		in.name = n->name;
		in.key.name_id = usdt_name_id(n);
	}
	in.key.cgroup_id = current_cgroup_id();
	finish(ctx, src, opsp, &in);
	return 0;
}

SEC("uprobe")
int usdt_single(struct pt_regs *ctx)
{
	return single(ctx, 0);
}

#ifndef SPANWATCH_COMPAT
SEC("uprobe.s")
int usdt_single_s(struct pt_regs *ctx)
{
	return single(ctx, 1);
}
#endif

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
const struct usdt_name_seg *unused_usdt_name_seg __attribute__((unused));
const enum usdt_seg_kind *unused_usdt_seg_kind __attribute__((unused));
const enum usdt_name_sizes *unused_usdt_name_sizes __attribute__((unused));
const struct usdt_test_record *unused_usdt_test_record __attribute__((unused));
const struct usdt_ip_key *unused_usdt_ip_key __attribute__((unused));
const struct usdt_name_key *unused_usdt_name_key __attribute__((unused));
const struct usdt_name_request *unused_usdt_name_request __attribute__((unused));
const struct usdt_task_spans *unused_usdt_task_spans __attribute__((unused));
const struct task_span_names *unused_task_span_names __attribute__((unused));
const enum usdt_counter *unused_usdt_counter __attribute__((unused));
const enum usdt_source_flags *unused_usdt_source_flags __attribute__((unused));
const enum task_spans_sizes *unused_task_spans_sizes __attribute__((unused));
const enum task_span_flags *unused_task_span_flags __attribute__((unused));
const enum task_span_vals_sizes *unused_task_span_vals_sizes __attribute__((unused));
const enum src_counter *unused_src_counter __attribute__((unused));
const enum src_index *unused_src_index __attribute__((unused));
const enum usdt_sizes *unused_usdt_sizes __attribute__((unused));
const enum usdt_arg_kind *unused_usdt_arg_kind __attribute__((unused));
const enum usdt_cookie_bits *unused_usdt_cookie_bits __attribute__((unused));
