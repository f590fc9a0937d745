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
	span_aggregate_uprobe(ctx, &ev, SOURCE_MARKER);
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
