/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The span event: the one fixed-layout payload the span SDKs produce.
 *
 * Applications write it through user_events (the Go SDK in emit/, the C
 * header in include/spanwatch.h) or hand a pointer to it to the fallback
 * marker function; the BPF programs cast it and feed the aggregation core.
 * USDT and other sources build one in BPF. emit/layout_test.go checks that
 * the Go mirror agrees with this header, and the user_events format string
 * in emit/ spells the same fields in order.
 */
#ifndef SPANWATCH_SPAN_EVENT_H
#define SPANWATCH_SPAN_EVENT_H

/* Sizes of the payload's arrays. A name is cut at SPAN_NAME_LEN - 1 bytes,
 * on a UTF-8 character boundary. */
enum span_event_sizes {
	SPAN_NAME_LEN = 128,
	SPAN_TRACE_ID_LEN = 16,
	SPAN_SPAN_ID_LEN = 8,
};

/* status values */
enum span_status {
	SPAN_STATUS_OK = 0,
	SPAN_STATUS_ERROR = 1,
};

/* flags */
enum span_flags {
	/* The span began: duration_ns is 0; the end comes as another event
	 * with the same span_id. Such events feed the in-flight sampler,
	 * never the aggregates. */
	SPAN_F_START = 1,
	/* With SPAN_F_START: the span's final name may extend this one (a
	 * name the tracing library completes when the span ends, such as an
	 * OpenTelemetry processor's Fold); while it runs it is judged by the
	 * budgets such a name could have. */
	SPAN_F_NAME_PREFIX = 2,
};

/* The user_events name the SDK registers and the collector watches. */
#define SPAN_USER_EVENT_NAME "spanwatch_span"

struct span_event {
	__u64 duration_ns; /* how long the span took */
	__u64 start_ns;    /* CLOCK_REALTIME at start, 0 when unknown */
	__u32 status;      /* SPAN_STATUS_* */
	__u32 flags;       /* SPAN_F_* */
	__u8 trace_id[SPAN_TRACE_ID_LEN];
	__u8 span_id[SPAN_SPAN_ID_LEN];
	/* The logical thread the span runs on: a Go goroutine's g pointer;
	 * 0 means the OS thread that writes the event. */
	__u64 exec_id;
	char name[SPAN_NAME_LEN]; /* NUL-terminated or NUL-padded; need not be */
};

#endif
