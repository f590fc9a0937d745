/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Spans of the span SDKs while they run: the SDKs send a span event with
 * SPAN_F_START when a span begins (emit.Start, the OpenTelemetry
 * processor's OnStart, spanwatch_span_start in include/spanwatch.h) and the
 * usual event when it ends. spanwatch.bpf.c hands the first to
 * inflight_start() instead of the aggregation core, and the second to
 * inflight_end() before it: here each thread of execution keeps a stack of
 * its open spans, which internal/inflight scans for spans past their
 * budget and bpf/inflight.bpf.c samples while they run.
 *
 * A thread of execution is the event's exec_id: a Go goroutine's g
 * pointer, so that a span follows its goroutine from thread to thread, or
 * the OS thread when exec_id is 0 (C, C++). For goroutines the samplers
 * need to know which goroutine a thread runs. On x86-64 the Go runtime
 * keeps g in thread-local storage, at a fixed offset below the thread's fs
 * base. On arm64 it keeps g in register x28 (R28), and stores it in TLS
 * too, above the thread pointer (TPIDR_EL0), only when the program uses
 * cgo (runtime.save_g, runtime/tls_arm64.s). inflight_start() finds where
 * g is once per process, by looking for the event's g pointer near the
 * thread pointer (and, on arm64, in x28), and records it in
 * inflight_gprocs; task_g() reads it there.
 *
 * The maps are defined here; inflight.bpf.c is loaded with
 * MapReplacements for them. inflight_start and inflight_end are BPF
 * subprograms, not inlined: their locals stay out of the caller's frame,
 * whose stack the aggregation core's own calls need.
 */
#ifndef SPANWATCH_INFLIGHT_H
#define SPANWATCH_INFLIGHT_H

#include "aggregate.h"
#include <bpf/bpf_core_read.h>

/* The event's logical thread: a goroutine, or 0 for the OS thread. */
#define SPAN_EXEC_ID(ev) ((ev)->exec_id)

enum inflight_sizes {
	/* Open spans kept per thread of execution; deeper ones are counted
	 * in depth but not kept (the outermost stay watched). */
	INFLIGHT_DEPTH = 4,
	/* Words near a Go thread's thread pointer where g may sit. x86-64
	 * (TLS variant 2, below the fs base): -8 when the Go linker links
	 * alone, further down when a C linker lays out the TLS block (cgo).
	 * arm64 (variant 1, above TPIDR_EL0, past the 16-byte thread
	 * control block): +16 when the Go linker links alone (the offset
	 * of runtime.tls_g plus 16, cmd/link/internal/arm64), further up
	 * when a C linker lays out the TLS block. */
	INFLIGHT_TLS_SCAN = 16,
};

/* Set in struct overrun's status by the in-flight samplers (the span's
 * error flag is bit 0): the span had not ended when sampled, and the
 * thread was off the CPU. internal/inflight decodes them. */
enum overrun_status {
	OVERRUN_STILL_RUNNING = 0x80000000u,
	OVERRUN_OFF_CPU = 0x40000000u,
};

struct inflight_open {
	__u64 start_ns;	  /* bpf_ktime_get_ns() at the start event */
	__u64 start_real; /* the event's start_ns (CLOCK_REALTIME), its identity */
	__u64 name_id;	  /* span_name_id() of name */
	__u32 source;	  /* SOURCE_* the start came from */
	__u32 flags;	  /* the start event's SPAN_F_* */
	char name[SPAN_NAME_LEN];
};

struct inflight_exec_key {
	__u32 tgid;
	__u32 _pad;
	__u64 exec; /* the goroutine's g pointer, or the thread id */
};

struct inflight_stack {
	__u32 depth; /* open spans, also those past INFLIGHT_DEPTH */
	__u32 tid;   /* the thread that started the newest span */
	__u64 goroutine; /* 1: exec is a g pointer */
	struct inflight_open spans[INFLIGHT_DEPTH];
};

/*
 * Open spans by thread of execution. LRU: threads and goroutines that die
 * mid-span cannot fill it. The collector sizes it before loading.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct inflight_exec_key);
	__type(value, struct inflight_stack);
} inflight_exec SEC(".maps");

/* Go processes: tgid -> where g sits relative to the thread pointer:
 * negative on x86-64 (below the fs base), positive on arm64 (above
 * TPIDR_EL0), or INFLIGHT_G_IN_X28 on arm64 when g is in x28 alone. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __s64);
} inflight_gprocs SEC(".maps");

/* A zeroed entry to insert from: too large for the BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct inflight_stack);
} inflight_zero SEC(".maps");

/* What remote_read looks at of the memory area an address is in. */
struct super_block {
	unsigned long s_magic;
} __attribute__((preserve_access_index));

struct inode {
	struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
} __attribute__((preserve_access_index));

struct vm_area_struct {
	unsigned long vm_end;
	unsigned long vm_flags;
	struct file *vm_file;
} __attribute__((preserve_access_index));

/* vm_flags bits (include/linux/mm.h), the same on every architecture
 * since 5.7. Userfaultfd's minor-fault bit is not among them: it differs
 * between releases and architectures (bit 37 is set on ordinary stacks
 * of Debian's arm64 kernels). What covers every userfaultfd area an
 * unprivileged user can register is the kernel's own rule since 5.11
 * (vm.unprivileged_userfaultfd=0): such a handler gets faults from user
 * mode only, and a read from another process is not one. */
#define SW_VM_READ 0x1UL
#define SW_VM_UFFD_MISSING 0x200UL
#define SW_VM_PFNMAP 0x400UL
#define SW_VM_UFFD_WP 0x1000UL
#define SW_VM_IO 0x4000UL
#define SW_VM_MIXEDMAP 0x10000000UL

/* remote_area's question to bpf_find_vma. */
struct remote_area {
	__u64 end;   /* the read's end */
	__u64 limit; /* the area's end, when ok */
	int ok;
};

/*
 * remote_area_ok says whether reading another process's memory in vma
 * can only wait for the kernel's own work: anonymous memory (stacks,
 * heaps), or a file of a local file system (a binary's data and bss),
 * readable, no device memory, no userfaultfd. A page fault on a FUSE or
 * network file waits for a daemon or a server the process's user may
 * control, a userfaultfd-registered area for its handler: the agent
 * would wait with it.
 */
static __attribute__((unused)) long remote_area_ok(void *task, struct vm_area_struct *vma, struct remote_area *a)
{
	unsigned long flags = BPF_CORE_READ(vma, vm_flags);
	struct file *f = BPF_CORE_READ(vma, vm_file);

	if (!(flags & SW_VM_READ) || (flags & (SW_VM_PFNMAP | SW_VM_IO | SW_VM_MIXEDMAP | SW_VM_UFFD_MISSING | SW_VM_UFFD_WP)) ||
	    a->end > BPF_CORE_READ(vma, vm_end))
		return 0;
	if (f) {
		switch (BPF_CORE_READ(f, f_inode, i_sb, s_magic)) {
		case 0xEF53:	 /* ext2, ext3, ext4 */
		case 0x58465342: /* xfs */
		case 0x9123683E: /* btrfs */
		case 0x01021994: /* tmpfs, shmem (memfd, shared anonymous) */
		case 0x858458f6: /* ramfs */
		case 0x958458f6: /* hugetlbfs */
		case 0x73717368: /* squashfs */
		case 0xE0F5E1E2: /* erofs */
		case 0xF2F52010: /* f2fs */
		case 0x2fc12fc1: /* zfs */
			break;
		default:
			return 0;
		}
	}
	a->limit = BPF_CORE_READ(vma, vm_end);
	a->ok = 1;
	return 0;
}

/* remote_area returns the end of the area of task's memory that holds
 * [addr, addr + size) if remote_area_ok takes it, else 0: what may be
 * read there with bpf_copy_from_user_task (a sleepable program's helper).
 * The area is looked up under the try-lock of the task's memory map
 * (bpf_find_vma, 5.17+): a task whose map is locked is not read. */
static __always_inline __u64 remote_area(void *task, __u64 addr, __u32 size)
{
	struct remote_area a = {.end = addr + size};

	if (a.end < addr || bpf_find_vma(task, addr, remote_area_ok, &a, 0) || !a.ok)
		return 0;
	return a.limit;
}

/* remote_read reads size bytes at addr in the user memory of task, which
 * is not the current one, if remote_area takes them: 0, or an error. */
static __always_inline long remote_read(void *dst, __u32 size, __u64 addr, void *task)
{
	if (!remote_area(task, addr, size))
		return -1;
	return bpf_copy_from_user_task(dst, size, (void *)addr, task, 0);
}

/* task_word reads the 8-byte word at addr in the user memory of task:
 * directly when task is the current one (current set), else through
 * remote_read. 0 when it cannot. */
static __always_inline __u64 task_word(void *task, __u64 addr, int current)
{
	__u64 w = 0;

	if (current ? bpf_probe_read_user(&w, sizeof(w), (void *)addr) : remote_read(&w, sizeof(w), addr, task))
		return 0;
	return w;
}

#if defined(__TARGET_ARCH_x86)
/* The x86-64 fs base of a task: where its thread-local storage ends. */
struct thread_struct___sw {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct task_struct___fs {
	struct thread_struct___sw thread;
} __attribute__((preserve_access_index));

static __always_inline __u64 task_fsbase(void *task)
{
	return BPF_CORE_READ((struct task_struct___fs *)task, thread.fsbase);
}

/* learn_tls records where g sits in the calling Go thread's TLS, found by
 * looking for g in the words below its fs base. */
static __always_inline void learn_tls(__u32 tgid, __u64 g)
{
	__u64 words[INFLIGHT_TLS_SCAN];
	__u64 fs = task_fsbase((void *)bpf_get_current_task());

	if (!fs || bpf_probe_read_user(words, sizeof(words), (void *)(fs - sizeof(words))))
		return;
#pragma unroll
	for (int i = INFLIGHT_TLS_SCAN - 1; i >= 0; i--) {
		if (words[i] == g) {
			__s64 off = -(__s64)((INFLIGHT_TLS_SCAN - i) * 8);
			bpf_map_update_elem(&inflight_gprocs, &tgid, &off, BPF_ANY);
			return;
		}
	}
}

/* task_g reads the g pointer of the Go thread task (the current one when
 * current is set) at off from its fs base (inflight_gprocs); 0 when it
 * cannot. */
static __always_inline __u64 task_g(void *task, __s64 off, int current)
{
	__u64 fs = task_fsbase(task);

	if (!fs)
		return 0;
	return task_word(task, fs + off, current);
}

/* g_on_its_stack: see the arm64 one. On x86-64 the Go runtime sets the
 * TLS g and the stack pointer in one straight run of instructions
 * (runtime.gogo), so a thread is never seen between the two. */
static __always_inline int g_on_its_stack(__u64 g)
{
	return 1;
}
#elif defined(__TARGET_ARCH_arm64)
/* The arm64 thread pointer of a task, TPIDR_EL0: where its thread-local
 * storage begins (after a 16-byte thread control block). The kernel
 * keeps it in thread.uw.tp_value (since 4.19; thread.tp_value before),
 * saved there when the task is switched out: for the running task it is
 * the value of its last switch, which is its value unless the thread
 * changed TPIDR_EL0 since (a C library sets it once per thread, and a
 * thread that starts a span has long been switched at least once; a
 * miss only means trying again at the next start). */
struct thread_uw___sw {
	unsigned long tp_value;
} __attribute__((preserve_access_index));

struct thread_struct___sw {
	struct thread_uw___sw uw;
} __attribute__((preserve_access_index));

struct task_struct___tp {
	struct thread_struct___sw thread;
} __attribute__((preserve_access_index));

static __always_inline __u64 task_tp(void *task)
{
	return BPF_CORE_READ((struct task_struct___tp *)task, thread.uw.tp_value);
}

enum inflight_arm64 {
	/* inflight_gprocs: g is in x28 only (a program without cgo: the
	 * runtime's save_g stores nothing in TLS then). */
	INFLIGHT_G_IN_X28 = 0,
	/* The Go register that holds g. */
	INFLIGHT_G_REG = 28,
};

/* task_x28 reads the user x28 of task (saved at its entry into the
 * kernel: a system call, an interrupt, a fault). bpf_task_pt_regs needs
 * kernel 5.15+; the objects that include this need 5.17+. */
static __always_inline __u64 task_x28(struct task_struct *task)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	__u64 g = 0;

	if (!regs || bpf_probe_read_kernel(&g, sizeof(g), &regs->regs[INFLIGHT_G_REG]))
		return 0;
	return g;
}

/* learn_tls records where g is for the calling Go thread: in its TLS,
 * found by looking for g in the words above its thread pointer (a program
 * with cgo), else in x28 when x28 holds g (a program without cgo). */
static __always_inline void learn_tls(__u32 tgid, __u64 g)
{
	__u64 words[INFLIGHT_TLS_SCAN];
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 tp = task_tp(task);
	__s64 off;

	if (tp && !bpf_probe_read_user(words, sizeof(words), (void *)(tp + 16))) {
#pragma unroll
		for (int i = 0; i < INFLIGHT_TLS_SCAN; i++) {
			if (words[i] == g) {
				off = 16 + i * 8;
				bpf_map_update_elem(&inflight_gprocs, &tgid, &off, BPF_ANY);
				return;
			}
		}
	}
	if (task_x28(task) == g) {
		off = INFLIGHT_G_IN_X28;
		bpf_map_update_elem(&inflight_gprocs, &tgid, &off, BPF_ANY);
	}
}

/* task_g reads the g pointer of the Go thread task (the current one when
 * current is set) where inflight_gprocs says it is: at off above its
 * thread pointer, or in x28; 0 when it cannot. */
static __always_inline __u64 task_g(void *task, __s64 off, int current)
{
	__u64 tp;

	if (off == INFLIGHT_G_IN_X28)
		return task_x28(current ? bpf_get_current_task_btf() : (struct task_struct *)task);
	tp = task_tp(task);
	if (!tp)
		return 0;
	return task_word(task, tp + off, current);
}

/* The start of the Go runtime's struct g: its stack bounds, [lo, hi). */
struct g_stack {
	__u64 lo, hi;
};

/* g_on_its_stack reports whether the current thread, found running g
 * (task_g), runs on g's own stack. runtime.gogo sets g (x28, and TLS
 * with cgo: save_g) before it switches from the scheduler's stack (g0) to
 * g's, through a call (BL runtime.save_g) that qemu's TCG ends a
 * translated block at, so the CPU clock lands there: a sample would be
 * the scheduler's stack (gogo, runtime.schedule, ...) taken as g's. The
 * frame pointer tells: it is on g's stack, or, in the vDSO that Go calls
 * on the g0 stack with g kept (runtime.nanotime1, walltime), its frame
 * record links to the Go caller's frame on g's stack; in gogo both are
 * the scheduler's (runtime.execute's frame, then runtime.schedule's). */
static __always_inline int g_on_its_stack(__u64 g)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	struct g_stack st;
	__u64 fp = 0, up = 0;

	if (!regs || bpf_probe_read_kernel(&fp, sizeof(fp), &PT_REGS_FP(regs)) ||
	    bpf_probe_read_user(&st, sizeof(st), (void *)g))
		return 0;
	if (fp >= st.lo && fp < st.hi)
		return 1;
	if (!fp || bpf_probe_read_user(&up, sizeof(up), (void *)fp))
		return 0;
	return up >= st.lo && up < st.hi;
}
#endif

/*
 * inflight_start pushes a started span on its thread of execution's stack.
 * ev->name is cut and NUL-padded afterwards (name_cut, span_name_id), as
 * the core does to a span's name.
 */
static __noinline __attribute__((unused)) void inflight_start(struct span_event *ev, __u32 source)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct inflight_exec_key k = {.tgid = pid_tgid >> 32};
	__u64 g = SPAN_EXEC_ID(ev);
	struct inflight_stack *e;

	k.exec = g ? g : (__u32)pid_tgid;
	e = bpf_map_lookup_elem(&inflight_exec, &k);
	if (!e) {
		__u32 zero = 0;
		struct inflight_stack *z = bpf_map_lookup_elem(&inflight_zero, &zero);

		if (!z)
			return;
		if (g)
			learn_tls(k.tgid, g);
		bpf_map_update_elem(&inflight_exec, &k, z, BPF_NOEXIST);
		e = bpf_map_lookup_elem(&inflight_exec, &k);
		if (!e)
			return;
	}
	__u32 d = e->depth;
	e->depth = d + 1;
	e->tid = (__u32)pid_tgid;
	e->goroutine = g != 0;
	if (d >= INFLIGHT_DEPTH)
		return;
	struct inflight_open *o = &e->spans[d];
	o->start_ns = bpf_ktime_get_ns();
	o->start_real = ev->start_ns;
	o->source = source;
	o->flags = ev->flags;
	name_cut(ev->name);
	__u64 id = span_name_id(ev->name);
	if (o->name_id != id) {
		o->name_id = id;
		__builtin_memcpy(o->name, ev->name, sizeof(o->name));
	}
}

/*
 * inflight_end pops an ended span, found by its start time, from its
 * thread of execution's stack; spans opened inside it and never ended are
 * dropped with it. An end without a start (a span recorded after the
 * fact) changes nothing.
 */
static __noinline __attribute__((unused)) void inflight_end(struct span_event *ev)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct inflight_exec_key k = {.tgid = pid_tgid >> 32};
	__u64 g = SPAN_EXEC_ID(ev);
	struct inflight_stack *e;

	if (!ev->start_ns)
		return;
	k.exec = g ? g : (__u32)pid_tgid;
	e = bpf_map_lookup_elem(&inflight_exec, &k);
	if (!e || !e->depth)
		return;
	__u32 d = e->depth;
	if (d > INFLIGHT_DEPTH) {
		/* The span is one of those past the kept ones, or, when a kept
		 * one matches, the nesting was broken: look. */
		d = INFLIGHT_DEPTH;
	}
#pragma unroll
	for (int i = INFLIGHT_DEPTH - 1; i >= 0; i--) {
		if (i < d && e->spans[i].start_real == ev->start_ns) {
			e->depth = i;
			return;
		}
	}
	if (e->depth > INFLIGHT_DEPTH)
		e->depth--;
}

#endif
