// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Spans of functions of any binary, without uretprobes: func_entry is a
 * uprobe on a function's first instruction, func_return a uprobe on each
 * of its return instructions (internal/funcs finds them). A uretprobe
 * rewrites the return address on the user stack; these read nothing and
 * write nothing there.
 *
 * A C, C++ or Rust call pairs by thread, traced function and stack
 * pointer: at the first instruction the stack pointer points at the
 * return address on x86-64 (the caller's stack pointer on arm64), and at
 * a return instruction it is back at the same place, so recursion and
 * nesting pair right. An entry whose return never runs (longjmp, an
 * exception, a thread that exits) is replaced by the next call at the
 * same place (counted), or goes with its thread's storage, or is
 * evicted from the LRU hash (func_threads below says where it is kept).
 *
 * A Go call (func_source.go set) pairs by goroutine instead: a goroutine
 * may return on another thread than it entered on, and its stack is
 * copied elsewhere when it grows or shrinks. Go's register ABI (Go 1.17+)
 * keeps the current g in R14 on x86-64 (X28 on arm64) at a function's
 * entry and at each return; g's first field is its stack {lo, hi}. The
 * key is (process, g, traced function, stack.hi - SP): the depth from
 * the stack's top survives a copy. g.stack is read from user memory and SP must lie
 * in [lo, hi), else the event is dropped and counted (no_goroutine):
 * nothing pairs on a register that does not hold a g. For a Go function
 * that checks its stack, the entry probe is after that check (internal/
 * funcs), so a call that grows its stack and restarts is entered once.
 * A call a recovered panic unwinds leaves its entry behind until the next
 * call at the same (g, function, depth) replaces it (counted) or the LRU
 * evicts it; so does a call of an exited goroutine whose g is reused.
 *
 * Arguments and results (issue 26 item 3). A source's labels read the
 * call's arguments at the entry, the only place they are sure to be in
 * their registers: integers by the System V ABI for C (rdi, rsi, rdx,
 * rcx, r8, r9; x0-x7 on arm64) and by Go's register ABI for Go (rax, rbx,
 * rcx, rdi, rsi, r8, r9, r10, r11; x0-x7 on arm64 here), and strings as a
 * pointer to a NUL-terminated string (C) or a pointer and a length (a Go
 * string's two registers), at most FUNC_LABEL_STR_LEN bytes read. A
 * string label's value is the FNV-1a hash of its bytes; the bytes go to
 * func_label_strings under that hash when the value is admitted, where
 * the collector finds them to name the series. The label values are
 * admitted (src_label_admit, bpf/source.h) at the entry and kept with the
 * open call, in its func_open value, until its return. The error
 * predicate reads the result registers at the return instruction: Go's
 * results by the same registers as its arguments, C's in rax and rdx (x0
 * and x1). Each operand is taken as the width and signedness the rule
 * file gives (arg0.s32: the low 32 bits, sign-extended), since the upper
 * bits of a register holding a 32-bit value are not defined by the ABI.
 *
 * The attach cookie is the source's index in func_sources: kernel 5.15+.
 * This object includes aggregate.h and is loaded with MapReplacements for
 * the core's maps, so function spans feed the same aggregates as every
 * source.
 */

#include "aggregate.h"
#include "source.h"

char __license[] SEC("license") = "Dual BSD/GPL";

enum func_sizes {
	FUNC_MAX_SOURCES = 4096, /* traced functions */
	FUNC_MAX_OPEN = 65536,	 /* calls in progress, all threads */
	FUNC_ERR_OPERANDS = 4,	 /* result registers an error predicate reads */
	FUNC_LABEL_STR_LEN = 64, /* bytes of a string label read */
	FUNC_MAX_REGS = 9,	 /* argument or result registers (Go on x86-64) */
};

/* How an operand is read (struct func_operand.kind). */
enum func_operand_kind {
	FUNC_OP_INT = 0,    /* an integer in register reg */
	FUNC_OP_CSTR = 1,   /* a NUL-terminated string at the address in reg */
	FUNC_OP_PTRLEN = 2, /* a string at the address in reg, its length in len_reg */
};

/* Counters of func_counters. */
enum func_counter {
	FUNC_COUNTER_UNPAIRED = 0, /* returns without an entry: attached mid-call, or evicted */
	FUNC_COUNTER_REPLACED = 1, /* entries replaced by a call at the same place: their return never ran */
	FUNC_COUNTER_NO_GOROUTINE = 2, /* Go events dropped: g's stack unreadable, or SP outside it */
	FUNC_COUNTER_MAX = 4,
};

/* One argument or result a source reads. */
struct func_operand {
	__u8 kind;	/* FUNC_OP_* */
	__u8 reg;	/* the argument's (or result's) index in the ABI's registers */
	__u8 len_reg;	/* FUNC_OP_PTRLEN: the length's */
	__u8 size;	/* FUNC_OP_INT: bytes of the register taken, 1, 2, 4 or 8 */
	__u8 is_signed; /* FUNC_OP_INT: sign-extend them */
	__u8 pad[3];
};

/* One traced function: mirrored in source/function. */
struct func_source {
	char name[SPAN_NAME_LEN]; /* the span name, NUL-padded */
	__u64 name_id;		  /* span_name_id(name), computed by the collector */
	__u32 go;		  /* a Go function (register ABI): pair by goroutine */
	__u32 has_error;	  /* error holds over the results */
	struct func_operand label[SERIES_LABELS]; /* labels.operand[i] is i */
	struct func_operand result[FUNC_ERR_OPERANDS]; /* error's operand i */
	struct src_labels labels;
	__u32 pad;
	struct src_pred error;
};

/* A call in progress: its start and its label values, admitted at the
 * entry. */
struct func_call {
	__u64 start;
	__u64 labels[SERIES_LABELS];
	__u16 labelset;
	__u8 other;
	__u8 pad[5];
};

/* A string label's bytes, NUL-padded, under its hash: one byte more than
 * the bytes kept, for the NUL bpf_probe_read_user_str always writes. */
struct func_label_str {
	char s[FUNC_LABEL_STR_LEN + 1];
};

/* A call in progress: (thread, SP) for C, (g, stack.hi - SP) for Go,
 * and the process (tgid): two processes running one Go binary (a
 * process: source's usual case, one file for every copy of a service)
 * hand out the same g addresses, so g alone does not tell their calls
 * apart. */
struct func_open_key {
	__u64 sp;
	__u64 thread;
	__u32 source;
	__u32 tgid;
};

/* Go's g starts with its stack bounds (runtime/runtime2.go: g.stack). */
struct func_go_stack {
	__u64 lo;
	__u64 hi;
};

#if defined(__TARGET_ARCH_x86)
#define FUNC_GO_G(ctx) (__PT_REGS_CAST(ctx)->r14)
#elif defined(__TARGET_ARCH_arm64)
#define FUNC_GO_G(ctx) (__PT_REGS_CAST(ctx)->regs[28])
#endif

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FUNC_MAX_SOURCES);
	__type(key, __u32);
	__type(value, struct func_source);
} func_sources SEC(".maps");

/* Calls in progress. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, FUNC_MAX_OPEN);
	__type(key, struct func_open_key);
	__type(value, struct func_call);
} func_open SEC(".maps");

/* String label values by their hash: admitted values only, so it holds
 * no more than src_label_values does. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SRC_LABEL_VALUES);
	__type(key, __u64);
	__type(value, struct func_label_str);
} func_label_strings SEC(".maps");


struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FUNC_COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} func_counters SEC(".maps");

/*
 * A C, C++ or Rust call's entry is kept in its thread's storage, not in
 * func_open: a slot picked by its (stack pointer, function) in a small
 * direct-mapped table, so the entry costs a few stores and the return a
 * compare, where a hash costs an update (lock, LRU list) and a lookup
 * and a delete. The slot of an entry at the same place (an abandoned
 * call's: longjmp, exception) is replaced (counted), as in func_open. An
 * entry whose slot holds another live or abandoned call goes to
 * func_open (spilled; deep recursion, collisions); a return that misses
 * its slot looks there, and once the thread has spilled, its entries
 * that land on a free slot take out (counted replaced) an abandoned
 * entry of theirs left in func_open, so the semantics are func_open's.
 * The thread's last series per traced function (hint) lets the core
 * skip hashing the key (agg_in.hint); Go calls use it too. The storage
 * goes with the thread.
 */
enum func_thread_sizes {
	FUNC_THREAD_SLOTS = 32, /* entries kept in the thread's table */
	FUNC_THREAD_HINTS = 16, /* series hints, by source modulo */
};

struct func_slot {
	__u64 sp; /* the call's stack pointer at the entry; 0: free */
	__u32 source;
	__u32 pad;
	struct func_call c;
};

struct func_thread {
	struct func_slot s[FUNC_THREAD_SLOTS];
	__u32 hint[FUNC_THREAD_HINTS];
	__u32 spilled; /* an entry of this thread went to func_open */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct func_thread);
} func_threads SEC(".maps");

static __always_inline struct func_thread *func_thread_get(void)
{
	return bpf_task_storage_get(&func_threads, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

/* func_slot_of is the slot of the call at (sp, source): consecutive
 * frames (16 bytes apart at least on x86-64 and arm64) get distinct
 * slots. */
static __always_inline struct func_slot *func_slot_of(struct func_thread *t, __u64 sp, __u32 source)
{
	return &t->s[((sp >> 4) + source * 7) & (FUNC_THREAD_SLOTS - 1)];
}

static __always_inline void func_count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&func_counters, &idx);
	if (c)
		__sync_fetch_and_add(c, 1);
}

/* The argument (or result) registers of a call's ABI, copied from the
 * context once: the verifier refuses a load from a context pointer the
 * compiler has offset by a computed amount, which a switch over the
 * register becomes. */
struct func_regs {
	__u64 r[FUNC_MAX_REGS];
};

/* FUNC_LD loads a register in the branch that names it: without the
 * barrier the compiler merges the branches' loads into one through a
 * context pointer picked by the branch, which the verifier refuses. */
#define FUNC_LD(x) ({ __u64 __v = (x); asm volatile("" : "+r"(__v)); __v; })

/* func_args copies the argument registers: Go's register ABI or the
 * System V ABI (AAPCS64 on arm64, where the two share x0-x7). Registers
 * the ABI does not have are 0. */
static __always_inline void func_args(struct pt_regs *ctx, __u32 go, struct func_regs *a)
{
#if defined(__TARGET_ARCH_x86)
	struct pt_regs *r = __PT_REGS_CAST(ctx);

	if (go) {
		a->r[0] = FUNC_LD(r->ax);
		a->r[1] = FUNC_LD(r->bx);
		a->r[2] = FUNC_LD(r->cx);
		a->r[3] = FUNC_LD(r->di);
		a->r[4] = FUNC_LD(r->si);
		a->r[5] = FUNC_LD(r->r8);
		a->r[6] = FUNC_LD(r->r9);
		a->r[7] = FUNC_LD(r->r10);
		a->r[8] = FUNC_LD(r->r11);
		return;
	}
	a->r[0] = FUNC_LD(PT_REGS_PARM1(ctx));
	a->r[1] = FUNC_LD(PT_REGS_PARM2(ctx));
	a->r[2] = FUNC_LD(PT_REGS_PARM3(ctx));
	a->r[3] = FUNC_LD(PT_REGS_PARM4(ctx));
	a->r[4] = FUNC_LD(PT_REGS_PARM5(ctx));
	a->r[5] = FUNC_LD(r->r9);
	a->r[6] = a->r[7] = a->r[8] = 0;
#elif defined(__TARGET_ARCH_arm64)
	a->r[0] = FUNC_LD(PT_REGS_PARM1(ctx));
	a->r[1] = FUNC_LD(PT_REGS_PARM2(ctx));
	a->r[2] = FUNC_LD(PT_REGS_PARM3(ctx));
	a->r[3] = FUNC_LD(PT_REGS_PARM4(ctx));
	a->r[4] = FUNC_LD(PT_REGS_PARM5(ctx));
	a->r[5] = FUNC_LD(__PT_REGS_CAST(ctx)->regs[5]);
	a->r[6] = FUNC_LD(__PT_REGS_CAST(ctx)->regs[6]);
	a->r[7] = FUNC_LD(__PT_REGS_CAST(ctx)->regs[7]);
	a->r[8] = 0;
#endif
}

/* func_results copies the result registers at a return: Go's are its
 * argument registers, C's rax and rdx (x0 and x1 on arm64). */
static __always_inline void func_results(struct pt_regs *ctx, __u32 go, struct func_regs *a)
{
	func_args(ctx, go, a);
#if defined(__TARGET_ARCH_x86)
	if (!go) {
		a->r[0] = FUNC_LD(PT_REGS_RC(ctx));
		a->r[1] = FUNC_LD(__PT_REGS_CAST(ctx)->dx);
		a->r[2] = a->r[3] = a->r[4] = a->r[5] = 0;
	}
#else
	if (!go)
		a->r[2] = a->r[3] = a->r[4] = a->r[5] = a->r[6] = a->r[7] = 0;
#endif
}

/* func_reg returns register n of a. */
static __always_inline __u64 func_reg(const struct func_regs *a, __u32 n)
{
	if (n >= FUNC_MAX_REGS)
		return 0;
	return a->r[n];
}

/* func_int takes size bytes of a register, sign- or zero-extended. */
static __always_inline __u64 func_int(__u64 v, const struct func_operand *op)
{
	__u32 shift = 64 - 8 * (op->size & 15);

	if (shift >= 64)
		return v;
	if (op->is_signed)
		return (__u64)(((__s64)(v << shift)) >> shift);
	return (v << shift) >> shift;
}

/* func_str reads a string label at the entry into buf and returns its
 * FNV-1a hash in *h, or -1 when its bytes could not be read. */
static __always_inline int func_str(const struct func_regs *a, const struct func_operand *op,
				    struct func_label_str *buf, __u64 *h)
{
	void *ptr = (void *)func_reg(a, op->reg);
	__u64 n, hash = 0xcbf29ce484222325ULL;
	long r;

	__builtin_memset(buf->s, 0, sizeof(buf->s));
	if (op->kind == FUNC_OP_CSTR) {
		r = bpf_probe_read_user_str(buf->s, sizeof(buf->s), ptr);
		if (r < 0)
			return -1;
		n = r > 0 ? r - 1 : 0;
	} else {
		n = func_reg(a, op->len_reg);
		if ((__s64)n < 0)
			return -1;
		if (n > FUNC_LABEL_STR_LEN)
			n = FUNC_LABEL_STR_LEN;
		if (n && bpf_probe_read_user(buf->s, n & (FUNC_LABEL_STR_LEN * 2 - 1), ptr))
			return -1;
	}
	for (__u32 i = 0; i < FUNC_LABEL_STR_LEN; i++) {
		if (i >= n)
			break;
		hash ^= (__u8)buf->s[i];
		hash *= 0x100000001b3ULL;
	}
	*h = hash;
	return 0;
}

/* func_labels reads the source's label operands at the entry and admits
 * their values into c (src_label_admit, bpf/source.h, as
 * src_labels_apply does), storing the bytes of each admitted string
 * value under its hash. */
static __always_inline void func_labels(struct pt_regs *ctx, const struct func_source *src, struct func_call *c)
{
	struct func_label_str buf;
	struct func_regs a;
	__u16 set = src->labels.labelset;

	if (!set || set >= SRC_LABELSETS)
		return;
	c->labelset = set;
	func_args(ctx, src->go, &a);
#pragma unroll
	for (int i = 0; i < SERIES_LABELS; i++) {
		const struct func_operand *op = &src->label[i];
		__u64 v;

		if (i >= src->labels.count)
			break;
		if (op->kind == FUNC_OP_INT) {
			v = func_int(func_reg(&a, op->reg), op);
		} else if (func_str(&a, op, &buf, &v)) {
			src_count(SRC_COUNTER_LABEL_UNREAD);
			c->other |= 1 << i;
			continue;
		}
		if (!src_label_admit(set, i, v, src->labels.cap)) {
			c->other |= 1 << i;
			continue;
		}
		c->labels[i] = v;
		/* Stored before the return that makes its series: the
		 * collector names the series from it. */
		if (op->kind != FUNC_OP_INT)
			bpf_map_update_elem(&func_label_strings, &v, &buf, BPF_NOEXIST);
	}
}

/* func_error evaluates the source's error predicate over the results. A
 * global function: its operands and registers (about 130 bytes) stay off
 * the return program's stack, which with the core's calls under it must
 * fit the verifier's 512 bytes (inlined, Debian's 6.1 refused the
 * uretprobe program: "combined stack size of 5 calls is 544"). */
SW_GLOBAL __u32 func_error(sw_ctx_regs *regs, const struct func_source *src)
{
	struct pt_regs *ctx = (struct pt_regs *)regs;
	struct src_operands o = {};
	struct func_regs a;

	if (!regs || !src)
		return 0;
	func_results(ctx, src->go, &a);
#pragma unroll
	for (int i = 0; i < FUNC_ERR_OPERANDS; i++) {
		const struct func_operand *op = &src->result[i];

		if (!op->size)
			continue;
		o.v[i] = func_int(func_reg(&a, op->reg), op);
		o.ok |= 1 << i;
		if (op->is_signed)
			o.is_signed |= 1 << i;
	}
	return src_pred_holds(&src->error, &o) != 0;
}

/* open_key fills in k for the call the probe sees, and returns the
 * traced function, or NULL when the event is to be dropped. */
static __always_inline struct func_source *open_key(struct pt_regs *ctx, struct func_open_key *k)
{
	struct func_source *src;
	struct func_go_stack st;
	__u64 sp = PT_REGS_SP(ctx), g, id = bpf_get_current_pid_tgid();

	k->source = (__u32)bpf_get_attach_cookie(ctx);
	k->tgid = id >> 32;
	src = bpf_map_lookup_elem(&func_sources, &k->source);
	if (!src)
		return NULL;
	if (!src->go) {
		k->sp = sp;
		k->thread = (__u32)id;
		return src;
	}
	g = FUNC_GO_G(ctx);
	if (!g || bpf_probe_read_user(&st, sizeof(st), (void *)g) || st.lo > sp || sp >= st.hi) {
		func_count(FUNC_COUNTER_NO_GOROUTINE);
		return NULL;
	}
	k->sp = st.hi - sp;
	k->thread = g;
	return src;
}

/* func_open_put keeps an entry in func_open: an entry at the same place
 * (an abandoned call's) is replaced, and counted. */
static __always_inline void func_open_put(struct func_open_key *k, struct func_call *c)
{
	if (bpf_map_update_elem(&func_open, k, c, BPF_NOEXIST)) {
		func_count(FUNC_COUNTER_REPLACED);
		bpf_map_update_elem(&func_open, k, c, BPF_ANY);
	}
}

SEC("uprobe")
int func_entry(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	struct func_source *src;
	struct func_open_key k;
	struct func_thread *t;
	struct func_slot *sl;

	src = open_key(ctx, &k);
	if (!src)
		return 0;
	if (!src->go && (t = func_thread_get())) {
		sl = func_slot_of(t, k.sp, k.source);
		if (sl->sp == k.sp && sl->source == k.source) {
			func_count(FUNC_COUNTER_REPLACED);
		} else if (sl->sp) {
			struct func_call c = {.start = now};

			func_labels(ctx, src, &c);
			t->spilled = 1;
			func_open_put(&k, &c);
			return 0;
		} else if (t->spilled && !bpf_map_delete_elem(&func_open, &k)) {
			func_count(FUNC_COUNTER_REPLACED);
		}
		sl->c.start = now;
		sl->c.labels[0] = sl->c.labels[1] = sl->c.labels[2] = 0;
		sl->c.labelset = 0;
		sl->c.other = 0;
		func_labels(ctx, src, &sl->c);
		sl->source = k.source;
		sl->sp = k.sp;
		return 0;
	}
	struct func_call c = {.start = now};

	func_labels(ctx, src, &c);
	func_open_put(&k, &c);
	return 0;
}

/* func_close ends the call a return sees: at a return instruction, or
 * after the return at a uretprobe (uret, func_uretprobe at the end of
 * this file), where the stack pointer is sp_back past where the entry
 * saw it. */
static __always_inline int func_close(struct pt_regs *ctx, __u64 sp_back, int uret)
{
	__u64 now = bpf_ktime_get_ns();
	struct func_open_key k;
	struct func_source *src;
	struct agg_in in = {};
	struct func_thread *t;
	struct func_slot *sl;
	struct func_call *c;
	__u64 start_ns;

	src = open_key(ctx, &k);
	if (!src)
		return 0;
	k.sp = src->go ? k.sp + sp_back : k.sp - sp_back; /* Go's is stack.hi - SP */
	t = func_thread_get();
	if (t && !src->go) {
		sl = func_slot_of(t, k.sp, k.source);
		if (sl->sp == k.sp && sl->source == k.source) {
			start_ns = sl->c.start;
			in.key.labelset = sl->c.labelset;
			in.key.other = sl->c.other;
			in.key.labels[0] = sl->c.labels[0];
			in.key.labels[1] = sl->c.labels[1];
			in.key.labels[2] = sl->c.labels[2];
			sl->sp = 0;
			goto paired;
		}
		/* Not in its slot: spilled, or kept in func_open when the
		 * entry found no storage; else unpaired (rare). */
	}
	c = bpf_map_lookup_elem(&func_open, &k);
	if (!c) {
		func_count(FUNC_COUNTER_UNPAIRED);
		return 0;
	}
	start_ns = c->start;
	in.key.labelset = c->labelset;
	in.key.other = c->other;
	in.key.labels[0] = c->labels[0];
	in.key.labels[1] = c->labels[1];
	in.key.labels[2] = c->labels[2];
	bpf_map_delete_elem(&func_open, &k);
paired:
	if (src->has_error)
		in.error = func_error((sw_ctx_regs *)ctx, src);
	in.name = src->name;
	in.key.name_id = src->name_id;
	in.key.cgroup_id = bpf_get_current_cgroup_id();
	in.key.kind = SERIES_SPAN;
	in.value = now - start_ns;
	in.source = SOURCE_FUNCTIONS;
	in.ret_regs = uret ? NULL : ctx; /* after the return, the walk starts at the caller */
	if (t)
		in.hint = &t->hint[k.source & (FUNC_THREAD_HINTS - 1)];
#ifdef SW_WALK_USER_FRAMES
	in.uregs = ctx;
#endif
	series_aggregate(ctx, &in);
	return 0;
}

const struct func_source *unused_func_source __attribute__((unused));
const struct func_open_key *unused_func_open_key __attribute__((unused));
const struct func_call *unused_func_call __attribute__((unused));
const struct func_label_str *unused_func_label_str __attribute__((unused));
const enum func_operand_kind *unused_func_operand_kind __attribute__((unused));
const enum func_sizes *unused_func_sizes __attribute__((unused));
const enum func_counter *unused_func_counter __attribute__((unused));
const enum src_counter *unused_src_counter __attribute__((unused));

SEC("uprobe")
int func_return(struct pt_regs *ctx)
{
	return func_close(ctx, 0, 0);
}

/*
 * returns: uretprobe (opt-in, C, C++ and Rust only): the return of a
 * call seen by a uretprobe on the function's first instruction instead
 * of a uprobe on each return instruction. The kernel emulates a uprobe
 * on a push, a nop or a jmp but single-steps one on a ret (about 13 us a
 * hit on 6.18), while a uretprobe's return is a trampoline (a syscall
 * since 6.11): on a function entered by push %rbp, entry uprobe +
 * uretprobe cost about an eighth of entry uprobe + ret uprobe. The price:
 * the kernel replaces the return address on the user stack with its
 * trampoline's, which has no unwind information, so anything unwinding
 * through the traced call (a C++ exception, pthread_cancel, a Rust
 * panic, backtrace()) fails, and Go's stack walks crash (refused at
 * attach, source/function).
 *
 * The kernel runs the uretprobe with the registers of the caller after
 * the return: the IP is the original return address and, on x86-64, the
 * return address is popped, so the stack pointer is 8 past where the
 * entry saw it (sys_uretprobe pops the trampoline's saved registers
 * first). On arm64 a return leaves SP where it was at the first
 * instruction. A call a longjmp skips is dropped by the kernel (its
 * return instance is older than the stack pointer at the next hit), so
 * its entry is replaced by the next call at the same place (counted),
 * as with return instructions. The kernel nests at most 64 pending
 * uretprobes per thread (MAX_URETPROBE_DEPTH): deeper recursion loses
 * the returns past it, counted by the replacement of their entries.
 * An overrun's user stack starts at the caller, the traced call having
 * returned (the caller's return address, if it is traced too, is the
 * trampoline's).
 */
#if defined(__TARGET_ARCH_x86)
#define FUNC_URET_SP_BACK 8
#else
#define FUNC_URET_SP_BACK 0
#endif

SEC("uretprobe")
int func_uretprobe(struct pt_regs *ctx)
{
	return func_close(ctx, FUNC_URET_SP_BACK, 1);
}
