/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The vocabulary every source shares to map the values of a probe or an
 * event onto series (internal/srcspec is the Go side): error predicates,
 * label values with a per-source cap, and argument metrics.
 *
 * A source fetches its operands however it reads them (USDT arguments from
 * registers and user memory, tracepoint fields at their offsets) into a
 * struct src_operands: up to SRC_OPERANDS 64-bit values, sign- or
 * zero-extended, with a bit saying which are signed and one saying which
 * were read. Then:
 *
 *  - src_pred_holds() evaluates a predicate ("arg2 >= 500 and arg3 != 0")
 *    compiled by internal/srcspec into disjunctive normal form: up to
 *    SRC_PRED_TERMS comparisons of an operand with a constant, and up to
 *    SRC_PRED_GROUPS groups, each the set of comparisons that must all
 *    hold; the predicate holds when one group does. Comparisons are exact
 *    whatever the signedness: a signed operand below zero is less than any
 *    unsigned value, an unsigned value above 2^63 is more than any signed
 *    constant. A comparison over an operand that could not be read fails.
 *  - src_labels_apply() puts label values in a series key: each label is an
 *    operand; a source admits at most cap distinct values per label (first
 *    come, first kept); values past the cap are keyed as "other" (the key's
 *    other bit), so series stay bounded and no value is lost.
 *  - a metric is a series of kind SERIES_METRIC whose value is an operand
 *    (two's complement, as the core keeps metric values).
 *
 * Every function that is not trivial is global (__noinline, not static), so
 * the verifier checks it once, not at every caller; their pointer arguments
 * may be NULL for the verifier and are checked.
 *
 * The including object gets the label maps below as its own: label sets are
 * numbered by the collector (collector.AllocLabelSet), unique across
 * sources, so objects never share a (labelset, label) counter.
 *
 * Needs aggregate.h first. Kernel 5.12+ (atomics with fetch); the compat
 * objects (SPANWATCH_COMPAT) 5.10+, where a label's cap may be passed by
 * one value per CPU admitting a new value at the same moment.
 */
#ifndef SPANWATCH_SOURCE_H
#define SPANWATCH_SOURCE_H

enum src_sizes {
	SRC_OPERANDS = 16,     /* operands one source fetches */
	SRC_PRED_TERMS = 8,    /* comparisons in a predicate */
	SRC_PRED_GROUPS = 8,   /* and-groups in a predicate */
	SRC_LABELSETS = 4096,  /* label set ids 1..SRC_LABELSETS - 1 */
	SRC_LABEL_VALUES = 65536, /* admitted label values, all sources of the object */
};

/* An argument or field index (a __u8) that is not given: the USDT
 * sources' name_arg, key_arg and value_arg, the EventHeader mappings'
 * idx_* fields. */
enum src_index {
	SRC_NO_ARG = 0xff,
};

/*
 * A comparison's operator is the set of orders it accepts: bit 0 "less",
 * bit 1 "equal", bit 2 "greater" (== is 2, != 5, < 1, <= 3, > 4, >= 6).
 */
enum src_op {
	SRC_OP_LT = 1,
	SRC_OP_EQ = 2,
	SRC_OP_GT = 4,
};

/* Counters of the including object's src_counters map. */
enum src_counter {
	SRC_COUNTER_LABEL_OTHER = 0,	/* values keyed "other": past their label's cap */
	SRC_COUNTER_LABEL_FULL = 1,	/* values keyed "other": src_label_values was full */
	SRC_COUNTER_LABEL_UNREAD = 2,	/* values keyed "other": their operand could not be read */
	SRC_COUNTER_MAX = 4,
};

struct src_term {
	__u64 value;	/* the constant, two's complement */
	__u8 operand;	/* index in struct src_operands */
	__u8 op;	/* SRC_OP_* bits */
	__u8 neg;	/* the constant is negative (as a signed 64-bit value) */
	__u8 _pad[5];
};

struct src_pred {
	struct src_term terms[SRC_PRED_TERMS];
	__u8 group[SRC_PRED_GROUPS]; /* bit i: terms[i] is in the group */
	__u8 nterms;
	__u8 ngroups; /* 0: the predicate never holds */
	__u8 _pad[6];
};

struct src_operands {
	__u64 v[SRC_OPERANDS];
	__u32 is_signed; /* bit i: v[i] is a signed value */
	__u32 ok;	 /* bit i: v[i] was read */
};

struct src_labels {
	__u16 labelset; /* 0: no labels */
	__u8 count;	/* labels, at most SERIES_LABELS */
	__u8 operand[SERIES_LABELS];
	__u8 _pad[2];
	__u32 cap; /* distinct values admitted per label */
};

struct src_label_key {
	__u64 value;
	__u16 labelset;
	__u8 label;
	__u8 _pad[5];
};

/* Admitted label values, never removed: the caps bound them. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SRC_LABEL_VALUES);
	__type(key, struct src_label_key);
	__type(value, __u32);
} src_label_values SEC(".maps");

/* Values admitted per label: index labelset * 4 + label. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SRC_LABELSETS * 4);
	__type(key, __u32);
	__type(value, __u64);
} src_label_count SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SRC_COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} src_counters SEC(".maps");

/* src_count adds one to a counter of src_counters, atomically: a
 * preempting program on this CPU may add to the same value. */
static __always_inline void src_count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&src_counters, &idx);
	if (c)
		__sync_fetch_and_add(c, 1);
}

/* Branch-free comparisons (BPF has no conditional moves: a ternary would
 * be a branch, and the verifier would walk each path). The empty asm hides
 * the operand from the compiler, which would otherwise see through the
 * arithmetic and compare with a branch. */
static __always_inline __u64 src_ult(__u64 a, __u64 b)
{
	__u64 d = a - b;

	asm volatile("" : "+r"(d));
	return ((~a & b) | (~(a ^ b) & d)) >> 63;
}

static __always_inline __u64 src_nonzero(__u64 x)
{
	__u64 n = -x;

	asm volatile("" : "+r"(n));
	return (x | n) >> 63;
}

/*
 * src_pred_holds reports whether the predicate holds for the operands.
 * The order of operand and constant (less, equal, greater) selects one bit
 * of each comparison's operator; all of it is computed without branches,
 * so the verifier walks one path (about 600 instructions, run in full).
 */
SW_GLOBAL int src_pred_holds(const struct src_pred *p, const struct src_operands *o)
{
	__u64 holds = 0, any = 0;

	if (!p || !o)
		return 0;
	__u64 nterms = p->nterms, ngroups = p->ngroups;
#pragma unroll
	for (int i = 0; i < SRC_PRED_TERMS; i++) {
		const struct src_term *t = &p->terms[i];
		__u32 k = t->operand & (SRC_OPERANDS - 1);
		__u64 v = o->v[k];
		__u64 c = t->value;
		/* Negative operand: a signed one with the top bit set. */
		__u64 vneg = (o->is_signed >> k) & (v >> 63) & 1;
		__u64 cneg = t->neg & 1;
		__u64 differ = vneg ^ cneg;
		/* Same sign: two's complement order is unsigned order. */
		__u64 lt = (differ & vneg) | ((differ ^ 1) & src_ult(v, c));
		__u64 eq = (differ ^ 1) & (src_nonzero(v ^ c) ^ 1);
		__u64 order = (lt ^ 1) * (2 - eq); /* 0 less, 1 equal, 2 greater */
		__u64 r = (t->op >> order) & 1;

		r &= (o->ok >> k) & 1;
		r &= src_ult(i, nterms);
		holds |= r << i;
	}
#pragma unroll
	for (int g = 0; g < SRC_PRED_GROUPS; g++) {
		__u64 m = p->group[g];
		any |= src_nonzero(m) & src_ult(g, ngroups) & (src_nonzero((holds & m) ^ m) ^ 1);
	}
	return any;
}

/*
 * src_label_admit reports whether value may be label's own value in the
 * label set: it was admitted before, or the label has admitted fewer than
 * cap values and admits it now. A value admitted by two CPUs at once is
 * admitted once: the loser gives its count back.
 */
static __always_inline int src_label_admit(__u16 labelset, __u32 label, __u64 value, __u32 cap)
{
	struct src_label_key k = {.value = value, .labelset = labelset, .label = label};
	__u32 idx = (__u32)labelset * 4 + label, one = 1;
	__u64 *n;
	long err;

	if (bpf_map_lookup_elem(&src_label_values, &k))
		return 1;
	n = bpf_map_lookup_elem(&src_label_count, &idx);
	if (!n || *(volatile __u64 *)n >= cap)
		goto other;
#ifndef SPANWATCH_COMPAT
	if (__sync_fetch_and_add(n, 1) >= cap)
		goto other;
	err = bpf_map_update_elem(&src_label_values, &k, &one, BPF_NOEXIST);
	if (err == 0)
		return 1;
	__sync_fetch_and_add(n, -1);
#else
	/* No fetch-and-add before 5.12: the count is read above and added
	 * to after the insertion, so CPUs admitting new values of one label
	 * at the same moment may each pass the cap once (at most one value
	 * per CPU over it); every value is still counted, in its series. */
	err = bpf_map_update_elem(&src_label_values, &k, &one, BPF_NOEXIST);
	if (err == 0) {
		__sync_fetch_and_add(n, 1);
		return 1;
	}
#endif
	if (err == -17) /* EEXIST: admitted by another CPU meanwhile */
		return 1;
	src_count(SRC_COUNTER_LABEL_FULL);
	return 0;
other:
	src_count(SRC_COUNTER_LABEL_OTHER);
	return 0;
}

/*
 * src_labels_apply sets the label set and values of key from the operands
 * (none when l has no labels). A label whose operand could not be read is
 * keyed "other" too, and counted.
 */
SW_GLOBAL int src_labels_apply(const struct src_labels *l, const struct src_operands *o, struct series_key *key)
{
	if (!l || !o || !key)
		return 0;
	key->labelset = 0;
	key->other = 0;
	key->labels[0] = key->labels[1] = key->labels[2] = 0;
	if (!l->labelset || !l->count || l->labelset >= SRC_LABELSETS)
		return 0;
	key->labelset = l->labelset;
#pragma unroll
	for (int i = 0; i < SERIES_LABELS; i++) {
		if (i >= l->count)
			break;
		__u32 k = l->operand[i] & (SRC_OPERANDS - 1);
		__u64 v = o->v[k];
		if (!((o->ok >> k) & 1)) {
			src_count(SRC_COUNTER_LABEL_UNREAD);
			key->other |= 1 << i;
		} else if (src_label_admit(l->labelset, i, v, l->cap)) {
			key->labels[i] = v;
		} else {
			key->other |= 1 << i;
		}
	}
	return 0;
}

/* src_metric makes in a metric value of the operand. It returns -1, and
 * leaves in alone, when the operand could not be read: the caller counts
 * that as a read error. */
static __always_inline int src_metric(struct agg_in *in, const struct src_operands *o, __u32 operand)
{
	__u32 k = operand & (SRC_OPERANDS - 1);

	if (!((o->ok >> k) & 1))
		return -1;
	in->key.kind = SERIES_METRIC;
	in->value = o->v[k];
	return 0;
}

#endif
