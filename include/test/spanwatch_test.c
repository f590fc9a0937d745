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
 *   spanwatch_test libemit N NAME the same through libspanwatch's C ABI
 *                                 (sdk/c/src/spanwatch.c, compiled in)
 *   spanwatch_test marker         the fallback: the mode and probe a
 *                                 process gets without user_events
 *   spanwatch_test bench N        time N empty calls and N spans
 *                                 (spanwatch_span_begin and _end): prints
 *                                 "empty NS", "span NS", "listening 0|1"
 *                                 (sdktest.Costs); SPANWATCH_BENCH_WAIT=1
 *                                 waits for a listener first
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
/* libspanwatch itself, without its load-time registration. */
#define SPANWATCH_LIB_NO_INIT
#include "../../sdk/c/src/spanwatch.c"

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
_Static_assert(offsetof(struct spanwatch_probe_, magic) == 8, "the magic follows the word");
_Static_assert(offsetof(struct spanwatch_probe_, marker_rel) == 24, "markerabi.CMarkerRelOffset");
_Static_assert(offsetof(struct spanwatch_probe_, abi) == 32, "markerabi.CABIOffset");
_Static_assert(sizeof(struct spanwatch_probe_) == 64, "the probe is 64 bytes");

static int fail(const char *what)
{
	fprintf(stderr, "FAIL: %s\n", what);
	return 1;
}

/* fallback: user_events cannot be registered through path; the process
 * falls back to the marker (or, with SPANWATCH_EMIT=user_events, to
 * nothing), reports nobody listening while no agent is attached, and sends
 * nothing. */
static int fallback(const char *path)
{
	struct spanwatch sw, again;
	struct spanwatch_span s;
	int err = spanwatch_open_at(&sw, path);
	const char *env = getenv("SPANWATCH_EMIT");
	int strict = env && !strcmp(env, "user_events");
	uint32_t want;

	if (sw.mode == SPANWATCH_MODE_USER_EVENTS)
		return fail("spanwatch_open_at registered through a file that is not user_events_data");
	if (sw.fd != -1 || sw.error == 0)
		return fail("a failed registration left the struct inconsistent");
	want = strict || !SPANWATCH_HAVE_MARKER ? SPANWATCH_MODE_OFF : SPANWATCH_MODE_MARKER;
	if (sw.mode != want || err != (want == SPANWATCH_MODE_OFF ? -sw.error : 0))
		return fail("wrong mode after a failed registration");
	if (spanwatch_enabled(&sw) || spanwatch_listening())
		return fail("reports a listener where there is none");
	if (spanwatch_emit(&sw, "x", 1, 0, 0, NULL, NULL) != 0)
		return fail("emit with nobody listening did not return 0");
	spanwatch_span_begin(&sw, &s, "x");
	if (s.start_mono_ns != 0)
		return fail("span_begin timed a span nobody listens to");
	if (spanwatch_span_end(&sw, &s, 1) != 0)
		return fail("span_end with nobody listening did not return 0");
	/* A second open returns the first's state, whatever its path. */
	spanwatch_open(&again);
	if (again.mode != sw.mode || again.error != sw.error)
		return fail("a second open chose again");
	spanwatch_close(&sw);
	spanwatch_close(&sw);
	printf("fallback errno=%d mode=%u\n", again.error, again.mode);
	return 0;
}

static int emit(long n, const char *name, int lib)
{
	struct spanwatch sw;
	uint8_t trace[16], span[8];
	int err = spanwatch_open(&sw), i;

	if (err != 0 || sw.mode != SPANWATCH_MODE_USER_EVENTS) {
		printf("fallback errno=%d mode=%u\n", sw.error, sw.mode);
		return 2;
	}
	lib_sw = sw; /* what the library's constructor does */
	for (i = 0; i < 16; i++)
		trace[i] = (uint8_t)(i + 1);
	for (i = 0; i < 8; i++)
		span[i] = (uint8_t)(0xa1 + i);
	printf("registered write_index=%u enabled=%d\n", sw.write_index, spanwatch_enabled(&sw));
	for (long k = 0; k < n; k++) {
		if (lib)
			err = spanwatch_lib_record(name, strlen(name), 1000000, spanwatch_lib_realtime_ns(), k % 10 == 9,
						   trace, span);
		else
			err = spanwatch_emit(&sw, name, 1000000, spanwatch_clock_ns_(CLOCK_REALTIME), k % 10 == 9,
					     trace, span);
		if (err != 0) {
			printf("emit errno=%d\n", -err);
			return 1;
		}
	}
	printf("emitted %ld enabled=%d\n", n, spanwatch_enabled(&sw));
	spanwatch_close(&sw);
	return 0;
}

/* as_if_user_events: stdout stands for user_events_data, with write index
 * 7 and the enable bit set. */
static struct spanwatch as_if_user_events(void)
{
	struct spanwatch sw = {.mode = SPANWATCH_MODE_USER_EVENTS, .write_index = 7, .fd = 1, .error = 0};

	__atomic_store_n(&spanwatch_probe_.word, 1ull << 32, __ATOMIC_RELAXED);
	return sw;
}

static int to_stdout(const char *name)
{
	struct spanwatch sw = as_if_user_events();
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
	struct spanwatch sw = as_if_user_events();
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

__attribute__((noinline)) static void bench_empty(const char *name)
{
	__asm__ volatile("" : : "r"(name) : "memory");
}

__attribute__((noinline)) static void bench_span(const struct spanwatch *sw, const char *name)
{
	struct spanwatch_span s;

	spanwatch_span_begin(sw, &s, name);
	__asm__ volatile("" : : "r"(&s) : "memory");
	spanwatch_span_end(sw, &s, 0);
}

static int bench(long n)
{
	struct spanwatch sw;
	const char *w = getenv("SPANWATCH_BENCH_WAIT");
	uint64_t t0, t1, t2;

	spanwatch_open(&sw);
	if (w && !strcmp(w, "1")) {
		struct timespec ts = {0, 10000000};

		for (int i = 0; i < 1000 && !spanwatch_enabled(&sw); i++)
			nanosleep(&ts, NULL);
	}
	t0 = spanwatch_clock_ns_(CLOCK_MONOTONIC);
	for (long i = 0; i < n; i++)
		bench_empty("bench.c");
	t1 = spanwatch_clock_ns_(CLOCK_MONOTONIC);
	for (long i = 0; i < n; i++)
		bench_span(&sw, "bench.c");
	t2 = spanwatch_clock_ns_(CLOCK_MONOTONIC);
	printf("empty %.2f\nspan %.2f\nlistening %d\n", (double)(t1 - t0) / (double)n, (double)(t2 - t1) / (double)n,
	       spanwatch_enabled(&sw));
	return 0;
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

		spanwatch_open(&sw);
		if (sw.mode != SPANWATCH_MODE_USER_EVENTS) {
			printf("fallback errno=%d mode=%u\n", sw.error, sw.mode);
			return spanwatch_enabled(&sw) ? 1 : 0;
		}
		printf("registered write_index=%u\n", sw.write_index);
		spanwatch_close(&sw);
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "marker")) {
		/* The probe as the agent reads it: the magic after the word, the
		 * marker at the distance the probe holds, a nop then a ret. */
		const unsigned char *m = (const unsigned char *)&spanwatch_probe_.marker_rel + spanwatch_probe_.marker_rel;
#if defined(__aarch64__)
		static const unsigned char code[] = {0x1f, 0x20, 0x03, 0xd5, 0xc0, 0x03, 0x5f, 0xd6};
#else
		static const unsigned char code[] = {0x90, 0xc3};
#endif

		if (!SPANWATCH_HAVE_MARKER)
			return fail("no marker on this architecture");
		if (spanwatch_probe_.magic[0] != 0x4365626f72707773ull || spanwatch_probe_.magic[1] != ~0x4365626f72707773ull ||
		    spanwatch_probe_.abi != 1 || memcmp(m, code, sizeof(code)) != 0)
			return fail("the probe is not what the agent looks for");
		printf("marker ok\n");
		return 0;
	}
	if (argc >= 3 && !strcmp(argv[1], "bench"))
		return bench(atol(argv[2]));
	if (argc >= 4 && !strcmp(argv[1], "emit"))
		return emit(atol(argv[2]), argv[3], 0);
	if (argc >= 4 && !strcmp(argv[1], "libemit"))
		return emit(atol(argv[2]), argv[3], 1);
	fprintf(stderr, "usage: %s format | fallback PATH | open | marker | stdout NAME | begin NAME | emit N NAME | libemit N NAME | bench N\n", argv[0]);
	return 2;
}
