// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * spanwatch's span sources for applications that use the span SDK:
 *
 *  - user_events: fentry (kprobe as the fallback) on perf_tp_event(). A BPF
 *    program attached to a user_events tracepoint never runs in mainline, so
 *    we catch the record where user_event_perf() hands it to perf, filtered
 *    by the event type ids in watched_events. The record is a struct
 *    trace_entry (8 bytes) followed by the payload. perf_tp_event() is only
 *    reached while a perf event is open on the tracepoint on the writing CPU:
 *    the collector opens a counting one per CPU.
 *  - marker: a uprobe on the Go SDK's marker function (an ABI0 assembly
 *    function whose first instruction is a nop), for kernels without
 *    user_events. Its one argument, a pointer to the struct span_event, is on
 *    the user stack at sp+8 (ABI0 on amd64 and on arm64, where 0(RSP) is
 *    the slot for the return address). libspanwatch's marker
 *    (include/spanwatch.h) takes it as its first argument, as C does (%rdi
 *    on x86-64, x0 on arm64): uprobe_marker_sysv.
 */

#include "aggregate.h"
#include "inflight.h"

/* The compat objects (SPANWATCH_COMPAT, 5.10 to 5.16) have no in-flight
 * sampler (it needs 5.18's bpf_copy_from_user_task): start events are
 * dropped, and no stack of open spans is kept for it. */
#ifdef SPANWATCH_COMPAT
#define inflight_start(ev, source) ((void)(ev), (void)(source))
#define inflight_end(ev) ((void)(ev))
#endif

char __license[] SEC("license") = "Dual BSD/GPL";

#define TRACE_ENTRY_SIZE 8

/* user_event type id -> 1, written by the collector. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} watched_events SEC(".maps");

static __always_inline int on_tp_event(void *ctx, __u16 event_type, void *record, int entry_size)
{
	__u32 type = event_type;
	struct span_event ev;

	if (!bpf_map_lookup_elem(&watched_events, &type))
		return 0;
	if (entry_size < TRACE_ENTRY_SIZE + (int)sizeof(ev)) {
		count(COUNTER_SHORT);
		return 0;
	}
	if (bpf_probe_read_kernel(&ev, sizeof(ev), record + TRACE_ENTRY_SIZE)) {
		count(COUNTER_READ_ERRORS);
		return 0;
	}
	if (ev.flags & SPAN_F_START) {
		inflight_start(&ev, SOURCE_USER_EVENTS);
		return 0;
	}
	inflight_end(&ev);
	span_aggregate(ctx, &ev, SOURCE_USER_EVENTS);
	return 0;
}

/* void perf_tp_event(u16 event_type, u64 count, void *record, int entry_size, ...) */
SEC("fentry/perf_tp_event")
int BPF_PROG(fentry_perf_tp_event, __u16 event_type, __u64 cnt, void *record, int entry_size)
{
	return on_tp_event(ctx, event_type, record, entry_size);
}

SEC("kprobe/perf_tp_event")
int BPF_KPROBE(kprobe_perf_tp_event, __u16 event_type, __u64 cnt, void *record, int entry_size)
{
	return on_tp_event(ctx, event_type, record, entry_size);
}

/* Slot hints of the marker's series: where the last span of a (name,
 * cgroup) pair went, plus one (0: none), at marker_hint_index(). The core
 * checks the slot's key before it trusts one (hint_holds), so a hint that
 * a colliding pair, another CPU or a preempting run overwrote only costs
 * the index lookup the hint saves: the 48-byte key's hash and compare, an
 * eighth of the program's time (BENCHMARKS.md, issue 28 goal 2). A plain
 * array, not per-CPU: its lookup is inlined on every kernel, and a hint
 * is written only when the index was looked up, so the entries' cache
 * lines stay shared. USDT keeps its hints in task storage (5.11+); the
 * compat objects (5.10) have this map too. */
enum marker_hint_sizes {
	MARKER_HINTS = 4096, /* a power of two */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MARKER_HINTS);
	__type(key, __u32);
	__type(value, __u32);
} marker_hints SEC(".maps");

static __always_inline __u32 marker_hint_index(__u64 name_id, __u64 cgroup_id)
{
	__u64 h = (name_id ^ cgroup_id) * 0x9e3779b97f4a7c15ULL;

	return (__u32)(h >> 32) & (MARKER_HINTS - 1);
}

/* marker_aggregate ends a marker span (span_aggregate, at a uprobe: ctx
 * holds the user registers a stack is walked from) with a slot hint,
 * which the core reads once (the slot it checks is the slot it uses, whoever
 * writes the shared entry meanwhile) and writes when it had to look the
 * index up. */
static __always_inline void marker_aggregate(struct pt_regs *ctx, struct span_event *ev)
{
	struct agg_in in = {};
	__u32 idx;

#ifdef SW_WALK_USER_FRAMES
	in.uregs = ctx;
#endif
	name_cut(ev->name);
	in.key.name_id = span_name_id(ev->name);
	in.key.cgroup_id = bpf_get_current_cgroup_id();
	in.key.kind = SERIES_SPAN;
	in.name = ev->name;
	in.ev = ev;
	in.value = ev->duration_ns;
	in.source = SOURCE_MARKER;
	in.error = ev->status != SPAN_STATUS_OK;
	idx = marker_hint_index(in.key.name_id, in.key.cgroup_id);
	in.hint = bpf_map_lookup_elem(&marker_hints, &idx);
	series_aggregate(ctx, &in);
}

static __always_inline int on_marker(struct pt_regs *ctx, __u64 ptr)
{
	struct span_event ev;

	if (bpf_probe_read_user(&ev, sizeof(ev), (void *)ptr)) {
		count(COUNTER_READ_ERRORS);
		return 0;
	}
	if (ev.flags & SPAN_F_START) {
		inflight_start(&ev, SOURCE_MARKER);
		return 0;
	}
	inflight_end(&ev);
	marker_aggregate(ctx, &ev);
	return 0;
}

/* The Go SDK's marker (ABI0): the event's address is on the stack. */
SEC("uprobe")
int uprobe_marker(struct pt_regs *ctx)
{
	__u64 ptr;

	if (bpf_probe_read_user(&ptr, sizeof(ptr), (void *)(PT_REGS_SP(ctx) + 8))) {
		count(COUNTER_READ_ERRORS);
		return 0;
	}
	return on_marker(ctx, ptr);
}

/* libspanwatch's marker (include/spanwatch.h, the C calling convention):
 * the event's address is the first argument (%rdi on x86-64, x0 on
 * arm64). */
SEC("uprobe")
int uprobe_marker_sysv(struct pt_regs *ctx)
{
	return on_marker(ctx, PT_REGS_PARM1(ctx));
}

/* Keep these types in BTF so bpf2go generates their Go mirrors. */
const struct overrun *unused_overrun __attribute__((unused));
const struct span_event unused_span_event __attribute__((unused)) = {};
const struct series_slot *unused_series __attribute__((unused));
const struct budget_glob *unused_budget_glob __attribute__((unused));
const struct core_state *unused_core __attribute__((unused));
const enum counter *unused_counter __attribute__((unused));
const enum span_source *unused_span_source __attribute__((unused));
const enum series_kind *unused_series_kind __attribute__((unused));
const enum budget_flags *unused_budget_flags __attribute__((unused));
const enum slot_state *unused_slot_state __attribute__((unused));
const enum core_sizes *unused_core_sizes __attribute__((unused));
const enum span_event_sizes *unused_span_event_sizes __attribute__((unused));
const enum span_status *unused_span_status __attribute__((unused));
const enum span_flags *unused_span_flags __attribute__((unused));
const enum budget_bits *unused_budget_bits __attribute__((unused));
