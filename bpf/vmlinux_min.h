/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The few kernel types spanwatch's BPF programs need, so the build does not
 * depend on a generated vmlinux.h. struct pt_regs is the target's layout
 * (bpf2go defines __TARGET_ARCH_x86 or __TARGET_ARCH_arm64), which is
 * kernel ABI (it is what user space sees through ptrace too). Programs read
 * it through libbpf's PT_REGS_* macros (bpf_tracing.h), never by field
 * name, so that one source serves both.
 */
#ifndef SPANWATCH_VMLINUX_MIN_H
#define SPANWATCH_VMLINUX_MIN_H

#include <linux/types.h>
#include <linux/bpf.h>

#define __VMLINUX_H__ 1 /* tells bpf_tracing.h to use kernel pt_regs names */

typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __s32 s32;
typedef __s64 s64;

#if defined(__TARGET_ARCH_x86)
struct pt_regs {
	unsigned long r15;
	unsigned long r14;
	unsigned long r13;
	unsigned long r12;
	unsigned long bp;
	unsigned long bx;
	unsigned long r11;
	unsigned long r10;
	unsigned long r9;
	unsigned long r8;
	unsigned long ax;
	unsigned long cx;
	unsigned long dx;
	unsigned long si;
	unsigned long di;
	unsigned long orig_ax;
	unsigned long ip;
	unsigned long cs;
	unsigned long flags;
	unsigned long sp;
	unsigned long ss;
};

/* sw_ctx_regs is the program context's type as a global (non-inlined)
 * function must declare it: the verifier takes a global function's
 * argument for the context only when its struct has the name of the
 * kernel's bpf_user_pt_regs_t (struct pt_regs on x86-64). */
typedef struct pt_regs sw_ctx_regs;
#elif defined(__TARGET_ARCH_arm64)
/* arm64: what ptrace and the uprobe/kprobe context expose
 * (arch/arm64/include/uapi/asm/ptrace.h): regs[n] at n*8, sp at 248, pc at
 * 256. bpf_tracing.h's PT_REGS_* macros cast to it. */
struct user_pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};

/* The kernel's struct pt_regs (arch/arm64/include/asm/ptrace.h) begins
 * with struct user_pt_regs; only that beginning is read, so the fields
 * after it (orig_x0, syscallno, ...) are left out. */
struct pt_regs {
	union {
		struct user_pt_regs user_regs;
		struct {
			__u64 regs[31];
			__u64 sp;
			__u64 pc;
			__u64 pstate;
		};
	};
};

/* On arm64 bpf_user_pt_regs_t is struct user_pt_regs: a global function
 * that declares struct pt_regs gets its argument refused as the context
 * ("Caller passes invalid args into func#1", measured on Debian's 6.1 and
 * 6.12 arm64 kernels). */
typedef struct user_pt_regs sw_ctx_regs;
#else
#error "spanwatch's BPF programs are built for x86-64 and arm64 (__TARGET_ARCH_x86 or __TARGET_ARCH_arm64)"
#endif

#endif
