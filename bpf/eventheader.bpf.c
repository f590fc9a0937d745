// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Spans from EventHeader events (eventheader.h): what the OpenTelemetry
 * user_events exporters write. Like every user_event, they reach BPF only
 * through perf_tp_event() (fentry, or a kprobe where fentry is refused),
 * filtered here by the tracepoint ids in eh_tracepoints; the collector
 * opens a counting perf event per CPU on each so that the kernel calls
 * perf_tp_event() for them.
 *
 * Each watched tracepoint lists the event mappings that apply to it
 * (eh_mappings): an event name (its hash) and the fields to find. A Span
 * mapping takes the OpenTelemetry span fields (PartB.name, PartA.time,
 * PartB.startTime, PartB.success, PartA.ext_dt_traceId and
 * PartA.ext_dt_spanId) and hands a span_event to the aggregation core.
 * Every event is counted in eh_counters by how it ended (enum eh_reason),
 * so what could not be decoded is visible, by reason.
 *
 * Loaded beside spanwatch.bpf.c with MapReplacements for the core's maps.
 * Needs kernel 5.17+ (bpf_loop).
 */

#include "aggregate.h"
#include "eventheader.h"
#include "source.h"
#include "tpspan.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define TRACE_ENTRY_SIZE 8

/* Counters past the reasons. (Names cut to fit are counted by the core.) */
enum eh_count {
	EH_COUNT_READ_ERRORS = EH_NUM_REASONS,
	EH_COUNT_INFLIGHT_FULL,
	EH_COUNTERS,
};
#define EH_MAX_INFLIGHT 65536
#define EH_NO_FIELD SRC_NO_ARG

enum eh_mapping_sizes {
	EH_TP_MAPPINGS = 8,   /* mappings of one tracepoint */
	EH_MAX_MAPPINGS = 256,
	EH_MAX_OPS = 8,	      /* operands of a mapping: internal/tpsource MaxOperands */
};

enum eh_kind {
	EH_KIND_SPAN = 1,   /* an OpenTelemetry Span event */
	EH_KIND_FIELDS = 2, /* fields mapped by a source (tpspan.h roles) */
};

/* Indexes of a Span mapping's wanted fields: internal/eventheader SpanFields. */
enum eh_span_field {
	EH_SPAN_NAME = 0,
	EH_SPAN_END,
	EH_SPAN_START,
	EH_SPAN_SUCCESS,
	EH_SPAN_TRACE_ID,
	EH_SPAN_SPAN_ID,
};

struct eh_mapping {
	__u64 event; /* hash of the event name (eh_name) */
	__u32 kind;  /* enum eh_kind */
	__u32 nwant;
	__u64 want[EH_WANT_SLOTS]; /* path hashes of the fields to find */
	/* EH_KIND_FIELDS: the role (enum tp_role), the source (in-flight
	 * key), and which want holds each value (EH_NO_FIELD: none). */
	__u32 role;
	__u32 source;
	__u8 idx_name, idx_duration, idx_key, idx_status;
	__u32 nops;
	__u8 idx_ops[EH_MAX_OPS]; /* wants holding the predicate's and labels' operands */
	char name[SPAN_NAME_LEN]; /* the span (or metric) name when no field names it */
	struct tp_map map;	  /* the error predicate and the labels */
};

struct eh_tracepoint {
	__u32 n;
	__u32 mapping[EH_TP_MAPPINGS]; /* indexes in eh_mappings */
};

/* Tracepoint (event type) id -> the mappings that apply to it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct eh_tracepoint);
} eh_tracepoints SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EH_MAX_MAPPINGS);
	__type(key, __u32);
	__type(value, struct eh_mapping);
} eh_mappings SEC(".maps");

/* Events by how they ended: index enum eh_reason (EH_OK: made a span),
 * then EH_COUNT_*. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EH_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} eh_counters SEC(".maps");

struct eh_percpu {
	struct eh_scratch s;
	struct span_event ev;
	struct tp_vals v;
};

/* Starts of EventHeader pairs not yet ended. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, EH_MAX_INFLIGHT);
	__type(key, struct tp_inflight_key);
	__type(value, struct tp_inflight);
} eh_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct eh_percpu);
} eh_percpu SEC(".maps");

static __always_inline void eh_count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&eh_counters, &idx);
	if (c)
		*c += 1;
}

/* eh_span makes a span of a Span event whose fields were found. */
static __always_inline __u32 eh_span(void *ctx, struct eh_percpu *pc)
{
	const struct eh_buf *buf = &pc->s.buf;
	const struct eh_walk *w = &pc->s.walk;
	struct span_event *ev = &pc->ev;
	__u32 off, len, r;
	struct eh_time end, start;
	struct eh_id id;
	__u64 v;

	__builtin_memset(ev, 0, sizeof(*ev));
	r = eh_str(w, EH_SPAN_NAME, &off, &len);
	if (r)
		return r;
	tp_copy_name(ev->name, &buf->b[off & EH_BUF_MASK], len);

	r = eh_str(w, EH_SPAN_END, &off, &len);
	if (r)
		return r;
	if (eh_parse_time(buf, off, len, &end))
		return EH_BAD_TIME;
	r = eh_str(w, EH_SPAN_START, &off, &len);
	if (r)
		return r;
	if (eh_parse_time(buf, off, len, &start))
		return EH_BAD_TIME;
	__s64 ds = end.sec - start.sec;
	if (ds < 0 || ds > 9000000000LL)
		return EH_NEGATIVE_DURATION;
	__s64 d = ds * 1000000000LL + (__s64)end.nsec - (__s64)start.nsec;
	if (d < 0)
		return EH_NEGATIVE_DURATION;
	ev->duration_ns = d;
	if (start.sec >= 0)
		ev->start_ns = (__u64)start.sec * 1000000000ULL + start.nsec;

	const struct eh_loc *l = &w->loc[EH_SPAN_SUCCESS];
	if (!l->enc)
		return EH_MISSING_FIELD;
	__u32 base = l->enc & EH_ENC_MASK;
	if ((l->enc & (EH_ENC_CARRAY | EH_ENC_VARRAY)) ||
	    (base != EH_ENC_VALUE8 && base != EH_ENC_VALUE16 && base != EH_ENC_VALUE32))
		return EH_FIELD_TYPE;
	r = eh_uint(buf, w, EH_SPAN_SUCCESS, &v);
	if (r)
		return r;
	ev->status = v ? SPAN_STATUS_OK : SPAN_STATUS_ERROR;

	r = eh_str(w, EH_SPAN_TRACE_ID, &off, &len);
	if (r)
		return r;
	if (eh_hex_id(buf, off, len, &id, SPAN_TRACE_ID_LEN))
		return EH_BAD_ID;
	__builtin_memcpy(ev->trace_id, id.b, SPAN_TRACE_ID_LEN);
	r = eh_str(w, EH_SPAN_SPAN_ID, &off, &len);
	if (r)
		return r;
	if (eh_hex_id(buf, off, len, &id, SPAN_SPAN_ID_LEN))
		return EH_BAD_ID;
	__builtin_memcpy(ev->span_id, id.b, SPAN_SPAN_ID_LEN);

	span_aggregate(ctx, ev, SOURCE_EVENTHEADER);
	return EH_OK;
}

/* eh_fields plays a mapped event's role with the fields found. */
static __always_inline __u32 eh_fields(void *ctx, struct eh_percpu *pc, const struct eh_mapping *m)
{
	__u64 now = m->role == TP_SINGLE || m->role == TP_METRIC ? 0 : bpf_ktime_get_ns();
	const struct eh_buf *buf = &pc->s.buf;
	const struct eh_walk *w = &pc->s.walk;
	struct tp_vals *v = &pc->v;
	__u32 off, len, r;

	__builtin_memset(v, 0, sizeof(*v));
	if (m->idx_name != EH_NO_FIELD) {
		r = eh_str(w, m->idx_name, &off, &len);
		if (r)
			return r;
		tp_copy_name(v->name, &buf->b[off & EH_BUF_MASK], len);
		v->have_name = 1;
	}
	if (m->idx_duration != EH_NO_FIELD) {
		r = eh_uint(buf, w, m->idx_duration, &v->duration);
		if (r)
			return r;
		if ((__s64)v->duration < 0 && m->role != TP_METRIC)
			return EH_NEGATIVE_DURATION;
	}
	if (m->idx_key != EH_NO_FIELD) {
		r = eh_uint(buf, w, m->idx_key, &v->key);
		if (r)
			return r;
		v->by_key = 1;
	}
	if (m->idx_status != EH_NO_FIELD) {
		r = eh_uint(buf, w, m->idx_status, &v->status);
		if (r)
			return r;
	}
	for (__u32 i = 0; i < EH_MAX_OPS; i++) {
		if (i >= m->nops)
			break;
		__u32 k = m->idx_ops[i];
		if (eh_uint(buf, w, k, &v->ops.v[i]) == EH_OK)
			v->ops.ok |= 1 << i;
		if ((w->loc[k & (EH_WANT_SLOTS - 1)].fmt & EH_FMT_MASK) == EH_FMT_SIGNED_INT)
			v->ops.is_signed |= 1 << i;
	}
	switch (tp_span(ctx, &eh_inflight, m->role, m->source, m->name, &m->map, v, &pc->ev, now, SOURCE_EVENTHEADER)) {
	case TP_UNPAIRED:
		return EH_UNPAIRED;
	case TP_INFLIGHT_FULL:
		return EH_COUNT_INFLIGHT_FULL;
	}
	return EH_OK;
}

static __always_inline __u32 eh_event(void *ctx, const struct eh_tracepoint *tp, const void *payload, __u64 len)
{
	__u32 zero = 0;
	struct eh_percpu *pc = bpf_map_lookup_elem(&eh_percpu, &zero);
	struct eh_mapping *m = 0;
	__u64 nh;
	__u32 r;

	if (!pc)
		return EH_COUNT_READ_ERRORS;
	pc->s.walk.clipped = len > EH_BUF_SIZE;
	if (len > EH_BUF_SIZE)
		len = EH_BUF_SIZE;
	/* Keep clang from handing the helper the length before the clamp. */
	asm volatile("" : "+r"(len));
	if (len > EH_BUF_SIZE)
		return EH_TOO_LARGE;
	pc->s.walk.n = len;
	if (bpf_probe_read_kernel(pc->s.buf.b, len, payload))
		return EH_COUNT_READ_ERRORS;
	r = eh_walk_event(&pc->s, &nh);
	if (r)
		return r;
	for (int i = 0; i < EH_TP_MAPPINGS; i++) {
		if (i >= tp->n)
			break;
		__u32 id = tp->mapping[i];
		struct eh_mapping *c = bpf_map_lookup_elem(&eh_mappings, &id);
		if (c && c->event == nh) {
			m = c;
			break;
		}
	}
	if (!m)
		return EH_OTHER_EVENT;
	r = eh_walk_fields(&pc->s, m->want, m->nwant);
	if (r)
		return r;
	if (m->kind == EH_KIND_SPAN)
		return eh_span(ctx, pc);
	if (m->kind == EH_KIND_FIELDS)
		return eh_fields(ctx, pc, m);
	return EH_OTHER_EVENT;
}

static __always_inline int eh_on_tp_event(void *ctx, __u16 event_type, const void *record, int entry_size)
{
	__u32 type = event_type;
	struct eh_tracepoint *tp = bpf_map_lookup_elem(&eh_tracepoints, &type);

	if (!tp)
		return 0;
	__u64 len = entry_size > TRACE_ENTRY_SIZE ? (__u64)(entry_size - TRACE_ENTRY_SIZE) : 0;
	eh_count(eh_event(ctx, tp, record + TRACE_ENTRY_SIZE, len));
	return 0;
}

/* void perf_tp_event(u16 event_type, u64 count, void *record, int entry_size, ...) */
SEC("fentry/perf_tp_event")
int BPF_PROG(eh_fentry_perf_tp_event, __u16 event_type, __u64 cnt, void *record, int entry_size)
{
	return eh_on_tp_event(ctx, event_type, record, entry_size);
}

SEC("kprobe/perf_tp_event")
int BPF_KPROBE(eh_kprobe_perf_tp_event, __u16 event_type, __u64 cnt, void *record, int entry_size)
{
	return eh_on_tp_event(ctx, event_type, record, entry_size);
}

/*
 * Test only: decode the record in eh_test_input as if perf_tp_event() had
 * been called with it, so the decoder runs on kernels without user_events
 * (BPF_PROG_TEST_RUN of a raw tracepoint program).
 */
struct eh_test_in {
	__u32 type;
	__u32 entry_size;
	__u8 record[TRACE_ENTRY_SIZE + EH_BUF_SIZE + 1024];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct eh_test_in);
} eh_test_input SEC(".maps");

SEC("raw_tp")
int eh_test(void *ctx)
{
	__u32 zero = 0;
	struct eh_test_in *in = bpf_map_lookup_elem(&eh_test_input, &zero);

	if (!in)
		return 0;
	int size = in->entry_size;
	if (size > (int)sizeof(in->record))
		size = sizeof(in->record);
	return eh_on_tp_event(ctx, in->type, in->record, size);
}

/*
 * Test only, for measuring the decoder against the fixed-struct path: what
 * spanwatch.bpf.c does with a spanwatch_span record (on_tp_event: the
 * watched-id lookup, the size check, one copy of struct span_event,
 * span_aggregate), on the record in eh_test_input, run by the same
 * harness as eh_test.
 */
SEC("raw_tp")
int eh_test_fixed(void *ctx)
{
	__u32 zero = 0;
	struct eh_test_in *in = bpf_map_lookup_elem(&eh_test_input, &zero);
	struct span_event ev;

	if (!in)
		return 0;
	__u32 type = in->type;
	if (!bpf_map_lookup_elem(&eh_tracepoints, &type))
		return 0;
	if (in->entry_size < TRACE_ENTRY_SIZE + (int)sizeof(ev)) {
		count(COUNTER_SHORT);
		return 0;
	}
	if (bpf_probe_read_kernel(&ev, sizeof(ev), in->record + TRACE_ENTRY_SIZE)) {
		count(COUNTER_READ_ERRORS);
		return 0;
	}
	if (ev.flags & SPAN_F_START)
		return 0;
	span_aggregate(ctx, &ev, SOURCE_USER_EVENTS);
	return 0;
}

/* Keep these types in BTF so bpf2go generates their Go mirrors. */
const struct eh_mapping *unused_eh_mapping __attribute__((unused));
const struct eh_tracepoint *unused_eh_tracepoint __attribute__((unused));
const struct eh_test_in *unused_eh_test_in __attribute__((unused));
const enum eh_reason *unused_eh_reason __attribute__((unused));
const enum eh_kind *unused_eh_kind __attribute__((unused));
const enum eh_count *unused_eh_count __attribute__((unused));
const enum eh_span_field *unused_eh_span_field __attribute__((unused));
const enum eh_mapping_sizes *unused_eh_mapping_sizes __attribute__((unused));
const enum eh_limits *unused_eh_limits __attribute__((unused));
const enum eh_format *unused_eh_format __attribute__((unused));
const enum eh_encoding *unused_eh_encoding __attribute__((unused));
const enum tp_role *unused_tp_role __attribute__((unused));
const enum src_index *unused_src_index __attribute__((unused));
