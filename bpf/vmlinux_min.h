/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The few kernel types spanwatch's BPF programs need, so the build does not
 * depend on a generated vmlinux.h. struct pt_regs is the x86-64 layout, which
 * is kernel ABI (it is what user space sees through ptrace too).
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

#endif
