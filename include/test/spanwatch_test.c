// SPDX-License-Identifier: (Apache-2.0 OR BSD-2-Clause)
/*
 * The C emitter's test program, built by include/header_test.go (and by the
 * VM harness, where the kernel has user_events):
 *
 *   spanwatch_test format         print SPANWATCH_FORMAT
 *   spanwatch_test fallback PATH  open PATH as user_events_data: it must fail
 *                                 and leave a working no-op
 *   spanwatch_test open           register through tracefs; print the result
 *   spanwatch_test stdout NAME    write one span (duration 1234567 ns, start
 *                                 42, error, ids as below) to stdout as if
 *                                 stdout were user_events_data with write
 *                                 index 7: the exact bytes the kernel gets
 *   spanwatch_test begin NAME     the same for the start of a span named NAME
 *                                 (spanwatch_span_begin, start time 42)
 *   spanwatch_test emit N NAME    register, then emit N spans named NAME
 *                                 (1 ms each, every 10th an error, trace id
 *                                 bytes 1..16, span id bytes 0xa1..0xa8)
 *
 * The layout of struct spanwatch_event against struct span_event of
 * bpf/span_event.h is checked when this file compiles.
 */
#include <linux/types.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../bpf/span_event.h"
#include "../spanwatch.h"

#define SAME_FIELD(f)                                                                        \
	_Static_assert(offsetof(struct spanwatch_event, f) == offsetof(struct span_event, f), \
		       "offset of " #f);                                                    \
	_Static_assert(sizeof(((struct spanwatch_event *)0)->f) == sizeof(((struct span_event *)0)->f), \
		       "size of " #f)

SAME_FIELD(duration_ns);
SAME_FIELD(start_ns);
SAME_FIELD(status);
SAME_FIELD(flags);
SAME_FIELD(trace_id);
SAME_FIELD(span_id);
SAME_FIELD(exec_id);
SAME_FIELD(name);
_Static_assert(SPANWATCH_F_START == SPAN_F_START, "start flag");
_Static_assert(sizeof(struct spanwatch_event) == sizeof(struct span_event), "struct size");
_Static_assert(SPANWATCH_NAME_LEN == SPAN_NAME_LEN, "name length");
_Static_assert(SPANWATCH_STATUS_ERROR == SPAN_STATUS_ERROR, "error status");
_Static_assert(sizeof(struct spanwatch_user_reg_) == 28, "struct user_reg is 28 bytes");
_Static_assert(sizeof(struct spanwatch_user_unreg_) == 16, "struct user_unreg is 16 bytes");

static int fail(const char *what)
{
	fprintf(stderr, "FAIL: %s\n", what);
	return 1;
}

static int fallback(const char *path)
{
	struct spanwatch sw;
	struct spanwatch_span s;
	int err = spanwatch_open_at(&sw, path);

	if (err == 0)
		return fail("spanwatch_open_at succeeded on a file that is not user_events_data");
	if (err != -sw.error || sw.fd != -1)
		return fail("a failed open left the struct inconsistent");
	if (spanwatch_enabled(&sw))
		return fail("a failed open reports enabled");
	if (spanwatch_emit(&sw, "x", 1, 0, 0, NULL, NULL) != 0)
		return fail("emit on a no-op did not return 0");
	spanwatch_span_start(&s, "x");
	if (spanwatch_span_end(&sw, &s, 1) != 0)
		return fail("span_end on a no-op did not return 0");
	spanwatch_close(&sw);
	spanwatch_close(&sw);
	printf("fallback errno=%d\n", sw.error);
	return 0;
}

static int emit(long n, const char *name)
{
	struct spanwatch sw;
	uint8_t trace[16], span[8];
	int err = spanwatch_open(&sw), i;

	if (err != 0) {
		printf("fallback errno=%d\n", -err);
		return 2;
	}
	for (i = 0; i < 16; i++)
		trace[i] = (uint8_t)(i + 1);
	for (i = 0; i < 8; i++)
		span[i] = (uint8_t)(0xa1 + i);
	printf("registered write_index=%u enabled=%d\n", sw.write_index, spanwatch_enabled(&sw));
	for (long k = 0; k < n; k++) {
		err = spanwatch_emit(&sw, name, 1000000, spanwatch_clock_ns_(CLOCK_REALTIME), k % 10 == 9, trace, span);
		if (err != 0) {
			printf("emit errno=%d\n", -err);
			return 1;
		}
	}
	printf("emitted %ld enabled=%d\n", n, spanwatch_enabled(&sw));
	spanwatch_close(&sw);
	return 0;
}

static int to_stdout(const char *name)
{
	struct spanwatch sw = {.enabled = 1, .write_index = 7, .fd = 1, .error = 0};
	uint8_t trace[16], span[8];
	int i;

	for (i = 0; i < 16; i++)
		trace[i] = (uint8_t)(i + 1);
	for (i = 0; i < 8; i++)
		span[i] = (uint8_t)(0xa1 + i);
	fflush(stdout);
	return spanwatch_emit(&sw, name, 1234567, 42, 1, trace, span) == 0 ? 0 : 1;
}

static int begin_to_stdout(const char *name)
{
	struct spanwatch sw = {.enabled = 1, .write_index = 7, .fd = 1, .error = 0};
	struct spanwatch_span s;
	struct spanwatch_event ev;

	/* spanwatch_span_begin with the clock read stubbed: start time 42. */
	spanwatch_span_start(&s, name);
	s.start_real_ns = 42;
	memset(&ev, 0, sizeof(ev));
	ev.start_ns = s.start_real_ns;
	ev.flags = SPANWATCH_F_START;
	memcpy(ev.name, name, strnlen(name, sizeof(ev.name)));
	fflush(stdout);
	if (spanwatch_emit_event(&sw, &ev) != 0)
		return 1;
	/* And the function itself, whose start time is the clock's: the same
	 * bytes but for start_ns. */
	return spanwatch_span_begin(&sw, &s, name) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "begin"))
		return begin_to_stdout(argv[2]);
	if (argc >= 3 && !strcmp(argv[1], "stdout"))
		return to_stdout(argv[2]);
	if (argc >= 2 && !strcmp(argv[1], "format")) {
		printf("%s\n", SPANWATCH_FORMAT);
		return 0;
	}
	if (argc >= 3 && !strcmp(argv[1], "fallback"))
		return fallback(argv[2]);
	if (argc >= 2 && !strcmp(argv[1], "open")) {
		struct spanwatch sw;
		int err = spanwatch_open(&sw);

		if (err != 0) {
			printf("fallback errno=%d\n", -err);
			return spanwatch_enabled(&sw) ? 1 : 0;
		}
		printf("registered write_index=%u\n", sw.write_index);
		spanwatch_close(&sw);
		return 0;
	}
	if (argc >= 4 && !strcmp(argv[1], "emit"))
		return emit(atol(argv[2]), argv[3]);
	fprintf(stderr, "usage: %s format | fallback PATH | open | stdout NAME | begin NAME | emit N NAME\n", argv[0]);
	return 2;
}
