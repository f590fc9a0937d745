/* SPDX-License-Identifier: (Apache-2.0 OR BSD-2-Clause) */
/*
 * spanwatch.h - emit spanwatch span events from C or C++. Header-only: copy
 * this one file into your project (it is also the source of libspanwatch,
 * sdk/c, which the Python, Node.js and Java SDKs are built on).
 *
 *     #include "spanwatch.h"
 *
 *     static struct spanwatch sw;            // or on the heap, or a local
 *     spanwatch_open(&sw);                   // once, from any thread
 *
 *     struct spanwatch_span s;
 *     spanwatch_span_begin(&sw, &s, "checkout");
 *     ... the work ...
 *     spanwatch_span_end(&sw, &s, failed);   // one load and a branch each
 *                                            // while nobody listens
 *
 * Spans reach the spanwatch agent one of two ways, chosen once per process
 * by spanwatch_open (sw.mode says which):
 *
 *  - SPANWATCH_MODE_USER_EVENTS: through Linux user_events (kernel 6.4+
 *    with CONFIG_USER_EVENTS, and write access to
 *    <tracefs>/user_events_data, root's by default): one writev per span,
 *    no trap. The payload is struct span_event of bpf/span_event.h,
 *    registered with the same format string as the Go SDK (emit.Format).
 *  - SPANWATCH_MODE_MARKER, everywhere else (most distribution kernels have
 *    no user_events): the span is handed to spanwatch_marker_, a function
 *    whose first instruction is a nop, which the agent uprobes in
 *    every binary that contains it (it finds it by a magic number in the
 *    binary's data, so stripped binaries work). The kernel counts the
 *    agent's uprobes in this binary's probe word, so while no agent
 *    listens nothing is called.
 *
 * Either way, while nobody listens a span costs one load and a branch at
 * its beginning and a test of the span at its end. SPANWATCH_EMIT=off in the
 * environment turns spans off, =marker skips user_events, =user_events
 * insists on them (sw.error says why they failed).
 *
 * Each binary (executable or shared object) that includes this header gets
 * one marker and one probe word, shared by all its translation units (weak,
 * hidden, in COMDAT groups). The agent finds executables by /proc/PID/exe,
 * and shared objects by /proc/PID/maps when their file name contains
 * "spanwatch" (libspanwatch.so, an SDK's native part); a shared object of
 * another name that includes this header is found only when the agent is
 * told its path (collector.binaries, or spanwatch run --binary).
 *
 * The marker is built for x86-64 and AArch64 (arm64); elsewhere (or with
 * SPANWATCH_NO_MARKER defined) spans go through user_events or nowhere
 * (SPANWATCH_MODE_OFF).
 *
 * Needs POSIX.1-2008 declarations: the compilers' default modes have them;
 * with -std=c11 define _POSIX_C_SOURCE=200809L. Links with -pthread on
 * glibc before 2.34: registration runs on a thread of its own (the kernel
 * ties user_events enablers to the thread that registers them, and drops
 * them when it exits).
 *
 * Thread safety: every function may be called from any thread.
 * spanwatch_open registers once per binary; later calls return the same
 * state.
 */
#ifndef SPANWATCH_H
#define SPANWATCH_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#if !defined(O_CLOEXEC) || !defined(CLOCK_MONOTONIC)
#error "spanwatch.h needs POSIX.1-2008: build with -std=gnu11 (the default) or define _POSIX_C_SOURCE=200809L before any #include"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The user_event the agent watches, and its format: the fields of struct
 * span_event in order. Must equal emit.Format in the Go SDK. */
#define SPANWATCH_EVENT_NAME "spanwatch_span"
#define SPANWATCH_FORMAT                                                        \
	"spanwatch_span u64 duration_ns; u64 start_ns; u32 status; u32 flags; " \
	"char[16] trace_id; char[8] span_id; u64 exec_id; char[128] name"

#define SPANWATCH_NAME_LEN 128
#define SPANWATCH_F_START 1	  /* flags: a span began (duration 0) */
#define SPANWATCH_F_NAME_PREFIX 2 /* with SPANWATCH_F_START: the final name may extend this one */
#define SPANWATCH_STATUS_OK 0
#define SPANWATCH_STATUS_ERROR 1

/* How a process sends its spans (struct spanwatch.mode). */
#define SPANWATCH_MODE_NONE 0	     /* spanwatch_open not called yet */
#define SPANWATCH_MODE_MARKER 1	     /* the marker the agent uprobes */
#define SPANWATCH_MODE_USER_EVENTS 2 /* user_events */
#define SPANWATCH_MODE_OFF 3	     /* SPANWATCH_EMIT=off, or no way on this architecture */

/* The payload: the same layout as struct span_event in bpf/span_event.h. */
struct spanwatch_event {
	uint64_t duration_ns; /* how long the span took */
	uint64_t start_ns;    /* CLOCK_REALTIME at start, 0 when unknown */
	uint32_t status;      /* SPANWATCH_STATUS_* */
	uint32_t flags;       /* SPANWATCH_F_*: 0 for a finished span */
	uint8_t trace_id[16];
	uint8_t span_id[8];
	uint64_t exec_id;     /* 0: the writing thread */
	char name[SPANWATCH_NAME_LEN]; /* NUL-padded; the agent cuts it at 127 bytes */
};

/* A process's way of sending spans: what spanwatch_open found. */
struct spanwatch {
	uint32_t mode;	      /* SPANWATCH_MODE_* */
	uint32_t write_index; /* user_events: the kernel's index for the event */
	int fd;		      /* user_events: user_events_data, else -1 */
	int error;	      /* errno of the failed user_events registration, 0 if none */
};

/* A span being timed. */
struct spanwatch_span {
	const char *name;
	uint64_t start_mono_ns; /* CLOCK_MONOTONIC: the duration; 0: not timed */
	uint64_t start_real_ns; /* CLOCK_REALTIME: the start time */
	uint8_t trace_id[16];	/* optional: set after spanwatch_span_begin */
	uint8_t span_id[8];
};

/*
 * The probe: one per binary. Bytes 0-1 of word are the marker's uprobe
 * reference counter (the kernel adds one for each attached uprobe, as for
 * a USDT semaphore); bytes 4-7 are the user_events enable word (the kernel
 * sets bit 0 while a tracer listens). One load of word says whether anybody
 * listens. The magic and the marker's offset from marker_rel let the agent
 * find both in binaries without a symbol table; abi says how the marker
 * takes its argument (1: the System V ABI's C calling convention of the
 * binary's machine, the event's address in the first argument register:
 * %rdi on x86-64, x0 on AArch64).
 * The agent's reader (collector/marker.go, internal/markerabi) relies on
 * this layout. It must live in the binary's initialised data (a uprobe
 * reference counter must be in a file-backed writable mapping), which is
 * why it is defined in assembly below, or as an initialised variable.
 */
struct spanwatch_probe_ {
	uint64_t word;
	uint64_t magic[2];
	int64_t marker_rel;
	uint32_t abi;
	uint32_t state; /* SPANWATCH_MODE_*, or SPANWATCH_BUSY_ while registering */
	struct spanwatch sw;
	uint32_t reserved_[2];
};

#define SPANWATCH_MAGIC_ 0x4365626f72707773ull /* "swprobeC" */
#define SPANWATCH_BUSY_ 0xffffffffu

#if (defined(__x86_64__) || defined(__aarch64__)) && defined(__ELF__) && !defined(SPANWATCH_NO_MARKER)
#define SPANWATCH_HAVE_MARKER 1
/* The marker and the probe, each in a COMDAT group so that every
 * translation unit may define them and the linker keeps one; hidden, so
 * that each shared object has its own. The marker is a leaf that touches
 * no memory (no red zone to clobber) and starts with a nop, the uprobe's
 * site:
 *
 *  - x86-64: a one-byte nop, which the kernel emulates instead of
 *    single-stepping (about 0.5 µs a hit instead of 13), and which never
 *    qualifies for the optimized nop5 uprobe (6.18+, a call that would
 *    write below the stack pointer).
 *  - AArch64: NOP, which the kernel simulates from Linux 6.13
 *    (simulate_nop); 6.12 and older single-step it out of line, at about
 *    twice the cost of a hit.
 *
 * It is called through spanwatch_marker_call_, which makes a frame: a
 * stack taken at the marker's first instruction then starts marker, the
 * function that ended the span, its callers (without that frame the
 * kernel's walk by frame pointers skips the marker's caller, whose return
 * address is on the stack on x86-64 and in the link register on AArch64,
 * outside any frame record). Both are called directly, never through a
 * pointer, so they need no BTI landing pad. */
#if defined(__x86_64__)
__asm__(".pushsection .text.spanwatch_marker_,\"axG\",@progbits,spanwatch_marker_,comdat\n"
	".weak spanwatch_marker_call_\n"
	".hidden spanwatch_marker_call_\n"
	".type spanwatch_marker_call_,@function\n"
	"spanwatch_marker_call_:\n"
	".cfi_startproc\n"
	"\tpush %rbp\n"
	".cfi_def_cfa_offset 16\n"
	".cfi_offset %rbp, -16\n"
	"\tmov %rsp, %rbp\n"
	".cfi_def_cfa_register %rbp\n"
	"\tcall spanwatch_marker_\n"
	"\tpop %rbp\n"
	".cfi_def_cfa %rsp, 8\n"
	"\tret\n"
	".cfi_endproc\n"
	".size spanwatch_marker_call_,.-spanwatch_marker_call_\n"
	".weak spanwatch_writev_call_\n"
	".hidden spanwatch_writev_call_\n"
	".type spanwatch_writev_call_,@function\n"
	"spanwatch_writev_call_:\n"
	".cfi_startproc\n"
	"\tpush %rbp\n"
	".cfi_def_cfa_offset 16\n"
	".cfi_offset %rbp, -16\n"
	"\tmov %rsp, %rbp\n"
	".cfi_def_cfa_register %rbp\n"
	"\tcall writev@PLT\n"
	"\tpop %rbp\n"
	".cfi_def_cfa %rsp, 8\n"
	"\tret\n"
	".cfi_endproc\n"
	".size spanwatch_writev_call_,.-spanwatch_writev_call_\n"
	".weak spanwatch_marker_\n"
	".hidden spanwatch_marker_\n"
	".type spanwatch_marker_,@function\n"
	"spanwatch_marker_:\n"
	".cfi_startproc\n"
	"\tnop\n"
	"\tret\n"
	".cfi_endproc\n"
	".size spanwatch_marker_,.-spanwatch_marker_\n"
	".popsection\n");
#else
__asm__(".pushsection .text.spanwatch_marker_,\"axG\",@progbits,spanwatch_marker_,comdat\n"
	".p2align 2\n"
	".weak spanwatch_marker_call_\n"
	".hidden spanwatch_marker_call_\n"
	".type spanwatch_marker_call_,@function\n"
	"spanwatch_marker_call_:\n"
	".cfi_startproc\n"
	"\tstp x29, x30, [sp, #-16]!\n"
	".cfi_def_cfa_offset 16\n"
	".cfi_offset x29, -16\n"
	".cfi_offset x30, -8\n"
	"\tmov x29, sp\n"
	"\tbl spanwatch_marker_\n"
	"\tldp x29, x30, [sp], #16\n"
	".cfi_restore x30\n"
	".cfi_restore x29\n"
	".cfi_def_cfa_offset 0\n"
	"\tret\n"
	".cfi_endproc\n"
	".size spanwatch_marker_call_,.-spanwatch_marker_call_\n"
	".weak spanwatch_writev_call_\n"
	".hidden spanwatch_writev_call_\n"
	".type spanwatch_writev_call_,@function\n"
	"spanwatch_writev_call_:\n"
	".cfi_startproc\n"
	"\tstp x29, x30, [sp, #-16]!\n"
	".cfi_def_cfa_offset 16\n"
	".cfi_offset x29, -16\n"
	".cfi_offset x30, -8\n"
	"\tmov x29, sp\n"
	"\tbl writev\n"
	"\tldp x29, x30, [sp], #16\n"
	".cfi_restore x30\n"
	".cfi_restore x29\n"
	".cfi_def_cfa_offset 0\n"
	"\tret\n"
	".cfi_endproc\n"
	".size spanwatch_writev_call_,.-spanwatch_writev_call_\n"
	".weak spanwatch_marker_\n"
	".hidden spanwatch_marker_\n"
	".type spanwatch_marker_,@function\n"
	"spanwatch_marker_:\n"
	".cfi_startproc\n"
	"\tnop\n"
	"\tret\n"
	".cfi_endproc\n"
	".size spanwatch_marker_,.-spanwatch_marker_\n"
	".popsection\n");
#endif
__asm__(".pushsection .data.spanwatch_probe_,\"awG\",@progbits,spanwatch_probe_,comdat\n"
	".weak spanwatch_probe_\n"
	".hidden spanwatch_probe_\n"
	".type spanwatch_probe_,@object\n"
	".balign 64\n"
	"spanwatch_probe_:\n"
	"\t.quad 0\n"
	"\t.quad 0x4365626f72707773\n"
	"\t.quad 0xbc9a9d908d8f888c\n"
	"\t.quad spanwatch_marker_-.\n"
	"\t.long 1\n"
	"\t.long 0\n"
	"\t.long 0, 0, -1, 0\n"
	"\t.long 0, 0\n"
	".size spanwatch_probe_,64\n"
	".popsection\n");
extern struct spanwatch_probe_ spanwatch_probe_ __attribute__((visibility("hidden")));
extern void spanwatch_marker_call_(const struct spanwatch_event *ev) __attribute__((visibility("hidden")));
extern ssize_t spanwatch_writev_call_(int fd, const struct iovec *iov, int n) __attribute__((visibility("hidden")));
#else
#define SPANWATCH_HAVE_MARKER 0
__attribute__((weak, visibility("hidden"))) struct spanwatch_probe_ spanwatch_probe_ = {
	0, {SPANWATCH_MAGIC_, ~SPANWATCH_MAGIC_}, 0, 0, 0, {0, 0, -1, 0}, {0, 0}};
static inline void spanwatch_marker_call_(const struct spanwatch_event *ev) { (void)ev; }
static inline ssize_t spanwatch_writev_call_(int fd, const struct iovec *iov, int n) { return writev(fd, iov, n); }
#endif

/* The ABI of include/uapi/linux/user_events.h (kernel 6.4+), spelt out so
 * the header builds against older kernel headers. */
struct spanwatch_user_reg_ {
	uint32_t size;
	uint8_t enable_bit;
	uint8_t enable_size;
	uint16_t flags;
	uint64_t enable_addr;
	uint64_t name_args;
	uint32_t write_index;
} __attribute__((__packed__));

#define SPANWATCH_DIAG_IOCSREG_ _IOWR('*', 0, struct spanwatch_user_reg_ *)

/* spanwatch_listening reports whether anyone listens: one load and a test.
 * Use it to skip building a span's name or ids when nobody reads them. */
static inline int spanwatch_listening(void)
{
	return __atomic_load_n(&spanwatch_probe_.word, __ATOMIC_RELAXED) != 0;
}

/* A registration on the thread that keeps it (see the top of the file). */
struct spanwatch_reg_job_ {
	int fd, err;
	uint32_t write_index;
	int done;
	pthread_mutex_t mu;
	pthread_cond_t cond;
};

static inline int spanwatch_register_(int fd, uint32_t *write_index)
{
	struct spanwatch_user_reg_ reg;

	memset(&reg, 0, sizeof(reg));
	reg.size = sizeof(reg);
	reg.enable_bit = 0;
	reg.enable_size = 4;
	reg.enable_addr = (uint64_t)(uintptr_t)&spanwatch_probe_.word + 4;
	reg.name_args = (uint64_t)(uintptr_t)SPANWATCH_FORMAT;
	/* ENOTTY: not user_events_data; EADDRINUSE: registered with a
	 * different format; EINVAL: an older ABI. */
	if (ioctl(fd, SPANWATCH_DIAG_IOCSREG_, &reg) < 0)
		return errno;
	*write_index = reg.write_index;
	return 0;
}

static inline void *spanwatch_reg_thread_(void *arg)
{
	struct spanwatch_reg_job_ *job = (struct spanwatch_reg_job_ *)arg;
	uint32_t idx = 0;
	int err = spanwatch_register_(job->fd, &idx);

	pthread_mutex_lock(&job->mu);
	job->err = err;
	job->write_index = idx;
	job->done = 1;
	pthread_cond_signal(&job->cond);
	pthread_mutex_unlock(&job->mu);
	/* job is gone now. The thread lives on: the kernel drops a thread's
	 * enablers when it exits. It blocks every signal. */
	for (;;)
		pause();
	return NULL;
}

/* spanwatch_register_kept_ registers on a thread of its own that never
 * exits, or on the calling thread when no thread can be made. */
static inline int spanwatch_register_kept_(int fd, uint32_t *write_index)
{
	struct spanwatch_reg_job_ job;
	pthread_attr_t attr;
	pthread_t th;
	sigset_t all, old;
	int err;

	memset(&job, 0, sizeof(job));
	job.fd = fd;
	pthread_mutex_init(&job.mu, NULL);
	pthread_cond_init(&job.cond, NULL);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 << 10);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&th, &attr, spanwatch_reg_thread_, &job);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (err != 0) {
		err = spanwatch_register_(fd, write_index);
	} else {
		pthread_mutex_lock(&job.mu);
		while (!job.done)
			pthread_cond_wait(&job.cond, &job.mu);
		pthread_mutex_unlock(&job.mu);
		err = job.err;
		*write_index = job.write_index;
	}
	pthread_mutex_destroy(&job.mu);
	pthread_cond_destroy(&job.cond);
	return err;
}

/* spanwatch_try_user_events_ registers the span event through the
 * user_events_data file at path; 0 or an errno. */
static inline int spanwatch_try_user_events_(struct spanwatch *sw, const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC), err;

	if (fd < 0)
		return errno;
	err = spanwatch_register_kept_(fd, &sw->write_index);
	if (err != 0) {
		close(fd);
		return err;
	}
	sw->fd = fd;
	return 0;
}

/* spanwatch_open_at chooses how this binary sends spans, once (later calls,
 * from any thread, copy the first's result into sw): user_events through
 * the user_events_data file at path (NULL: tracefs at /sys/kernel/tracing,
 * then /sys/kernel/debug/tracing), else the marker. It returns 0 when spans
 * have a way out (sw->mode USER_EVENTS or MARKER; sw->error then says why
 * user_events were not used: ENOENT without tracefs mounted or without
 * CONFIG_USER_EVENTS, EACCES without write access to user_events_data), or
 * a negative errno with sw->mode SPANWATCH_MODE_OFF: -ECANCELED for
 * SPANWATCH_EMIT=off, the registration's error for
 * SPANWATCH_EMIT=user_events, -ENOSYS where there is neither. */
static inline int spanwatch_open_at(struct spanwatch *sw, const char *path)
{
	struct spanwatch_probe_ *p = &spanwatch_probe_;
	struct spanwatch st;
	uint32_t want = SPANWATCH_MODE_NONE;
	const char *env;
	int err;

	for (;;) {
		uint32_t s = __atomic_load_n(&p->state, __ATOMIC_ACQUIRE);

		if (s != SPANWATCH_MODE_NONE && s != SPANWATCH_BUSY_) {
			*sw = p->sw;
			goto out;
		}
		if (s == SPANWATCH_MODE_NONE &&
		    __atomic_compare_exchange_n(&p->state, &want, SPANWATCH_BUSY_, 0, __ATOMIC_ACQUIRE,
						__ATOMIC_ACQUIRE))
			break;
		want = SPANWATCH_MODE_NONE;
		if (s == SPANWATCH_BUSY_) {
			struct timespec ts = {0, 1000000};

			nanosleep(&ts, NULL);
		}
	}
	memset(&st, 0, sizeof(st));
	st.fd = -1;
	env = getenv("SPANWATCH_EMIT");
	if (env && !strcmp(env, "off")) {
		st.mode = SPANWATCH_MODE_OFF;
		st.error = ECANCELED;
	} else if (env && !strcmp(env, "marker")) {
		st.mode = SPANWATCH_HAVE_MARKER ? SPANWATCH_MODE_MARKER : SPANWATCH_MODE_OFF;
		st.error = SPANWATCH_HAVE_MARKER ? 0 : ENOSYS;
	} else {
		if (path) {
			err = spanwatch_try_user_events_(&st, path);
		} else {
			err = spanwatch_try_user_events_(&st, "/sys/kernel/tracing/user_events_data");
			if (err == ENOENT)
				err = spanwatch_try_user_events_(&st, "/sys/kernel/debug/tracing/user_events_data");
		}
		st.error = err;
		if (err == 0)
			st.mode = SPANWATCH_MODE_USER_EVENTS;
		else if (SPANWATCH_HAVE_MARKER && !(env && !strcmp(env, "user_events")))
			st.mode = SPANWATCH_MODE_MARKER;
		else
			st.mode = SPANWATCH_MODE_OFF;
	}
	if (st.mode == SPANWATCH_MODE_OFF && st.error == 0)
		st.error = ENOSYS;
	p->sw = st;
	__atomic_store_n(&p->state, st.mode, __ATOMIC_RELEASE);
	*sw = st;
out:
	return sw->mode == SPANWATCH_MODE_OFF ? -sw->error : 0;
}

/* spanwatch_open is spanwatch_open_at with tracefs where it usually is. */
static inline int spanwatch_open(struct spanwatch *sw)
{
	return spanwatch_open_at(sw, NULL);
}

/* spanwatch_enabled reports whether anyone listens to sw's way out. */
static inline int spanwatch_enabled(const struct spanwatch *sw)
{
	uint64_t w = __atomic_load_n(&spanwatch_probe_.word, __ATOMIC_RELAXED);

	if (sw->mode == SPANWATCH_MODE_USER_EVENTS)
		return (w >> 32 & 1u) != 0;
	if (sw->mode == SPANWATCH_MODE_MARKER)
		return (w & 0xffffu) != 0;
	return 0;
}

/* How a filled event leaves (spanwatch_route_): not at all, through the
 * marker, or written to user_events_data (the iovecs filled). */
#define SPANWATCH_ROUTE_NONE_ 0
#define SPANWATCH_ROUTE_MARKER_ 1
#define SPANWATCH_ROUTE_WRITE_ 2

static inline int spanwatch_route_(const struct spanwatch *sw, const struct spanwatch_event *ev, struct iovec iov[2])
{
	uint64_t w = __atomic_load_n(&spanwatch_probe_.word, __ATOMIC_RELAXED);

	if (w == 0)
		return SPANWATCH_ROUTE_NONE_;
	if (sw->mode == SPANWATCH_MODE_USER_EVENTS) {
		if (!(w >> 32 & 1u) || sw->fd < 0)
			return SPANWATCH_ROUTE_NONE_;
		iov[0].iov_base = (void *)&sw->write_index;
		iov[0].iov_len = sizeof(sw->write_index);
		iov[1].iov_base = (void *)ev;
		iov[1].iov_len = sizeof(*ev);
		return SPANWATCH_ROUTE_WRITE_;
	}
	if (sw->mode == SPANWATCH_MODE_MARKER && (w & 0xffffu))
		return SPANWATCH_ROUTE_MARKER_;
	return SPANWATCH_ROUTE_NONE_;
}

/* spanwatch_send_ sends a routed event from the caller's own frame. */
static inline __attribute__((always_inline)) int spanwatch_send_(const struct spanwatch *sw,
								  const struct spanwatch_event *ev,
								  const struct iovec iov[2], int route)
{
	if (route == SPANWATCH_ROUTE_MARKER_) {
		spanwatch_marker_call_(ev);
	} else if (route == SPANWATCH_ROUTE_WRITE_) {
		/* EBADF: the last tracer left since the load. */
		if (spanwatch_writev_call_(sw->fd, iov, 2) < 0 && errno != EBADF)
			return -errno;
	}
	return 0;
}

/* spanwatch_emit_event hands a filled payload to the agent. It returns 0
 * (also when nobody listens), or a negative errno from writev. */
static inline int spanwatch_emit_event(const struct spanwatch *sw, const struct spanwatch_event *ev)
{
	struct iovec iov[2];

	return spanwatch_send_(sw, ev, iov, spanwatch_route_(sw, ev, iov));
}

/* spanwatch_fill_name_ copies a name of len bytes (cut at 128: the agent
 * cuts it at 127 on a UTF-8 character boundary). Not NUL-terminated when
 * it fills the field: the same bytes the Go SDK writes. */
static inline void spanwatch_fill_name_(struct spanwatch_event *ev, const char *name, size_t len)
{
	if (len > sizeof(ev->name))
		len = sizeof(ev->name);
	memcpy(ev->name, name, len);
}

/* The work behind a span while someone listens is out of line: the inlined
 * part stays a load and a branch, without the registers the rest needs.
 * Only the final call, to the marker or the write, is made from the
 * inlined part, from the function that ends the span. */
#define SPANWATCH_SLOW_ __attribute__((noinline, cold))

SPANWATCH_SLOW_ static int spanwatch_fill_(const struct spanwatch *sw, struct spanwatch_event *ev, struct iovec iov[2],
					   const char *name, size_t len, uint64_t duration_ns, uint64_t start_ns,
					   uint32_t flags, int error, const uint8_t *trace_id, const uint8_t *span_id)
{
	memset(ev, 0, sizeof(*ev));
	ev->duration_ns = duration_ns;
	ev->start_ns = start_ns;
	ev->flags = flags;
	ev->status = error ? SPANWATCH_STATUS_ERROR : SPANWATCH_STATUS_OK;
	if (trace_id)
		memcpy(ev->trace_id, trace_id, sizeof(ev->trace_id));
	if (span_id)
		memcpy(ev->span_id, span_id, sizeof(ev->span_id));
	spanwatch_fill_name_(ev, name, len);
	return spanwatch_route_(sw, ev, iov);
}

/* spanwatch_emit_n writes one finished span whose name is len bytes (not
 * NUL-terminated). trace_id (16 bytes) and span_id (8 bytes) may be NULL. */
static inline int spanwatch_emit_n(const struct spanwatch *sw, const char *name, size_t len,
				   uint64_t duration_ns, uint64_t start_ns, int error,
				   const uint8_t *trace_id, const uint8_t *span_id)
{
	struct spanwatch_event ev;
	struct iovec iov[2];

	if (__builtin_expect(!spanwatch_listening(), 1))
		return 0;
	return spanwatch_send_(sw, &ev, iov,
			       spanwatch_fill_(sw, &ev, iov, name, len, duration_ns, start_ns, 0, error, trace_id,
					       span_id));
}

/* spanwatch_emit writes one finished span. name must not be NULL; names
 * longer than 127 bytes are cut by the agent, on a UTF-8 character
 * boundary. trace_id (16 bytes) and span_id (8 bytes) may be NULL. */
static inline int spanwatch_emit(const struct spanwatch *sw, const char *name,
				 uint64_t duration_ns, uint64_t start_ns, int error,
				 const uint8_t *trace_id, const uint8_t *span_id)
{
	struct spanwatch_event ev;
	struct iovec iov[2];

	if (__builtin_expect(!spanwatch_listening(), 1))
		return 0;
	return spanwatch_send_(sw, &ev, iov,
			       spanwatch_fill_(sw, &ev, iov, name, strnlen(name, SPANWATCH_NAME_LEN), duration_ns,
					       start_ns, 0, error, trace_id, span_id));
}

/* A start's stack is never taken: it is sent out of line whole. */
SPANWATCH_SLOW_ static int spanwatch_emit_start_n_(const struct spanwatch *sw, const char *name, size_t len,
						   uint64_t start_ns, uint32_t flags,
						   const uint8_t *trace_id, const uint8_t *span_id)
{
	struct spanwatch_event ev;
	struct iovec iov[2];

	return spanwatch_send_(sw, &ev, iov,
			       spanwatch_fill_(sw, &ev, iov, name, len, 0, start_ns,
					       SPANWATCH_F_START | (flags & SPANWATCH_F_NAME_PREFIX), 0, trace_id,
					       span_id));
}

/* spanwatch_emit_start_n tells the agent that a span began (flags:
 * SPANWATCH_F_START, and SPANWATCH_F_NAME_PREFIX when the final name may
 * extend this one), so it can sample the thread while the span runs past
 * its budget. The thread that begins a span must end it. */
static inline int spanwatch_emit_start_n(const struct spanwatch *sw, const char *name, size_t len,
					 uint64_t start_ns, uint32_t flags,
					 const uint8_t *trace_id, const uint8_t *span_id)
{
	if (__builtin_expect(!spanwatch_listening(), 1))
		return 0;
	return spanwatch_emit_start_n_(sw, name, len, start_ns, flags, trace_id, span_id);
}

static inline uint64_t spanwatch_clock_ns_(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* spanwatch_span_start starts timing a span, whether or not anyone listens
 * (for spans recorded after the fact). name must stay valid until
 * spanwatch_span_end. */
static inline void spanwatch_span_start(struct spanwatch_span *s, const char *name)
{
	memset(s, 0, sizeof(*s));
	s->name = name;
	s->start_mono_ns = spanwatch_clock_ns_(CLOCK_MONOTONIC);
	s->start_real_ns = spanwatch_clock_ns_(CLOCK_REALTIME);
}

SPANWATCH_SLOW_ static int spanwatch_span_begin_(const struct spanwatch *sw, struct spanwatch_span *s, const char *name)
{
	spanwatch_span_start(s, name);
	return spanwatch_emit_start_n_(sw, name, strnlen(name, SPANWATCH_NAME_LEN), s->start_real_ns, 0, NULL,
				       NULL);
}

/* spanwatch_span_begin starts a span and tells the agent it began. While
 * nobody listens it costs one load and a branch, and the span is not
 * timed: its end does nothing (a listener that arrives mid-span sees the
 * next one). It returns as spanwatch_emit_event. */
static inline int spanwatch_span_begin(const struct spanwatch *sw, struct spanwatch_span *s, const char *name)
{
	s->name = name;
	s->start_mono_ns = 0;
	if (__builtin_expect(!spanwatch_listening(), 1))
		return 0;
	return spanwatch_span_begin_(sw, s, name);
}

SPANWATCH_SLOW_ static int spanwatch_span_end_(const struct spanwatch *sw, const struct spanwatch_span *s, int error,
					       struct spanwatch_event *ev, struct iovec iov[2])
{
	if (!spanwatch_listening())
		return SPANWATCH_ROUTE_NONE_;
	return spanwatch_fill_(sw, ev, iov, s->name, strnlen(s->name, SPANWATCH_NAME_LEN),
			       spanwatch_clock_ns_(CLOCK_MONOTONIC) - s->start_mono_ns, s->start_real_ns, 0, error,
			       s->trace_id, s->span_id);
}

/* spanwatch_span_end ends a span and emits it; error marks it failed. A
 * span begun with spanwatch_span_begin is matched to its start by its start
 * time. A span begun while nobody listened costs a test of s. */
static inline int spanwatch_span_end(const struct spanwatch *sw, const struct spanwatch_span *s, int error)
{
	struct spanwatch_event ev;
	struct iovec iov[2];

	if (__builtin_expect(s->start_mono_ns == 0, 1))
		return 0;
	return spanwatch_send_(sw, &ev, iov, spanwatch_span_end_(sw, s, error, &ev, iov));
}

/* spanwatch_close leaves sw a no-op. The process's registration stays (the
 * enable word is in the binary's data, which is never freed); the kernel
 * drops it when the process exits. Idempotent. */
static inline void spanwatch_close(struct spanwatch *sw)
{
	sw->mode = SPANWATCH_MODE_OFF;
	sw->fd = -1;
}

#ifdef __cplusplus
}
#endif

#endif /* SPANWATCH_H */
