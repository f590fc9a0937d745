/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The aggregation core: every source (user_events, the Go SDK's marker
 * uprobe, USDT probes, EventHeader events) ends a span or a metric value in
 * series_aggregate(), usually through span_aggregate().
 *
 * The model (docs/series.md says why, with the measurements):
 *
 *  - A series is one name, cgroup, set of label values and kind (span or
 *    argument metric): struct series_key. series_index maps a key to a slot
 *    of the series array, which holds its counters. Both are shared by all
 *    CPUs: memory and read cost do not grow with the CPU count. Every
 *    counter is updated with atomic instructions (BPF_ATOMIC, 5.12+), so
 *    that neither another CPU nor a preempting program run on this CPU
 *    (fentry and uprobe programs are preemptible) can lose an update.
 *  - The series array and the histogram cells are BPF_F_MMAPABLE arrays the
 *    collector maps into its memory: it reads a window by swapping counters
 *    to zero with atomic exchanges of its own, so a snapshot needs no map
 *    syscalls and no previous totals, and costs the same on any CPU count.
 *  - Histograms are Prometheus native schema-6 buckets (hist.h), kept
 *    sparsely in open-addressed tables of 64-bit cells: the high 32 bits
 *    name the (slot, bucket) pair, the low 32 bits count the window's
 *    values (the collector zeroes them each window). The cells are in
 *    banks (cell_banks, an array of maps), each serving a range of slots
 *    and created by the collector as the slots in use come near it.
 *  - Dirty bitmaps say which slots and which cell chunks changed since the
 *    last read, so a quiet series costs a snapshot nothing.
 *  - Slots come from a queue of freed slots, else from a bump counter; the
 *    collector frees a slot after evicting its series from series_index and
 *    waiting until no program can still hold it.
 *  - A workload may hold at most its quota of series; past it, its new
 *    names are counted in one "(other)" series of its own. A workload is
 *    what the operator sees (a pod, a container, a systemd unit, a cgroup
 *    root made): the collector writes cgroup -> workload into cg_workload,
 *    and a cgroup it has not seen yet (one a user just made below a
 *    delegated cgroup) is charged to the workload of its nearest ancestor
 *    there, so no user makes himself new quotas by making cgroups. The
 *    series key keeps the real cgroup; only the quota moves.
 *
 * The maps are defined here. An object that includes this header and is
 * loaded beside spanwatch.bpf.c is loaded with MapReplacements for all of
 * them (collector.Maps()), so every source feeds the same aggregates.
 * The full objects need kernel 5.12+ (atomics), 5.17+ (bpf_loop, for glob
 * budgets).
 *
 * Built with SPANWATCH_COMPAT (the compat objects, for 5.10 to 5.16), the
 * core uses only what 5.10 has: the one atomic instruction there is, an
 * add whose result is not used (BPF_XADD), and bounded loops instead of
 * bpf_loop. What needs more is done another way, and every count stays
 * exact:
 *
 *  - Histogram cells are a hash map (cell_counts) keyed by (slot, bucket)
 *    holding cumulative counts: a new cell is inserted with BPF_NOEXIST
 *    (the insertion is the atomic step, a compare-and-swap's place), then
 *    added to; the collector reads the whole map each window and keeps
 *    the previous counts.
 *  - Dirty marks are one byte per slot, set with a plain store.
 *  - Slots come from free_slots only, which the collector fills with
 *    every slot at load; next_slot counts the slots taken (an add).
 *  - A slot is published with a plain store (x86-64 keeps stores in
 *    order), not an exchange.
 *  - min and max are not kept (no compare-and-swap): the collector gives
 *    the bounds of the lowest and highest histogram buckets (exact for a
 *    window of one value).
 *  - Glob budgets are not matched in the kernel (no bpf_loop): the
 *    collector writes an exact budget for each new name a glob matches,
 *    when it reads the series.
 *  - On arm64, where the kernel's user stack walk stops at the first Go
 *    frame (5.10 to 5.13 want frame records 16-byte aligned; Go's are
 *    8), the marker's program walks the frame records itself
 *    (ustack_walk).
 */
#ifndef SPANWATCH_AGGREGATE_H
#define SPANWATCH_AGGREGATE_H

#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "span_event.h"
#include "hist.h"

/*
 * SW_GLOBAL makes a function one the verifier checks once, not at every
 * call: a global (non-static) BPF function, whose pointer arguments may
 * be NULL to the verifier and are checked. Before 5.12 a global function
 * takes no pointer but the context ("Arg#4 type PTR ... is not supported
 * yet"): the compat objects make them static subprograms, verified with
 * each caller's arguments.
 */
#ifndef SPANWATCH_COMPAT
#define SW_GLOBAL __noinline
#else
#define SW_GLOBAL static __noinline
#endif

enum core_sizes {
	MAX_USTACK = 127, /* the kernel's default perf_event_max_stack */
	MAX_KSTACK = 64,
	SERIES_LABELS = 3, /* label values a series key carries */
	/* Histogram cells: a chunk is 8 cells, one cache line; a value
	 * probes two chunks. */
	CELLS_PER_CHUNK = 8,
	/* cell key: ((slot + 1) << CELL_FIELD_BITS) | field; 0 is empty. */
	CELL_FIELD_BITS = 14,
	CELL_SLOT_MAX = (1 << (32 - CELL_FIELD_BITS)) - 2, /* largest slot */
	/* field: 0 the zero bucket; else bucket index + CELL_INDEX_BIAS,
	 * clamped to 1..CELL_NEG - 1; + CELL_NEG for negative values. */
	CELL_INDEX_BIAS = 2048,
	CELL_NEG = 8192,
	/* Glob budgets: patterns matched in the kernel at a series' first
	 * span (and after each change of the budgets). */
	GLOB_MAX = 64,
	GLOB_LEN = 64,
	GLOB_STEPS = 8192, /* enough for any name against any pattern */
	/* Exact-name budgets of one set. The budgets are kept in two sets
	 * (budgets and budget_globs hold both): the collector writes the set
	 * not in force, then switches with one store of core_state.budget_gen,
	 * so a span is judged by one configuration's budgets or the other's,
	 * never a mix. */
	BUDGET_MAX = 4096,
	BUDGET_SETS = 2,
};

/* Span sources, as reported in overrun records. */
enum span_source {
	SOURCE_USER_EVENTS = 1,
	SOURCE_MARKER = 2,
	SOURCE_USDT = 3,
	SOURCE_EVENTHEADER = 4,
	SOURCE_USER_EVENT_FIELDS = 5, /* any user_event, by its format's offsets */
	SOURCE_FUNCTIONS = 6,	      /* uprobes on a function's entry and returns */
};

/* Series kinds. */
enum series_kind {
	SERIES_SPAN = 0,
	SERIES_METRIC = 1,
};

/* Budget flags. */
enum budget_flags {
	BUDGET_CAPTURE_USER = 1,   /* capture the user stack of a slow span */
	BUDGET_CAPTURE_KERNEL = 2, /* and the kernel stack */
};

/* struct series_slot.state */
enum slot_state {
	SLOT_FREE = 0,
	SLOT_LIVE = 1,
};

/* Indexes of the counters map: every loss is counted. */
enum counter {
	COUNTER_RINGBUF_DROPS = 0,   /* overrun records lost: ring buffer full */
	COUNTER_SERIES_FULL = 1,     /* values lost: no free slot for a new series */
	COUNTER_SHORT = 2,	     /* payloads shorter than struct span_event */
	COUNTER_READ_ERRORS = 3,     /* payloads or arguments that could not be read */
	COUNTER_HIST_FULL = 4,	     /* values counted but left out of their histogram: no free cell */
	COUNTER_NAME_TRUNCATED = 5,  /* names cut at SPAN_NAME_LEN - 1 bytes */
	COUNTER_QUOTA_OTHER = 6,     /* values counted in a workload's "(other)" series */
	COUNTER_NAMES_FULL = 7,      /* series whose name did not fit in the names map */
	COUNTER_MINMAX_RETRIES = 8,  /* min/max updates that lost their race 8 times */
	COUNTER_MAX = 16,
};

struct series_key {
	__u64 name_id;
	__u64 cgroup_id;
	__u64 labels[SERIES_LABELS];
	__u16 labelset; /* 0: no labels; else the source that names them */
	__u8 kind;	/* SERIES_* */
	__u8 other;	/* bit i: labels[i] is past the source's cap */
	/* The process (its tgid) in a cgroup whose series are kept per
	 * process (cg_split), else 0: see split_process(). */
	__u32 tgid;
};

/*
 * One slot of the series array. The collector swaps count, errors, sum,
 * over_budget, min_inv and max to 0 each window; an all-zero slot is a
 * fresh one. min is kept as the maximum of ~v so that 0 means "no value
 * yet"; metric values are kept biased (v ^ 2^63) so that unsigned order is
 * signed order.
 */
struct series_slot {
	__u64 state; /* SLOT_*, written last when the slot is taken */
	struct series_key key;
	__u64 count;
	__u64 errors;
	__u64 sum; /* nanoseconds, or the two's complement sum of values */
	__u64 over_budget;
	__u64 min_inv;
	__u64 max;
	/* The budget, cached: gen (12 bits) << 52 | flags (8) << 44 |
	 * budget_ns (44 bits, 4.9 hours). Valid while gen equals budget_gen
	 * mod 4096. */
	__u64 budget;
	/* The workload the series was charged to (cg_created), written
	 * before the slot is published; 0 for an "(other)" series, which is
	 * charged to none. The collector releases the quota there. */
	__u64 quota_cg;
};

/* The layout of series_slot.budget, shared with the collector. */
enum budget_bits {
	BUDGET_NS_BITS = 44,   /* budget_ns: bits 0..43 */
	BUDGET_FLAGS_MASK = 0xff, /* flags: 8 bits from BUDGET_NS_BITS */
	BUDGET_GEN_SHIFT = 52, /* gen: the 12 bits from here */
	BUDGET_GEN_MASK = 0xfff,
	/* core_state.budget_gen: gen (BUDGET_GEN_MASK), the set in force and
	 * its glob count. */
	BUDGET_SET_SHIFT = 12,
	BUDGET_GLOBS_SHIFT = 16,
	BUDGET_GLOBS_MASK = 0xff,
};

#define BUDGET_NS_MASK ((1ULL << BUDGET_NS_BITS) - 1)
#define BUDGET_FLAGS(b) (((b) >> BUDGET_NS_BITS) & BUDGET_FLAGS_MASK)
#define BUDGET_GEN(b) ((__u32)((b) >> BUDGET_GEN_SHIFT))

struct budget {
	__u64 budget_ns;
	__u32 flags; /* BUDGET_* */
	__u32 _pad;
};

/* The key of budgets: a name in one set. */
struct budget_key {
	__u64 name_id;
	__u32 set; /* 0 or 1 */
	__u32 _pad;
};

/* A glob budget, compiled by the collector: kind[i] is 0 for a literal
 * byte (lit[i]), 1 for '*' (any run of characters) and 2 for '?' (one
 * UTF-8 character); len tokens; neg inverts the match. */
struct budget_glob {
	struct budget b;
	__u8 len;
	__u8 neg;
	__u8 _pad[6];
	__u8 kind[GLOB_LEN];
	__u8 lit[GLOB_LEN];
};

struct span_name {
	char name[SPAN_NAME_LEN];
};

struct overrun {
	__u64 ts_ns; /* CLOCK_MONOTONIC (bpf_ktime_get_ns) when the span ended */
	__u64 name_id;
	__u64 cgroup_id;
	__u64 duration_ns;
	__u64 budget_ns;
	__u64 start_ns;
	__u32 pid;
	__u32 tid;
	__u32 status;
	__u32 source;
	__s32 ustack_len; /* bytes of ustack filled, 0 when not asked, or -errno */
	__s32 kstack_len; /* bytes of kstack filled, 0 when not asked, or -errno */
	__u8 trace_id[SPAN_TRACE_ID_LEN];
	__u8 span_id[SPAN_SPAN_ID_LEN];
	char comm[16];
	char name[SPAN_NAME_LEN];
	__u64 labels[SERIES_LABELS];
	__u16 labelset;
	__u8 kind;
	__u8 other;
	__u32 tgid; /* the series key's: 0 unless kept per process */
	__u64 ustack[MAX_USTACK];
	__u64 kstack[MAX_KSTACK];
};

/*
 * The core's shared state: one entry of an mmapable array, shared by every
 * object that includes this header (global variables would be each
 * object's own). The collector writes the configuration before attaching
 * anything, and budget_gen with an atomic store after.
 */
struct core_state {
	__u64 next_slot; /* the bump allocator of never-used slots */
	__u64 _line[7];	 /* next_slot alone in its cache line */
	__u64 other_name_id; /* snapshot.NameID("(other)") */
	__u32 series_max;    /* slots in the series array */
	__u32 bank_chunks_mask; /* cell chunks a bank - 1: a power of two - 1 */
	__u32 default_quota;	/* series per cgroup, unless cg_quota says */
	/* The budgets in force, one word the collector stores at once after
	 * it wrote the set the word names: the generation (bits 0..11: series
	 * look their budget up again when it changes), the set of budgets and
	 * budget_globs (bit BUDGET_SET_SHIFT) and that set's glob count (8
	 * bits from BUDGET_GLOBS_SHIFT). */
	__u32 budget_gen;
	__u32 bank_slots; /* series slots a cell bank serves */
	__u32 banks_made; /* cell banks in cell_banks: 0 to banks_made - 1 */
	/* Entries in cg_split, or 0: while it is 0 no span looks cg_split
	 * up. */
	__u32 split_cgroups;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct core_state);
} core SEC(".maps");

static __always_inline struct core_state *core_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&core, &zero);
}

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 131072);
	__type(key, __u32);
	__type(value, struct series_slot);
} series SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 131072);
	__type(key, struct series_key);
	__type(value, __u32);
} series_index SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, 131072);
	__type(value, __u32);
} free_slots SEC(".maps");

/* One bit per slot: set when the slot's counters change. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 131072 / 64);
	__type(key, __u32);
	__type(value, __u64);
} series_dirty SEC(".maps");

struct cell_chunk {
	__u64 cell[CELLS_PER_CHUNK];
};

/*
 * The histogram cells, in banks: bank b serves the series slots from
 * b * core_state.bank_slots, an open-addressed table of its own (masked
 * with bank_chunks_mask), so a bank never rehashes. Each bank is an
 * mmapable array the collector creates and maps when the slots come near
 * it (slots are taken lowest first), so an idle agent holds a bank or two
 * instead of the whole table. A value whose bank is not there yet goes to
 * a bank that is (its key names its slot, whatever bank holds it), whose
 * cell the collector frees once the slot's bank is made and no program
 * can still be adding to it; one that finds no cell is counted
 * (COUNTER_HIST_FULL). Sizes are set by
 * the collector; the compat core (cell_counts) leaves the banks empty.
 */
#ifndef SPANWATCH_COMPAT
#define CELL_BANK_FLAGS BPF_F_MMAPABLE
#else
#define CELL_BANK_FLAGS 0
#endif
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_ARRAY);
		__uint(map_flags, CELL_BANK_FLAGS);
		__uint(max_entries, 1);
		__type(key, __u32);
		__type(value, struct cell_chunk);
	});
} cell_banks SEC(".maps");

/* A bank's value only pointed to from the map definition above would be
 * a forward declaration in BTF, with no size: this keeps it whole. */
const struct cell_chunk unused_cell_chunk __attribute__((unused)) = {};

/* One bit per cell chunk of every bank (bank * chunks a bank + chunk):
 * set when one of its cells changes. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, (1 << 21) / 64);
	__type(key, __u32);
	__type(value, __u64);
} cell_dirty SEC(".maps");

/* The compat core's histogram cells (SPANWATCH_COMPAT): cell key (the
 * high 32 bits of a cell above) -> cumulative count. Sized by the
 * collector; one entry in the other objects, which do not use it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cell_counts SEC(".maps");

/* Series created per workload (BPF adds), released per workload (the
 * collector writes), and quotas that differ from default_quota, keyed by
 * the workload's cgroup id. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
} cg_created SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
} cg_released SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u32);
} cg_quota SEC(".maps");

/* cgroup id -> the cgroup id of its workload, written by the collector
 * (collector/workloads.go): every workload root and the cgroups above
 * them, then, while there is room, the cgroups below them. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
} cg_workload SEC(".maps");

/* cgroup id -> 1 for the cgroups that run more than one executable,
 * written by the collector (collector/split.go): their series are kept
 * per process, the tgid in the key. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u8);
} cg_split SEC(".maps");

/* tgid -> the comm of the thread that made the process's first series in
 * a split cgroup: its name should it exit before the collector read
 * /proc/PID/exe (a forked worker that lives for one request). The
 * collector deletes it with the process's last series. */
struct split_comm {
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct split_comm);
} split_comms SEC(".maps");

/* {name_id, set} -> budget for exact names, written by the collector. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BUDGET_MAX * BUDGET_SETS);
	__type(key, struct budget_key);
	__type(value, struct budget);
} budgets SEC(".maps");

/* Glob budgets in the order of the rule file; exact names win over them.
 * Set s holds entries s * GLOB_MAX onwards. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GLOB_MAX * BUDGET_SETS);
	__type(key, __u32);
	__type(value, struct budget_glob);
} budget_globs SEC(".maps");

/* name_id -> name, written when a series of the name is created. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 131072);
	__type(key, __u64);
	__type(value, struct span_name);
} names SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} overruns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* count adds one to a counter: atomically, since a preempting program run
 * on this CPU may add to the same per-CPU value. */
static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);
	if (c)
		__sync_fetch_and_add(c, 1);
}

/*
 * span_name_id hashes the name up to its first NUL (all SPAN_NAME_LEN
 * bytes when there is none) and zeroes the bytes after it, so the same
 * name always gets the same id whatever garbage follows its terminator.
 * Must match NameID in snapshot/nameid.go.
 */
static __always_inline __u64 span_name_id(char *name)
{
	__u64 h = 0xcbf29ce484222325ULL;
	__u64 *w = (__u64 *)name;
	int i;

	/* Hash the words up to the one with the NUL (most names are short),
	 * then zero the rest: not unrolled, which would spill registers all
	 * over the stack. */
#pragma nounroll
	for (i = 0; i < SPAN_NAME_LEN / 8; i++) {
		__u64 x = w[i];
		/* Lowest byte that is zero: exact for the lowest one. */
		__u64 z = (x - 0x0101010101010101ULL) & ~x & 0x8080808080808080ULL;
		__u64 lowest = z & (~z + 1);
		/* Keep the bytes below the NUL; all of them when there is none. */
		x &= (lowest >> 7) - 1;
		w[i] = x;
		h = (h ^ x) * 0x100000001b3ULL;
		/* Fold the high bits down: a multiply only carries upwards, so
		 * without this two words' bit 63 flipped together would cancel
		 * (two names, one id). */
		h ^= h >> 29;
		if (z)
			break;
	}
#pragma nounroll
	for (i = i + 1; i < SPAN_NAME_LEN / 8; i++)
		*(volatile __u64 *)&w[i] = 0; /* not a memset call */
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h ? h : 1;
}

/*
 * name_cut makes a name buffer of SPAN_NAME_LEN bytes a terminated string
 * of at most SPAN_NAME_LEN - 1 bytes. name[SPAN_NAME_LEN - 1] is 0 when the
 * name fits; otherwise it is the first byte of the name that does not fit
 * (a payload whose name fills the buffer, or a string from user memory
 * whose caller read the byte after the first 127 into it), and the name is
 * cut there or, when that byte continues a UTF-8 character, where the
 * character begins, so no character is ever split. Cuts are counted.
 */
static __always_inline void name_cut(char *name)
{
	__u8 *n = (__u8 *)name;
	int cut = SPAN_NAME_LEN - 1;

	if (n[SPAN_NAME_LEN - 1] == 0)
		return;
#pragma unroll
	for (int i = 0; i < 3; i++) {
		if ((n[cut] & 0xc0) != 0x80)
			break;
		cut--;
	}
#pragma unroll
	for (int i = SPAN_NAME_LEN - 4; i < SPAN_NAME_LEN; i++)
		if (i >= cut)
			n[i] = 0;
	count(COUNTER_NAME_TRUNCATED);
}

#ifndef SPANWATCH_COMPAT
static __always_inline void atomic_max(__u64 *p, __u64 v)
{
	__u64 cur = *(volatile __u64 *)p;

	for (int i = 0; i < 8; i++) {
		if (v <= cur)
			return;
		__u64 old = __sync_val_compare_and_swap(p, cur, v);
		if (old == cur)
			return;
		cur = old;
	}
	count(COUNTER_MINMAX_RETRIES);
}

static __always_inline void mark_dirty(void *bitmap, __u32 bit)
{
	__u32 word = bit / 64;
	__u64 mask = 1ULL << (bit & 63);
	__u64 *w = bpf_map_lookup_elem(bitmap, &word);

	/* Read first: most spans find the bit already set, and a plain read
	 * keeps the line shared between CPUs. */
	if (w && !(*(volatile __u64 *)w & mask))
		__sync_fetch_and_or(w, mask);
}
#else
/* No compare-and-swap: min and max are not kept (see the top). */
static __always_inline void atomic_max(__u64 *p, __u64 v)
{
}

/* One byte per mark, set with a plain store: no atomic or before 5.12. */
static __always_inline void mark_dirty(void *bitmap, __u32 bit)
{
	__u32 word = bit / 8;
	__u8 *w = bpf_map_lookup_elem(bitmap, &word);

	if (w && !((volatile __u8 *)w)[bit & 7])
		((volatile __u8 *)w)[bit & 7] = 1;
}
#endif

/* hist_field returns the cell field of a value: durations are never
 * negative; metric values are signed. A global function: its six-step
 * binary search would otherwise multiply the paths the verifier walks
 * through everything after it by 64. */
static __always_inline __u32 hist_field(__u64 v, int metric)
{
	__u32 neg = 0;
	__s32 idx;

	if (metric && (__s64)v < 0) {
		v = -v;
		neg = CELL_NEG;
	}
	if (v == 0)
		return 0;
	idx = metric ? hist_value_index(v) : hist_duration_index(v);
	idx += CELL_INDEX_BIAS;
	if (idx < 1)
		idx = 1;
	if (idx > CELL_NEG - 1)
		idx = CELL_NEG - 1;
	return neg + idx;
}

#ifndef SPANWATCH_COMPAT
/* cell_add counts one value in the (slot, field) cell: the first of the
 * probed cells that holds the key, else the first empty one, claimed with
 * a compare-and-swap. Cells are never freed while their slot is live, so a
 * key found stays the key (a key may end up in two cells, when a cell
 * before its first one was freed: the collector adds them up). Two chunks
 * of 8 cells are probed, one cache line each. */
struct cell_probe {
	__u64 h;
	__u32 key;
	__u32 mask;
	__u32 bank;
	__u32 done;
};

/* The probe order: chunk h >> 40 then h >> 17, each from the cell h picks
 * (h >> 8) & 7 around the chunk, so keys sharing a chunk mostly start at
 * different cells and the first probe usually finds the key. */
/* cell_hash spreads the keys over the chunks. A multiply alone does not:
 * keys are slots times 1 << CELL_FIELD_BITS, and the bits of key * the
 * golden ratio that pick a chunk (from bit 40, not the top ones) repeat
 * with the slot, 2,336 of 16,384 chunks full with 40,000 series in a bank
 * of 131,072 cells and 449 of their values lost (histogram_full). The
 * shifts and second multiply (splitmix64's finalizer) mix every bit of the
 * key into every bit used. */
static __always_inline __u64 cell_hash(__u32 key)
{
	__u64 h = key * 0x9e3779b97f4a7c15ULL;

	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 31;
	return h;
}

static __always_inline __u32 cell_chunk_of(__u64 h, __u64 i, __u32 mask)
{
	return (__u32)(h >> (i < CELLS_PER_CHUNK ? 40 : 17)) & mask;
}

static __always_inline __u32 cell_in_chunk(__u64 h, __u64 i)
{
	return (__u32)((h >> 8) + i) & (CELLS_PER_CHUNK - 1);
}

/* cell_dirty_mark marks a chunk of a bank dirty: its bit in the bitmap of
 * every bank's chunks. */
static __always_inline void cell_dirty_mark(__u32 bank, __u32 chunk, __u32 mask)
{
	mark_dirty(&cell_dirty, bank * (mask + 1) + chunk);
}

static long cell_try(__u64 i, struct cell_probe *p)
{
	__u32 bank = p->bank;
	void *cells = bpf_map_lookup_elem(&cell_banks, &bank);
	__u32 chunk = cell_chunk_of(p->h, i, p->mask);
	__u64 want = (__u64)p->key << 32;

	if (!cells)
		return 1;
	struct cell_chunk *c = bpf_map_lookup_elem(cells, &chunk);
	if (!c)
		return 1;
	__u64 *cell = &c->cell[cell_in_chunk(p->h, i)];
	__u64 v = *(volatile __u64 *)cell;
	if ((v >> 32) != p->key) {
		if (v != 0)
			return 0;
		v = __sync_val_compare_and_swap(cell, 0, want | 1);
		if (v != 0 && (v >> 32) != p->key)
			return 0;
	}
	if (v != 0)
		__sync_fetch_and_add(cell, 1);
	cell_dirty_mark(bank, chunk, p->mask);
	p->done = 1;
	return 1;
}

/* cell_probe_all walks the probe order for the key's cell in a bank,
 * claiming an empty one. A global function, verified once. */
SW_GLOBAL int cell_probe_all(__u32 key, __u32 bank, __u32 bank_chunks_mask)
{
	struct cell_probe p = {.key = key, .mask = bank_chunks_mask, .bank = bank};

	p.h = cell_hash(key);
	bpf_loop(2 * CELLS_PER_CHUNK, cell_try, &p, 0);
	if (!p.done)
		count(COUNTER_HIST_FULL);
	return 0;
}

/* cell_add counts a value in the (slot, field) cell, in the slot's bank,
 * or another while the collector has not created that one yet (a burst
 * of new series; the collector frees such cells once the slot's bank is
 * there): inline for the common case (the key in the first cell probed),
 * cell_probe_all else. */
static __always_inline void cell_add(__u32 slot, __u32 field, const struct core_state *st)
{
	__u32 key = ((slot + 1) << CELL_FIELD_BITS) | field;
	__u64 h = cell_hash(key);
	__u32 mask = st->bank_chunks_mask, per = st->bank_slots;
	__u32 bank = per ? slot / per : 0;
	void *cells = bpf_map_lookup_elem(&cell_banks, &bank);

	if (!cells && bank) {
		/* Not made yet: a bank made takes the value, the slot's
		 * modulo their count, so that a burst spreads over them. */
		__u32 made = *(volatile const __u32 *)&st->banks_made;
		bank = made ? slot % made : 0;
		cells = bpf_map_lookup_elem(&cell_banks, &bank);
	}
	if (!cells) {
		count(COUNTER_HIST_FULL);
		return;
	}
	__u32 chunk = cell_chunk_of(h, 0, mask);
	struct cell_chunk *c = bpf_map_lookup_elem(cells, &chunk);
	if (c) {
		__u64 *cell = &c->cell[cell_in_chunk(h, 0)];
		if ((*(volatile __u64 *)cell >> 32) == key) {
			__sync_fetch_and_add(cell, 1);
			cell_dirty_mark(bank, chunk, mask);
			return;
		}
	}
	cell_probe_all(key, bank, mask);
}

#else
/* cell_add counts a value in the (slot, field) cell of cell_counts: an
 * add to an existing cell, else an insertion, which only one CPU wins;
 * a loser adds to the winner's cell. */
static __always_inline void cell_add(__u32 slot, __u32 field, const struct core_state *st)
{
	__u32 key = ((slot + 1) << CELL_FIELD_BITS) | field;
	__u64 one = 1, *n = bpf_map_lookup_elem(&cell_counts, &key);

	if (n) {
		__sync_fetch_and_add(n, 1);
		return;
	}
	if (bpf_map_update_elem(&cell_counts, &key, &one, BPF_NOEXIST) == 0)
		return;
	n = bpf_map_lookup_elem(&cell_counts, &key);
	if (n) {
		__sync_fetch_and_add(n, 1);
		return;
	}
	count(COUNTER_HIST_FULL); /* the map is full */
}
#endif

/* slot_alloc takes a slot: a freed one, else a never-used one. */
static __always_inline int slot_alloc(struct core_state *c, __u32 *slot)
{
	if (bpf_map_pop_elem(&free_slots, slot) == 0) {
#ifdef SPANWATCH_COMPAT
		/* The collector filled the queue with every slot, in order:
		 * the slots taken bound the slots ever used. */
		__sync_fetch_and_add(&c->next_slot, 1);
#endif
		return 0;
	}
#ifdef SPANWATCH_COMPAT
	count(COUNTER_SERIES_FULL);
	return -1;
#endif
	__u64 n = __sync_fetch_and_add(&c->next_slot, 1);
	if (n >= c->series_max || n > CELL_SLOT_MAX) {
		count(COUNTER_SERIES_FULL);
		return -1;
	}
	*slot = n;
	return 0;
}

/* How many levels above the current cgroup quota_owner looks for one the
 * collector knows: delegated trees and the systemd or Kubernetes layout
 * above them are far shallower. */
#define WORKLOAD_LEVELS 16

/*
 * quota_owner sets *owner to the workload a new series of the cgroup *cg
 * is charged to: what cg_workload says of the cgroup, else (the cgroup is
 * new to the collector) of its nearest ancestor there, read from the
 * current task's cgroup (bpf_get_current_ancestor_cgroup_id: level 0 is
 * the root, a level below the task's cgroup gives 0); else the cgroup
 * itself. The compat core (5.10 to 5.16) does not walk: a cgroup the
 * collector has not classified yet is its own workload until it has
 * (docs/series.md). Both are pointers, used as map keys where they are,
 * and *owner as the walk's scratch: series_create's frame stays within
 * the 32 bytes 6.1 rounds it to in a chain's 512 (bpf/internal/vstat).
 */
static __always_inline void quota_owner(__u64 *cg, __u64 *owner)
{
	__u64 *w = bpf_map_lookup_elem(&cg_workload, cg);

	if (w) {
		*owner = *w;
		return;
	}
#ifndef SPANWATCH_COMPAT
	if (bpf_get_current_cgroup_id() == *cg) {
		for (int level = WORKLOAD_LEVELS - 1; level >= 0; level--) {
			*owner = bpf_get_current_ancestor_cgroup_id(level);
			if (!*owner)
				continue;
			w = bpf_map_lookup_elem(&cg_workload, owner);
			if (w) {
				*owner = *w;
				return;
			}
		}
	}
#endif
	*owner = *cg;
}

/* quota_exceeded tells whether the workload holds its quota of series
 * already. */
static __always_inline int quota_exceeded(struct core_state *c, __u64 *owner)
{
	__u64 *created, *released;
	__u32 *q = bpf_map_lookup_elem(&cg_quota, owner);
	__u32 quota = q ? *q : c->default_quota;

	created = bpf_map_lookup_elem(&cg_created, owner);
	if (!created)
		return 0;
	released = bpf_map_lookup_elem(&cg_released, owner);
	/* The collector deletes both entries once a workload has released
	 * every series it created (so the maps hold live workloads only); a
	 * series created in between is then released without its creation
	 * counted: saturate rather than wrap. */
	__u64 live = *created, gone = released ? *released : 0;
	return live > gone && live - gone >= quota;
}

static __always_inline void quota_count(__u64 *owner)
{
	__u64 one = 1, *created = bpf_map_lookup_elem(&cg_created, owner);

	if (created) {
		__sync_fetch_and_add(created, 1);
		return;
	}
	if (bpf_map_update_elem(&cg_created, owner, &one, BPF_NOEXIST)) {
		created = bpf_map_lookup_elem(&cg_created, owner);
		if (created)
			__sync_fetch_and_add(created, 1);
	}
}

/*
 * series_create creates the series of key, recording its name unless
 * has_name is 0, and returns its slot, or -1 when there is no room (every
 * loss is counted). A workload past its quota gets its "(other)" series
 * instead: key is rewritten to it. Another CPU may create the same series
 * at the same moment: then the slot it published is returned. A global
 * function, so the verifier checks it once, not at every caller.
 */
static __noinline int series_create(struct series_key *key, struct span_name *name, int has_name)
{
	struct core_state *c = core_get();
	__u32 *idx, slot;

	/* Checked, though no caller passes NULL. */
	if (!c || !key || !name)
		return -1;
	__u64 owner;
	quota_owner(&key->cgroup_id, &owner);
	if (key->name_id == c->other_name_id || quota_exceeded(c, &owner)) {
		if (key->name_id != c->other_name_id)
			count(COUNTER_QUOTA_OTHER);
		/* One "(other)" series per workload, in the workload's root
		 * cgroup, charged to none: a user who makes cgroups (or names
		 * his spans "(other)") makes no more of them. */
		key->cgroup_id = owner;
		owner = 0;
		key->name_id = c->other_name_id;
		key->labelset = 0;
		key->other = 0;
		key->labels[0] = key->labels[1] = key->labels[2] = 0;
		key->tgid = 0;
		idx = bpf_map_lookup_elem(&series_index, key);
		if (idx)
			return *idx;
		has_name = 0;
	}
	if (slot_alloc(c, &slot))
		return -1;
	struct series_slot *s = bpf_map_lookup_elem(&series, &slot);
	if (!s)
		return -1;
	__builtin_memcpy(&s->key, key, sizeof(*key));
	s->quota_cg = owner;
	if (bpf_map_update_elem(&series_index, key, &slot, BPF_NOEXIST)) {
		/* Another CPU created it first (-EEXIST), or the index is
		 * full: give the slot back. */
		bpf_map_push_elem(&free_slots, &slot, 0);
		idx = bpf_map_lookup_elem(&series_index, key);
		if (!idx) {
			count(COUNTER_SERIES_FULL);
			return -1;
		}
		return *idx;
	}
	if (has_name && bpf_map_update_elem(&names, &key->name_id, name, BPF_ANY))
		count(COUNTER_NAMES_FULL);
	/* A process's first series in a split cgroup: its comm, written in
	 * place. The entry is made from name's first bytes (any 16 bytes
	 * will do, and they are there: no buffer on this frame), then
	 * overwritten. */
#ifndef SPANWATCH_COMPAT
	if (key->tgid && !bpf_map_update_elem(&split_comms, &key->tgid, name, BPF_NOEXIST)) {
		struct split_comm *sc = bpf_map_lookup_elem(&split_comms, &key->tgid);
		if (sc)
			bpf_get_current_comm(sc->comm, sizeof(sc->comm));
	}
#endif
	if (owner)
		quota_count(&owner);
	/* Publish: the collector reads the key of a live slot only. */
#ifndef SPANWATCH_COMPAT
	__sync_lock_test_and_set(&s->state, SLOT_LIVE);
#else
	/* No exchange before 5.12: a plain store after the key's, which
	 * x86-64 keeps in order (the compiler must too). */
	asm volatile("" ::: "memory");
	*(volatile __u64 *)&s->state = SLOT_LIVE;
#endif
	return slot;
}

/* budget_pack packs a budget as the series' cache keeps it, without the
 * generation: flags << 44 | budget_ns (clamped). */
static __always_inline __u64 budget_pack(__u64 ns, __u64 flags)
{
	if (ns > BUDGET_NS_MASK)
		ns = BUDGET_NS_MASK;
	return ((flags & BUDGET_FLAGS_MASK) << BUDGET_NS_BITS) | ns;
}

/* budget_word reads core_state.budget_gen: which budgets are in force. */
static __always_inline __u32 budget_word(const struct core_state *c)
{
	return *(volatile const __u32 *)&c->budget_gen;
}

/* budget_exact returns the exact-name budget of name_id in the set that
 * word (core_state.budget_gen, read once) puts in force, or NULL. */
static __always_inline struct budget *budget_exact(__u64 name_id, __u32 word)
{
	struct budget_key k = {.name_id = name_id, .set = (word >> BUDGET_SET_SHIFT) & 1};

	return bpf_map_lookup_elem(&budgets, &k);
}

#ifdef SPANWATCH_COMPAT
/* budget_lookup finds the budget of a name in the set word puts in
 * force: an exact entry only (no bpf_loop here: the collector writes an
 * exact entry into that set for each name a glob matches). */
SW_GLOBAL __u64 budget_lookup(__u64 name_id, struct span_name *name, __u32 word)
{
	struct budget *b = budget_exact(name_id, word);

	if (!name || !b)
		return 0;
	return budget_pack(b->budget_ns, b->flags);
}
#else
/* Glob matching (budgets), the same as policy's globs: '*' any run of
 * characters, '?' one character, literal bytes otherwise; the classic
 * matcher that backtracks to the last '*' only. The states of the two
 * loops are kept small: each bpf_loop callback is a frame of its own, and
 * kernels before 6.12 (6.1 at least) count them all in the 512 bytes a
 * chain of calls may use, rounded up to 32 bytes each. */
struct glob_state {
	const __u8 *name;
	const struct budget_glob *g;
	/* Positions in the pattern (ti, star_t: below GLOB_LEN) and in the
	 * name (si, star_s: at most SPAN_NAME_LEN + 3). */
	__u8 ti, si, star_t, star_s;
	__u8 has_star;
	__s8 result; /* -1 running, 0 no match, 1 match */
	__u8 _pad[2];
};

static __always_inline __u32 utf8_len(__u8 c)
{
	if (c < 0xc0)
		return 1;
	if (c < 0xe0)
		return 2;
	if (c < 0xf0)
		return 3;
	return 4;
}

/* name_at is n[i], 0 past the name. The index is masked on an opaque
 * copy: with byte-sized positions clang tests i < SPAN_NAME_LEN on a sign
 * bit of another register and drops the mask, and the verifier, seeing no
 * bound on the register it indexes with, refuses the load (6.18). */
static __always_inline __u8 name_at(const __u8 *n, __u32 i)
{
	__u32 j = i;

	asm volatile("" : "+r"(j));
	return i < SPAN_NAME_LEN ? n[j & (SPAN_NAME_LEN - 1)] : 0;
}

static long glob_step(__u64 i, struct glob_state *st)
{
	const __u8 *n = st->name;
	const struct budget_glob *g = st->g;
	__u32 ti = st->ti, si = st->si;
	__u8 c = name_at(n, si);

	if (ti < g->len && ti < GLOB_LEN) {
		__u8 kind = g->kind[ti & (GLOB_LEN - 1)];
		if (kind == 1) {
			st->has_star = 1;
			st->star_t = ti;
			st->star_s = si;
			st->ti = ti + 1;
			return 0;
		}
		if (kind == 2 && c) {
			st->ti = ti + 1;
			st->si = si + utf8_len(c);
			return 0;
		}
		if (kind == 0 && c && c == g->lit[ti & (GLOB_LEN - 1)]) {
			st->ti = ti + 1;
			st->si = si + 1;
			return 0;
		}
	} else if (!c) {
		st->result = 1;
		return 1;
	}
	/* Mismatch: let the last '*' take one more character. */
	__u32 ss = st->star_s;
	__u8 sc = name_at(n, ss);
	if (!st->has_star || !sc) {
		st->result = 0;
		return 1;
	}
	st->star_s = ss + utf8_len(sc);
	st->ti = st->star_t + 1;
	st->si = st->star_s;
	return 0;
}

struct budget_search {
	const char *name;
	__u32 count; /* globs in use */
	__u32 base;  /* the set's first entry in budget_globs */
	__u64 found; /* the first match's budget, packed: flags << 44 | budget_ns */
};

static long glob_try(__u32 i, struct budget_search *bs)
{
	__u32 idx = bs->base + i;
	struct budget_glob *g = bpf_map_lookup_elem(&budget_globs, &idx);
	struct glob_state st = {};

	if (!g || i >= bs->count)
		return 1;
	st.name = (const __u8 *)bs->name;
	st.g = g;
	st.result = -1;
	/* The matcher's starting state must be unknown to the verifier.
	 * Before 6.7 it walks a bpf_loop callback once, from the state the
	 * caller left: with has_star a known 0 the backtracking branch is
	 * dead code to it, and removed (seen on 6.1: a '*' only ever matched
	 * the empty run). A value read from the map is unknown to it, and
	 * len >> 7 is 0 (len <= GLOB_LEN). */
	__u8 zero = g->len >> 7;
	st.ti = st.si = st.star_t = st.star_s = st.has_star = zero;
	bpf_loop(GLOB_STEPS, glob_step, &st, 0);
	if (st.result == -1)
		return 0; /* cannot happen within GLOB_STEPS; no match */
	if (st.result != g->neg) {
		bs->found = budget_pack(g->b.budget_ns, g->b.flags);
		return 1;
	}
	return 0;
}

/* budget_lookup finds the budget of a name in the set word puts in force:
 * an exact entry, else the first matching glob. It returns it packed as
 * the series' cache keeps it (flags << 44 | budget_ns), without the
 * generation. A global function, so the verifier checks the glob matcher
 * once. */
SW_GLOBAL __u64 budget_lookup(__u64 name_id, struct span_name *name, __u32 word)
{
	struct budget *b = budget_exact(name_id, word);
	__u32 globs = (word >> BUDGET_GLOBS_SHIFT) & BUDGET_GLOBS_MASK;

	if (!name)
		return 0;
	if (b)
		return budget_pack(b->budget_ns, b->flags);
	if (!globs)
		return 0;
	struct budget_search bs = {
		.name = name->name,
		.count = globs,
		.base = ((word >> BUDGET_SET_SHIFT) & 1) * GLOB_MAX,
	};
	bpf_loop(GLOB_MAX, glob_try, &bs, 0);
	return bs.found;
}

#endif

/*
 * series_add adds one value to a slot: count, sum, errors (how & 2), the
 * window's extremes, its histogram cell, its dirty bit. For a span (how & 1
 * clear) it returns the budget word (flags << 44 | budget_ns, budget_ns 0
 * for none) from the slot's cache, filled again when the budgets changed,
 * and counts the span over budget when it is; 0 for a metric value. A
 * global function, verified once.
 */
SW_GLOBAL __u64 series_add(__u32 slot, __u64 v, __u32 how, __u64 name_id, struct span_name *name)
{
	struct core_state *c = core_get();
	struct series_slot *s = bpf_map_lookup_elem(&series, &slot);
	int metric = how & 1;

	if (!c || !s)
		return 0;
	__sync_fetch_and_add(&s->count, 1);
	__sync_fetch_and_add(&s->sum, v);
	if (how & 2)
		__sync_fetch_and_add(&s->errors, 1);
	__u64 ord = metric ? v ^ (1ULL << 63) : v;
	atomic_max(&s->max, ord);
	atomic_max(&s->min_inv, ~ord);
	cell_add(slot, hist_field(v, metric), c);
	mark_dirty(&series_dirty, slot);
	if (metric)
		return 0;
	/* The budget, from the slot's cache when the budgets did not change
	 * since it was filled. */
	__u64 cached = *(volatile __u64 *)&s->budget;
	__u32 word = budget_word(c);
	__u32 gen = word & BUDGET_GEN_MASK;
	if (BUDGET_GEN(cached) != gen) {
		cached = ((__u64)gen << BUDGET_GEN_SHIFT) | budget_lookup(name_id, name, word);
		s->budget = cached; /* one aligned store: readers see old or new */
	}
	__u64 budget_ns = cached & BUDGET_NS_MASK;
	if (budget_ns && v > budget_ns)
		__sync_fetch_and_add(&s->over_budget, 1);
	return cached;
}

/*
 * Linux on arm64 before 5.14 walks a user stack's frame records only while
 * they are 16-byte aligned (arch/arm64/kernel/perf_callchain.c,
 * perf_callchain_user: "tail && !((unsigned long)tail & 0xf)"; Debian 11's
 * 5.10.223 tests x29 with "tst x2, #0xf"); 5.14 relaxed it to 8 bytes
 * ("arm64: stacktrace: Relax frame record alignment requirement to 8
 * bytes", in the 5.14 merge window; Debian 12's 6.1.192 tests "#0x7").
 * Go's arm64 frame record sits 8 bytes below its 16-byte aligned
 * stack pointer (x29 = RSP - 8), so those kernels refuse the first Go
 * frame and bpf_get_stack gives the probed pc alone. The compat objects
 * for arm64 (5.10 to 5.16) then walk the records themselves, as 5.14+
 * does: from x29, each record {next x29, return address}, 8-byte aligned,
 * up the stack only.
 */
#if defined(SPANWATCH_COMPAT) && defined(__TARGET_ARCH_arm64)
#define SW_WALK_USER_FRAMES 1

struct user_frame_record {
	__u64 next;
	__u64 ret;
};

/* ustack_walk continues r's user stack from the uprobe's registers when
 * the kernel's walk gave the pc alone and x29 is 8-byte but not 16-byte
 * aligned: a frame record the kernel refused. */
static __always_inline void ustack_walk(const struct pt_regs *regs, struct overrun *r)
{
	struct user_frame_record fr;
	__u64 fp, n = 1;

	if (!regs || r->ustack_len != sizeof(__u64))
		return;
	fp = PT_REGS_FP(regs);
	if (!fp || (fp & 0x7) || !(fp & 0xf))
		return;
	for (int i = 1; i < MAX_USTACK; i++) {
		if (bpf_probe_read_user(&fr, sizeof(fr), (void *)fp))
			break;
		r->ustack[i] = fr.ret;
		n++;
		if (fr.next <= fp || (fr.next & 0x7))
			break;
		fp = fr.next;
	}
	r->ustack_len = n * sizeof(__u64);
}
#endif

/* An input to series_aggregate. */
struct agg_in {
	struct series_key key;
	/* The name: SPAN_NAME_LEN bytes, NUL-padded after the terminator
	 * (span_name_id() leaves it so); key.name_id is its span_name_id(). */
	const char *name;
	/* The span's ids and start time for overrun records, or 0. */
	const struct span_event *ev;
	__u64 value; /* the duration (spans) or the value (metrics) */
	__u32 source; /* SOURCE_* */
	__u32 error;  /* nonzero: count as an error */
	/* A slot + 1 where the caller's last value of this key went (0:
	 * none), or 0: read once, checked against the slot's key before the
	 * index is looked up, and updated. Other program runs may write it
	 * (a shared map entry): a hint is never trusted unchecked. */
	__u32 *hint;
	/* A function span's registers at its return instruction (source/
	 * function), or 0. There the frame pointer is already the caller's,
	 * so a walk by frame pointers goes from the traced function straight
	 * to its caller's caller; the caller's pc (the return address) is
	 * at the stack's top on x86-64, in the link register on arm64, and
	 * an overrun's user stack gets it as its second frame. Read only
	 * when a stack is taken. */
	const struct pt_regs *ret_regs;
#ifdef SW_WALK_USER_FRAMES
	/* The user registers at a uprobe (its ctx), or 0: where the kernel's
	 * walk stops at the first frame, ustack_walk() goes on from them. */
	const struct pt_regs *uregs;
#endif
};

/*
 * ustack_at_return takes the user stack at a return instruction (agg_in.
 * ret_regs): the kernel's walk one frame to the right, then the return
 * address in the second frame, after the pc. When the caller's pc cannot
 * be read, the walk stays as the kernel gave it.
 */
static __always_inline void ustack_at_return(void *ctx, const struct pt_regs *regs, struct overrun *r)
{
	__u64 caller = 0;
	long n;

#if defined(__TARGET_ARCH_x86)
	if (bpf_probe_read_user(&caller, sizeof(caller), (void *)PT_REGS_SP(regs)))
		caller = 0;
#elif defined(__TARGET_ARCH_arm64)
	caller = PT_REGS_RET(regs);
#endif
	if (!caller) {
		r->ustack_len = bpf_get_stack(ctx, r->ustack, sizeof(r->ustack), BPF_F_USER_STACK);
		return;
	}
	n = bpf_get_stack(ctx, &r->ustack[1], sizeof(r->ustack) - sizeof(__u64), BPF_F_USER_STACK);
	if (n < (long)sizeof(__u64)) {
		r->ustack_len = n;
		return;
	}
	r->ustack[0] = r->ustack[1];
	r->ustack[1] = caller;
	r->ustack_len = n + sizeof(__u64);
}

/*
 * hint_holds tells whether slot hint - 1 holds key: a live slot whose key
 * is key's. A slot leaves the index before it is freed and is freed only
 * after a grace period (collector/evict.go), so a program that finds its
 * key there adds to the right series, and one that finds another key (the
 * slot was reused) looks the index up. Comparing the key costs less than
 * hashing it.
 */
static __always_inline int hint_holds(__u32 hint, const struct series_key *key)
{
	__u32 slot = hint - 1;
	const struct series_slot *s;

	if (!hint)
		return 0;
	s = bpf_map_lookup_elem(&series, &slot);
	if (!s || *(volatile __u64 *)&s->state != SLOT_LIVE)
		return 0;
	const __u64 *a = (const __u64 *)&s->key, *b = (const __u64 *)key;
	return !((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4]) | (a[5] ^ b[5]));
}

/*
 * split_process puts the current process's tgid in key when its cgroup
 * runs more than one executable (cg_split): the collector names each
 * such series after its process (docs/series.md). Every source's value
 * comes here from the task that ended the span. Where no cgroup is split
 * (core_state.split_cgroups is 0: most hosts, every Kubernetes node
 * whose containers run one executable each) this costs one load from
 * the core's array, whose lookup the verifier inlines; else one hash
 * lookup per value. The compat core (5.10 to 5.16) does not split: with
 * it, 5.10's verifier walked more than its million instructions through
 * coretest_hot and the sources' programs (test/vm 5.10 lane), and the
 * collector marks no cgroup there (collector/split.go).
 */
static __always_inline void split_process(struct series_key *key)
{
#ifndef SPANWATCH_COMPAT
	struct core_state *c = core_get();

	if (c && *(volatile __u32 *)&c->split_cgroups && bpf_map_lookup_elem(&cg_split, &key->cgroup_id))
		key->tgid = bpf_get_current_pid_tgid() >> 32;
#endif
}

/*
 * series_aggregate adds one value to its series and, for a span slower
 * than its budget, sends an overrun record with the thread's stacks (as
 * the budget's flags ask). ctx is the program's context (for bpf_get_stack).
 * in->ev->name must be NUL-padded after its terminator (span_name_id()
 * leaves it so) and in->key.name_id its span_name_id().
 */
static __always_inline void series_aggregate(void *ctx, struct agg_in *in)
{
	int metric = in->key.kind == SERIES_METRIC;
	__u64 v = in->value;
	__u32 slot = 0;
	split_process(&in->key);
	/* The hint is read once: the slot checked is the slot used, even
	 * where another program run may write the hint meanwhile. */
	__u32 hint = in->hint ? *(volatile __u32 *)in->hint : 0;
	if (hint_holds(hint, &in->key)) {
		slot = hint - 1;
		goto found;
	}
	__u32 *idx = bpf_map_lookup_elem(&series_index, &in->key);
	if (idx) {
		slot = *idx;
	} else {
		int n = series_create(&in->key, (struct span_name *)in->name, 1);
		if (n < 0)
			return;
		slot = n;
	}
	if (in->hint)
		*in->hint = slot + 1;
found:;
	__u64 cached = series_add(slot, v, metric | (in->error ? 2 : 0), in->key.name_id, (struct span_name *)in->name);
	__u64 budget_ns = cached & BUDGET_NS_MASK;
	if (!budget_ns || v <= budget_ns)
		return;

	struct overrun *r = bpf_ringbuf_reserve(&overruns, sizeof(*r), 0);
	if (!r) {
		count(COUNTER_RINGBUF_DROPS);
		return;
	}
	__u32 flags = BUDGET_FLAGS(cached);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	r->ts_ns = bpf_ktime_get_ns();
	r->name_id = in->key.name_id;
	r->cgroup_id = in->key.cgroup_id;
	r->duration_ns = v;
	r->budget_ns = budget_ns;
	r->start_ns = in->ev ? in->ev->start_ns : 0;
	r->pid = pid_tgid >> 32;
	r->tid = (__u32)pid_tgid;
	r->status = in->error ? SPAN_STATUS_ERROR : SPAN_STATUS_OK;
	r->source = in->source;
	if (in->ev) {
		__builtin_memcpy(r->trace_id, in->ev->trace_id, sizeof(r->trace_id));
		__builtin_memcpy(r->span_id, in->ev->span_id, sizeof(r->span_id));
	} else {
		__builtin_memset(r->trace_id, 0, sizeof(r->trace_id));
		__builtin_memset(r->span_id, 0, sizeof(r->span_id));
	}
	__builtin_memcpy(r->name, in->name, sizeof(r->name));
	__builtin_memcpy(r->labels, in->key.labels, sizeof(r->labels));
	r->labelset = in->key.labelset;
	r->kind = in->key.kind;
	r->other = in->key.other;
	r->tgid = in->key.tgid;
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	r->ustack_len = 0;
	r->kstack_len = 0;
	if (flags & BUDGET_CAPTURE_USER) {
		if (in->ret_regs)
			ustack_at_return(ctx, in->ret_regs, r);
		else
			r->ustack_len = bpf_get_stack(ctx, r->ustack, sizeof(r->ustack), BPF_F_USER_STACK);
#ifdef SW_WALK_USER_FRAMES
		ustack_walk(in->uregs, r);
#endif
	}
	if (flags & BUDGET_CAPTURE_KERNEL)
		r->kstack_len = bpf_get_stack(ctx, r->kstack, sizeof(r->kstack), 0);
	bpf_ringbuf_submit(r, 0);
}

/*
 * span_aggregate_in ends one span of ev's name in cgroup_id (the cgroup v2
 * id of the task the span ran in): it cuts the name to SPAN_NAME_LEN - 1
 * bytes on a character boundary, hashes it (leaving ev->name NUL-padded)
 * and hands it to series_aggregate. uregs is a uprobe's ctx (the user
 * registers), or 0. ev may be modified.
 */
static __always_inline void span_aggregate_in(void *ctx, const struct pt_regs *uregs, struct span_event *ev, __u32 source,
					      __u64 cgroup_id)
{
	struct agg_in in = {};

#ifdef SW_WALK_USER_FRAMES
	in.uregs = uregs;
#else
	(void)uregs;
#endif
	name_cut(ev->name);
	in.key.name_id = span_name_id(ev->name);
	in.key.cgroup_id = cgroup_id;
	in.key.kind = SERIES_SPAN;
	in.name = ev->name;
	in.ev = ev;
	in.value = ev->duration_ns;
	in.source = source;
	in.error = ev->status != SPAN_STATUS_OK;
	series_aggregate(ctx, &in);
}

/* span_aggregate_cg is span_aggregate_in outside a uprobe. */
static __always_inline void span_aggregate_cg(void *ctx, struct span_event *ev, __u32 source, __u64 cgroup_id)
{
	span_aggregate_in(ctx, 0, ev, source, cgroup_id);
}

/* span_aggregate is span_aggregate_cg for the current task's cgroup. */
static __always_inline void span_aggregate(void *ctx, struct span_event *ev, __u32 source)
{
	span_aggregate_cg(ctx, ev, source, bpf_get_current_cgroup_id());
}

#endif
