/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The span event: the one fixed-layout payload every span source produces.
 *
 * Applications write it through user_events (the Go SDK in emit/, the C
 * header in include/spanwatch.h) or hand a pointer to it to the fallback
 * marker function; the BPF programs cast it and feed the aggregation core.
 * emit/layout_test.go checks that the Go mirror agrees with this header, and
 * the user_events format string in emit/ spells the same fields in order.
 */
#ifndef SPANWATCH_SPAN_EVENT_H
#define SPANWATCH_SPAN_EVENT_H

#define SPAN_NAME_LEN 64
#define SPAN_TRACE_ID_LEN 16
#define SPAN_SPAN_ID_LEN 8

/* flags */
#define SPAN_F_START 1 /* a span began (duration_ns 0) */
#define SPAN_F_NAME_PREFIX 2 /* with SPAN_F_START: the span's final name may extend this one */

/* status values */
#define SPAN_STATUS_OK 0
#define SPAN_STATUS_ERROR 1

/* The user_events name the SDK registers and the collector watches. */
#define SPAN_USER_EVENT_NAME "spanwatch_span"

struct span_event {
	__u64 duration_ns; /* how long the span took */
	__u64 start_ns;    /* CLOCK_REALTIME at start, 0 when unknown */
	__u32 status;      /* SPAN_STATUS_* */
	__u32 flags;       /* SPAN_F_* */
	__u8 trace_id[SPAN_TRACE_ID_LEN];
	__u8 span_id[SPAN_SPAN_ID_LEN];
	__u64 exec_id;     /* the logical thread: a Go goroutine's g pointer; 0 = the OS thread */
	char name[SPAN_NAME_LEN]; /* NUL-terminated or NUL-padded; need not be */
};

#endif
