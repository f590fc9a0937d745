/* SPDX-License-Identifier: (Apache-2.0 OR BSD-2-Clause) */
/*
 * spanwatch.h - emit spanwatch span events from C or C++ through Linux
 * user_events. Header-only: copy this one file into your project.
 *
 *     #include "spanwatch.h"
 *
 *     static struct spanwatch sw;            // static or heap, never moved
 *     spanwatch_open(&sw);                   // once; failure leaves a no-op
 *
 *     struct spanwatch_span s;
 *     spanwatch_span_begin(&sw, &s, "checkout");
 *     ... the work ...
 *     spanwatch_span_end(&sw, &s, failed);   // one load and a branch each
 *                                            // when nobody listens
 *     spanwatch_close(&sw);                  // at exit; idempotent
 *
 * The payload is struct span_event of bpf/span_event.h, registered with the
 * same user_events format string as the Go SDK (emit.Format), so the
 * spanwatch agent treats C and Go spans alike. Trace and span ids are
 * optional (zero when unknown). spanwatch_span_begin tells the agent a span
 * began (a payload with SPANWATCH_F_START), so it can sample the thread
 * while the span runs past its budget and report a span that never ends;
 * spanwatch_span_start only starts the clock.
 *
 * Needs kernel 6.4+ with CONFIG_USER_EVENTS and write access to
 * <tracefs>/user_events_data (root's by default). Where either is missing,
 * spanwatch_open returns a negative errno and every other call is a cheap
 * no-op: the application runs unchanged, only without spans.
 *
 * Needs POSIX.1-2008 declarations: the compilers' default modes have them;
 * with -std=c11 define _POSIX_C_SOURCE=200809L.
 *
 * Thread safety: after spanwatch_open returns, spanwatch_enabled and
 * spanwatch_emit may be called from any thread. spanwatch_open and
 * spanwatch_close must not race with them or with each other.
 */
#ifndef SPANWATCH_H
#define SPANWATCH_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
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
#define SPANWATCH_F_START 1 /* flags: a span began (duration 0) */
#define SPANWATCH_STATUS_OK 0
#define SPANWATCH_STATUS_ERROR 1

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

/* A process's registration of the span event. Keep it in memory that does
 * not move (static storage or the heap): the kernel writes the enable word
 * at its address while the event is registered. */
struct spanwatch {
	uint32_t enabled;     /* bit 0 set by the kernel while someone listens */
	uint32_t write_index; /* the kernel's index for this event */
	int fd;               /* user_events_data, -1 when not registered */
	int error;            /* errno of the failed registration, 0 if none */
};

/* A span being timed. */
struct spanwatch_span {
	const char *name;
	uint64_t start_mono_ns; /* CLOCK_MONOTONIC: the duration */
	uint64_t start_real_ns; /* CLOCK_REALTIME: the start time */
	uint8_t trace_id[16];   /* optional: set after spanwatch_span_start */
	uint8_t span_id[8];
};

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

struct spanwatch_user_unreg_ {
	uint32_t size;
	uint8_t disable_bit;
	uint8_t reserved_;
	uint16_t reserved2_;
	uint64_t disable_addr;
} __attribute__((__packed__));

#define SPANWATCH_DIAG_IOCSREG_ _IOWR('*', 0, struct spanwatch_user_reg_ *)
#define SPANWATCH_DIAG_IOCSUNREG_ _IOW('*', 2, struct spanwatch_user_unreg_ *)

/* spanwatch_open_at registers the span event through the user_events_data
 * file at path. It returns 0, or a negative errno with sw left as a no-op
 * (sw->error says why). */
static inline int spanwatch_open_at(struct spanwatch *sw, const char *path)
{
	struct spanwatch_user_reg_ reg;
	int fd;

	sw->enabled = 0;
	sw->write_index = 0;
	sw->fd = -1;
	sw->error = 0;
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		sw->error = errno;
		return -sw->error;
	}
	memset(&reg, 0, sizeof(reg));
	reg.size = sizeof(reg);
	reg.enable_bit = 0;
	reg.enable_size = sizeof(sw->enabled);
	reg.enable_addr = (uint64_t)(uintptr_t)&sw->enabled;
	reg.name_args = (uint64_t)(uintptr_t)SPANWATCH_FORMAT;
	if (ioctl(fd, SPANWATCH_DIAG_IOCSREG_, &reg) < 0) {
		/* ENOTTY: not user_events_data; EADDRINUSE: registered with a
		 * different format; EINVAL: an older ABI. */
		sw->error = errno;
		close(fd);
		return -sw->error;
	}
	sw->write_index = reg.write_index;
	sw->fd = fd;
	return 0;
}

/* spanwatch_open registers the span event through tracefs at
 * /sys/kernel/tracing, or at /sys/kernel/debug/tracing. It returns 0, or a
 * negative errno with sw left as a no-op: -ENOENT when tracefs is not
 * mounted or the kernel lacks CONFIG_USER_EVENTS ("mount -t tracefs nodev
 * /sys/kernel/tracing" mounts it), -EACCES without write access to
 * user_events_data. */
static inline int spanwatch_open(struct spanwatch *sw)
{
	int err = spanwatch_open_at(sw, "/sys/kernel/tracing/user_events_data");

	if (err == -ENOENT)
		err = spanwatch_open_at(sw, "/sys/kernel/debug/tracing/user_events_data");
	return err;
}

/* spanwatch_enabled reports whether anyone listens: one load and a test.
 * Use it to skip building a span's name or ids when nobody reads them. */
static inline int spanwatch_enabled(const struct spanwatch *sw)
{
	return (__atomic_load_n(&sw->enabled, __ATOMIC_RELAXED) & 1u) != 0;
}

/* spanwatch_emit_event writes a filled payload. It returns 0 (also when
 * nobody listens or sw is a no-op), or a negative errno from writev. */
static inline int spanwatch_emit_event(const struct spanwatch *sw, const struct spanwatch_event *ev)
{
	struct iovec iov[2];

	if (!spanwatch_enabled(sw) || sw->fd < 0)
		return 0;
	iov[0].iov_base = (void *)&sw->write_index;
	iov[0].iov_len = sizeof(sw->write_index);
	iov[1].iov_base = (void *)ev;
	iov[1].iov_len = sizeof(*ev);
	if (writev(sw->fd, iov, 2) < 0)
		return -errno;
	return 0;
}

/* spanwatch_emit writes one finished span. name must not be NULL; names
 * longer than 127 bytes are cut by the agent, on a UTF-8 character
 * boundary. trace_id (16 bytes) and span_id
 * (8 bytes) may be NULL. */
static inline int spanwatch_emit(const struct spanwatch *sw, const char *name,
				 uint64_t duration_ns, uint64_t start_ns, int error,
				 const uint8_t *trace_id, const uint8_t *span_id)
{
	struct spanwatch_event ev;

	if (!spanwatch_enabled(sw))
		return 0;
	memset(&ev, 0, sizeof(ev));
	ev.duration_ns = duration_ns;
	ev.start_ns = start_ns;
	ev.status = error ? SPANWATCH_STATUS_ERROR : SPANWATCH_STATUS_OK;
	if (trace_id)
		memcpy(ev.trace_id, trace_id, sizeof(ev.trace_id));
	if (span_id)
		memcpy(ev.span_id, span_id, sizeof(ev.span_id));
	/* Not NUL-terminated when it fills the field: the same bytes the Go
	 * SDK writes, so the agent cuts it and names it the same. */
	memcpy(ev.name, name, strnlen(name, sizeof(ev.name)));
	return spanwatch_emit_event(sw, &ev);
}

static inline uint64_t spanwatch_clock_ns_(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* spanwatch_span_start starts timing a span. name must stay valid until
 * spanwatch_span_end. */
static inline void spanwatch_span_start(struct spanwatch_span *s, const char *name)
{
	memset(s, 0, sizeof(*s));
	s->name = name;
	s->start_mono_ns = spanwatch_clock_ns_(CLOCK_MONOTONIC);
	s->start_real_ns = spanwatch_clock_ns_(CLOCK_REALTIME);
}

/* spanwatch_span_begin is spanwatch_span_start, and tells the agent the span
 * began (while someone listens: else one load and a branch). The thread
 * that begins a span must end it. It returns as spanwatch_emit_event. */
static inline int spanwatch_span_begin(const struct spanwatch *sw, struct spanwatch_span *s, const char *name)
{
	struct spanwatch_event ev;

	spanwatch_span_start(s, name);
	if (!spanwatch_enabled(sw))
		return 0;
	memset(&ev, 0, sizeof(ev));
	ev.start_ns = s->start_real_ns;
	ev.flags = SPANWATCH_F_START;
	memcpy(ev.name, name, strnlen(name, sizeof(ev.name)));
	return spanwatch_emit_event(sw, &ev);
}

/* spanwatch_span_end ends a span and emits it; error marks it failed. A
 * span begun with spanwatch_span_begin is matched to its start by its start
 * time. */
static inline int spanwatch_span_end(const struct spanwatch *sw, const struct spanwatch_span *s, int error)
{
	if (!spanwatch_enabled(sw))
		return 0;
	return spanwatch_emit(sw, s->name, spanwatch_clock_ns_(CLOCK_MONOTONIC) - s->start_mono_ns,
			      s->start_real_ns, error, s->trace_id, s->span_id);
}

/* spanwatch_close unregisters the event (the kernel stops writing the enable
 * word) and closes the file. Idempotent. */
static inline void spanwatch_close(struct spanwatch *sw)
{
	struct spanwatch_user_unreg_ unreg;

	if (sw->fd < 0)
		return;
	memset(&unreg, 0, sizeof(unreg));
	unreg.size = sizeof(unreg);
	unreg.disable_bit = 0;
	unreg.disable_addr = (uint64_t)(uintptr_t)&sw->enabled;
	ioctl(sw->fd, SPANWATCH_DIAG_IOCSUNREG_, &unreg);
	close(sw->fd);
	sw->fd = -1;
	__atomic_store_n(&sw->enabled, 0, __ATOMIC_RELAXED);
}

#ifdef __cplusplus
}
#endif

#endif /* SPANWATCH_H */
