// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Spans from any user_event, registered by any program with the kernel's
 * ABI: a fixed struct of fields, described by the event's format file in
 * tracefs. The collector reads that file when the event appears and writes
 * where each field the source maps lives (offset, size, kind) into ue_events,
 * keyed by the tracepoint's id: the payload is cast by those offsets, with
 * no header shared with the program and no compiler at run time.
 *
 * A user_event reaches BPF only through perf_tp_event() (fentry, or a
 * kprobe where fentry is refused), and only on CPUs where a perf event is
 * open on it: the collector opens a counting one per online CPU.
 *
 * Roles: a single event carries its duration in a field; a start event
 * records when it ran (and the span name, when the source names spans by
 * a field) in ue_inflight, keyed by thread or by a key field, and the end
 * event times the span from it. The status field of the single or the end
 * event marks errors when nonzero. Every event is counted in ue_counters by
 * how it ended.
 *
 * Loaded beside spanwatch.bpf.c with MapReplacements for the core's maps.
 */

#include "aggregate.h"
#include "source.h"
#include "tpspan.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define TRACE_ENTRY_SIZE 8
enum ue_sizes {
	UE_BUF_SIZE = 4096, /* bytes of a record copied */
};
#define UE_BUF_MASK (UE_BUF_SIZE - 1)
#define UE_MAX_ROLES 4
#define UE_MAX_SOURCES 256
#define UE_MAX_INFLIGHT 65536

/* How a field is read: internal/tracefs FieldKind. */
enum ue_kind {
	UE_NONE = 0,
	UE_INT = 1,
	UE_CHARS = 2,
	UE_DATA_LOC = 3,
	UE_REL_LOC = 4,
};

/* Roles: enum tp_role (tpspan.h). */
enum ue_role_kind {
	UE_SINGLE = TP_SINGLE,
	UE_START = TP_START,
	UE_END = TP_END,
	UE_METRIC = TP_METRIC, /* duration holds the metric's value field */
};

/* How an event ended, counted in ue_counters. */
enum ue_reason {
	UE_OK = 0,	    /* made a span, or recorded a start */
	UE_SHORT,	    /* a mapped field lies past the record */
	UE_BAD_LOC,	    /* a __data_loc or __rel_loc field points past the record */
	UE_UNPAIRED,	    /* an end without its start */
	UE_READ_ERROR,	    /* the record could not be copied */
	UE_INFLIGHT_FULL,   /* a start could not be recorded */
	UE_NUM_COUNTERS,
};

struct ue_field {
	__u16 off;  /* in the record, common fields included */
	__u16 size; /* 1, 2, 4, 8 for integers; N for char[N] */
	__u8 kind;  /* enum ue_kind */
	__u8 is_signed;
	__u16 _pad;
};

struct ue_role {
	__u32 source; /* index in ue_sources */
	__u32 role;   /* enum ue_role_kind */
	struct ue_field name, duration, key, status;
	__u32 nops; /* operands of the predicate and labels */
	__u32 _pad;
	struct ue_field ops[SRC_OPERANDS];
};

struct ue_event {
	__u32 n;
	__u32 _pad;
	struct ue_role roles[UE_MAX_ROLES];
};

/* One configured source: internal/tpsource Source. */
struct ue_source {
	char name[SPAN_NAME_LEN]; /* the span (or metric) name, unless a role has a name field */
	struct tp_map map;	  /* its error predicate and labels */
};

/* Tracepoint id -> what it means to each source that maps it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct ue_event);
} ue_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, UE_MAX_SOURCES);
	__type(key, __u32);
	__type(value, struct ue_source);
} ue_sources SEC(".maps");

/* Starts not yet ended; LRU, so starts whose end never comes cannot fill it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, UE_MAX_INFLIGHT);
	__type(key, struct tp_inflight_key);
	__type(value, struct tp_inflight);
} ue_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, UE_NUM_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} ue_counters SEC(".maps");

struct ue_percpu {
	__u8 buf[UE_BUF_SIZE + SPAN_NAME_LEN];
	struct span_event ev;
	struct tp_vals v;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ue_percpu);
} ue_percpu SEC(".maps");

static __always_inline void ue_count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&ue_counters, &idx);
	if (c)
		*c += 1;
}

/* ue_int reads an integer field, widened by its sign. */
static __always_inline __u32 ue_int(const struct ue_percpu *pc, __u32 n, const struct ue_field *f, __u64 *v)
{
	__u32 off = f->off;
	const __u8 *p = &pc->buf[off & UE_BUF_MASK];

	if (off + f->size > n)
		return UE_SHORT;
	switch (f->size) {
	case 1:
		*v = f->is_signed ? (__u64)(__s64)(__s8)p[0] : p[0];
		break;
	case 2:
		*v = f->is_signed ? (__u64)(__s64) * (const __s16 *)p : *(const __u16 *)p;
		break;
	case 4:
		*v = f->is_signed ? (__u64)(__s64) * (const __s32 *)p : *(const __u32 *)p;
		break;
	default:
		*v = *(const __u64 *)p;
	}
	return UE_OK;
}

/*
 * ue_name copies a string field into dst (SPAN_NAME_LEN bytes, zeroed by
 * the caller): up to its first NUL, cut to SPAN_NAME_LEN - 1 bytes on a
 * UTF-8 character boundary.
 */
static __always_inline __u32 ue_name(const struct ue_percpu *pc, __u32 n, const struct ue_field *f, char *dst)
{
	__u32 off = f->off, len;

	if (off + f->size > n)
		return UE_SHORT;
	if (f->kind == UE_CHARS) {
		len = f->size;
	} else {
		__u32 loc = *(const __u32 *)&pc->buf[off & UE_BUF_MASK];
		len = loc >> 16;
		if (f->kind == UE_DATA_LOC)
			off = loc & 0xffff; /* from the record's start */
		else
			off = off + 4 + (loc & 0xffff); /* from the field's end */
		if (off + len > n)
			return UE_BAD_LOC;
		if (len && pc->buf[(off + len - 1) & UE_BUF_MASK] == 0)
			len--; /* the kernel checks char data ends in a NUL */
	}
	tp_copy_name(dst, &pc->buf[off & UE_BUF_MASK], len);
	return UE_OK;
}

static __always_inline __u32 ue_role(void *ctx, struct ue_percpu *pc, __u32 n, const struct ue_role *r, __u64 now)
{
	struct tp_vals *v = &pc->v;
	struct ue_source *src;
	__u32 e;

	src = bpf_map_lookup_elem(&ue_sources, &r->source);
	if (!src)
		return UE_READ_ERROR;
	__builtin_memset(v, 0, sizeof(*v));
	if (r->name.kind != UE_NONE) {
		e = ue_name(pc, n, &r->name, v->name);
		if (e)
			return e;
		v->have_name = 1;
	}
	if (r->duration.kind != UE_NONE) {
		e = ue_int(pc, n, &r->duration, &v->duration);
		if (e)
			return e;
	}
	if (r->key.kind != UE_NONE) {
		e = ue_int(pc, n, &r->key, &v->key);
		if (e)
			return e;
		v->by_key = 1;
	}
	if (r->status.kind != UE_NONE) {
		e = ue_int(pc, n, &r->status, &v->status);
		if (e)
			return e;
	}
	/* Operands: a field that cannot be read is left unread (its bit in
	 * ok clear), which fails the comparisons over it. */
	for (__u32 i = 0; i < SRC_OPERANDS; i++) {
		if (i >= r->nops)
			break;
		const struct ue_field *f = &r->ops[i];
		if (ue_int(pc, n, f, &v->ops.v[i]) == UE_OK)
			v->ops.ok |= 1 << i;
		if (f->is_signed)
			v->ops.is_signed |= 1 << i;
	}
	switch (tp_span(ctx, &ue_inflight, r->role, r->source, src->name, &src->map, v, &pc->ev, now,
			SOURCE_USER_EVENT_FIELDS)) {
	case TP_UNPAIRED:
		return UE_UNPAIRED;
	case TP_INFLIGHT_FULL:
		return UE_INFLIGHT_FULL;
	}
	return UE_OK;
}

static __always_inline int ue_on_tp_event(void *ctx, __u16 event_type, const void *record, int entry_size)
{
	__u32 type = event_type, zero = 0;
	struct ue_event *e = bpf_map_lookup_elem(&ue_events, &type);
	struct ue_percpu *pc;
	__u64 now;

	if (!e)
		return 0;
	now = bpf_ktime_get_ns();
	pc = bpf_map_lookup_elem(&ue_percpu, &zero);
	if (!pc)
		return 0;
	__u64 n = entry_size > 0 ? (__u64)entry_size : 0;
	if (n > UE_BUF_SIZE)
		n = UE_BUF_SIZE;
	asm volatile("" : "+r"(n));
	if (n > UE_BUF_SIZE || bpf_probe_read_kernel(pc->buf, n, record)) {
		ue_count(UE_READ_ERROR);
		return 0;
	}
	for (int i = 0; i < UE_MAX_ROLES; i++) {
		if (i >= e->n)
			break;
		ue_count(ue_role(ctx, pc, n, &e->roles[i], now));
	}
	return 0;
}

/* void perf_tp_event(u16 event_type, u64 count, void *record, int entry_size, ...) */
SEC("fentry/perf_tp_event")
int BPF_PROG(ue_fentry_perf_tp_event, __u16 event_type, __u64 cnt, void *record, int entry_size)
{
	return ue_on_tp_event(ctx, event_type, record, entry_size);
}

SEC("kprobe/perf_tp_event")
int BPF_KPROBE(ue_kprobe_perf_tp_event, __u16 event_type, __u64 cnt, void *record, int entry_size)
{
	return ue_on_tp_event(ctx, event_type, record, entry_size);
}

/* Test only: run the handler on the record in ue_test_input. */
struct ue_test_in {
	__u32 type;
	__u32 entry_size;
	__u8 record[UE_BUF_SIZE];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ue_test_in);
} ue_test_input SEC(".maps");

SEC("raw_tp")
int ue_test(void *ctx)
{
	__u32 zero = 0;
	struct ue_test_in *in = bpf_map_lookup_elem(&ue_test_input, &zero);

	if (!in)
		return 0;
	int size = in->entry_size;
	if (size > (int)sizeof(in->record))
		size = sizeof(in->record);
	return ue_on_tp_event(ctx, in->type, in->record, size);
}

/* Keep these types in BTF so bpf2go generates their Go mirrors. */
const struct ue_event *unused_ue_event __attribute__((unused));
const struct ue_source *unused_ue_source __attribute__((unused));
const struct ue_test_in *unused_ue_test_in __attribute__((unused));
const enum ue_reason *unused_ue_reason __attribute__((unused));
const enum ue_kind *unused_ue_kind __attribute__((unused));
const enum ue_role_kind *unused_ue_role_kind __attribute__((unused));
const enum ue_sizes *unused_ue_sizes __attribute__((unused));
