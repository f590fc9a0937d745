/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * USDT argument fetching, the libbpf model: the collector parses each call
 * site's argument string (internal/usdt) into a struct usdt_spec, writes it
 * into usdt_specs at a spec id, and attaches the uprobe at that site with the
 * spec id as its BPF cookie (kernel 5.15+). Without cookies the collector
 * sets usdt_have_cookie = 0 before loading and fills usdt_ip_to_spec:
 * a site in an executable is keyed by its distance from the start of the
 * executable's code and the length of that code, both of which the kernel
 * keeps for every process (mm->start_code and end_code: the executable
 * segments' bounds plus the load bias), so a PIE executable is traced in
 * every process that runs it, as with cookies, in containers too (no file
 * identity to compare across mounts); the collector refuses two
 * executables whose keys collide. A site attached in one process (pid:)
 * is keyed by the process and its run-time address, which is how a shared
 * library's sites are told apart.
 *
 * internal/usdt/spec.go fills the layouts through their bpf2go types.
 */
#ifndef SPANWATCH_USDT_H
#define SPANWATCH_USDT_H

#include <bpf/bpf_core_read.h>

enum usdt_sizes {
	USDT_MAX_ARGS = 12,
	USDT_MAX_SPECS = 4096, /* the collector may raise it before loading */
	USDT_NO_INDEX = 0xffff, /* usdt_arg_spec.idx_off: no index register */
};

/* Where an argument lives: internal/usdt ArgKind. */
enum usdt_arg_kind {
	USDT_ARG_CONST = 1, /* val_off is the value */
	USDT_ARG_REG = 2,   /* pt_regs at reg_off */
	USDT_ARG_DEREF = 3, /* user memory at reg + val_off (+ idx << scale) */
};

struct usdt_arg_spec {
	__s64 val_off;	 /* the constant, or the displacement of a deref */
	__u16 reg_off;	 /* offset of the (base) register in struct pt_regs */
	__u16 idx_off;	 /* offset of the index register, or USDT_NO_INDEX */
	__u8 kind;	 /* USDT_ARG_* */
	__u8 size;	 /* 1, 2, 4 or 8 bytes */
	__u8 is_signed;	 /* sign-extend from size to 64 bits */
	__u8 scale_shift; /* index scale as a shift: 0..3 */
};

struct usdt_spec {
	struct usdt_arg_spec args[USDT_MAX_ARGS];
	__u32 source;  /* index in usdt_sources of the span source this site feeds */
	__u16 arg_cnt;
	__u16 _pad;
};

struct usdt_ip_key {
	__u32 tgid;	/* the process (ip its run-time address), or 0: */
	__u32 _pad;
	__u64 code_len; /* the executable's end_code - start_code, and */
	__u64 ip;	/* the site's distance from start_code */
};

/* The fields of the current task the lookup reads (CO-RE). */
struct mm_struct___usdt {
	unsigned long start_code;
	unsigned long end_code;
} __attribute__((preserve_access_index));

struct task_struct___usdt {
	struct mm_struct___usdt *mm;
} __attribute__((preserve_access_index));

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, USDT_MAX_SPECS);
	__type(key, __u32);
	__type(value, struct usdt_spec);
} usdt_specs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, USDT_MAX_SPECS);
	__type(key, struct usdt_ip_key);
	__type(value, __u32);
} usdt_ip_to_spec SEC(".maps");

/* Set to false by the collector before loading on kernels without BPF
 * cookies (before 5.15): the verifier then never sees the helper call. */
volatile const __u32 usdt_have_cookie = 1;

/*
 * The attach cookie: the spec id in the low 32 bits; the bits above are
 * free for the program (usdt.bpf.c keeps a fast-path slot there).
 */
#define USDT_COOKIE_SPEC(c) ((__u32)(c))

/* usdt_spec_id_from finds the spec of the call site that fired, given the
 * cookie (ignored without cookie support). */
static __always_inline int usdt_spec_id_from(struct pt_regs *ctx, __u64 cookie, __u32 *id)
{
	if (usdt_have_cookie) {
		*id = USDT_COOKIE_SPEC(cookie);
		return 0;
	}
	struct usdt_ip_key k = {
		.tgid = bpf_get_current_pid_tgid() >> 32,
		.ip = PT_REGS_IP(ctx),
	};
	__u32 *v = bpf_map_lookup_elem(&usdt_ip_to_spec, &k);
	if (!v) {
		/* A site of the process's executable. */
		struct task_struct___usdt *t = (void *)bpf_get_current_task();
		struct mm_struct___usdt *mm = BPF_CORE_READ(t, mm);
		__u64 start = BPF_CORE_READ(mm, start_code);

		k.tgid = 0;
		k.code_len = BPF_CORE_READ(mm, end_code) - start;
		k.ip -= start;
		v = bpf_map_lookup_elem(&usdt_ip_to_spec, &k);
		if (!v)
			return -2; /* ENOENT */
	}
	*id = *v;
	return 0;
}

static __always_inline __u64 usdt_cookie(struct pt_regs *ctx)
{
	return usdt_have_cookie ? bpf_get_attach_cookie(ctx) : 0;
}

/* usdt_spec_id finds the spec of the call site that fired. */
static __always_inline int usdt_spec_id(struct pt_regs *ctx, __u32 *id)
{
	return usdt_spec_id_from(ctx, usdt_cookie(ctx), id);
}

static __always_inline struct usdt_spec *usdt_spec_from(struct pt_regs *ctx, __u64 cookie)
{
	__u32 id;
	if (usdt_spec_id_from(ctx, cookie, &id))
		return 0;
	return bpf_map_lookup_elem(&usdt_specs, &id);
}

static __always_inline struct usdt_spec *usdt_spec(struct pt_regs *ctx)
{
	return usdt_spec_from(ctx, usdt_cookie(ctx));
}

/*
 * usdt_arg fetches argument n of the call site described by spec into *res,
 * sign- or zero-extended to 64 bits. It returns 0, -ENOENT (-2) for an
 * argument the site does not have, or the error of reading user memory.
 */
static __always_inline int usdt_arg(struct pt_regs *ctx, const struct usdt_spec *spec, __u32 n, __u64 *res)
{
	const struct usdt_arg_spec *a;
	__u64 val = 0, idx = 0;
	int err = 0;

	if (n >= USDT_MAX_ARGS || n >= spec->arg_cnt)
		return -2;
	a = &spec->args[n];
	switch (a->kind) {
	case USDT_ARG_CONST:
		val = a->val_off;
		break;
	case USDT_ARG_REG:
		/* The register's pt_regs slot, read whole (for %ah-style
		 * registers from one byte in); the shifts below keep size. */
		err = bpf_probe_read_kernel(&val, sizeof(val), (void *)ctx + a->reg_off);
		if (err)
			return err;
		break;
	case USDT_ARG_DEREF:
		err = bpf_probe_read_kernel(&val, sizeof(val), (void *)ctx + a->reg_off);
		if (err)
			return err;
		if (a->idx_off != USDT_NO_INDEX) {
			err = bpf_probe_read_kernel(&idx, sizeof(idx), (void *)ctx + a->idx_off);
			if (err)
				return err;
			val += idx << (a->scale_shift & 3);
		}
		val += a->val_off;
		{
			void *addr = (void *)val;
			val = 0;
			/* Read exactly size bytes: an argument at the end of a
			 * mapping must not fault on the bytes after it. Little
			 * endian: they land in the low bytes of val. */
			switch (a->size) {
			case 1:
				err = bpf_probe_read_user(&val, 1, addr);
				break;
			case 2:
				err = bpf_probe_read_user(&val, 2, addr);
				break;
			case 4:
				err = bpf_probe_read_user(&val, 4, addr);
				break;
			default:
				err = bpf_probe_read_user(&val, 8, addr);
				break;
			}
			if (err)
				return err;
		}
		break;
	default:
		return -22; /* EINVAL */
	}
	switch (a->size) {
	case 1:
		val = a->is_signed ? (__u64)(__s64)(__s8)val : (__u8)val;
		break;
	case 2:
		val = a->is_signed ? (__u64)(__s64)(__s16)val : (__u16)val;
		break;
	case 4:
		val = a->is_signed ? (__u64)(__s64)(__s32)val : (__u32)val;
		break;
	}
	*res = val;
	return 0;
}

#endif
