// SPDX-License-Identifier: (Apache-2.0 OR BSD-2-Clause)
/*
 * A C service that times its requests with spanwatch, for sdk/c's tests:
 * built with include/spanwatch.h alone, or (-DUSE_LIB) against
 * libspanwatch's C ABI, shared or static.
 *
 *   service N NAME
 *
 * waits (up to 30 s) until an agent listens, then for a line (or the end)
 * on standard input: the test's word that its own collector listens (the
 * flag says that some agent does, and another agent on the host may attach
 * first). Then it serves N requests named NAME: every 10th fails, every
 * 10th (the 5th of each ten) is slow (150 ms in charge_card), the others
 * return at once. It prints "mode=M" first, then at the end
 * "slow NAME K", K the requests it measured itself (around the span) at
 * 100 ms or more (on a loaded machine, a request that does nothing can
 * wait that long for a CPU), and "done".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef USE_LIB
#include "libspanwatch.h"
#else
#include "spanwatch.h"
static struct spanwatch sw;
#endif

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

__attribute__((noinline)) static void charge_card(int slow)
{
	if (slow)
		sleep_ms(150);
	__asm__ volatile("" ::: "memory");
}

/* One request, timed as a span. */
__attribute__((noinline)) static void handle_checkout(const char *name, int i)
{
#ifdef USE_LIB
	uint64_t mono = 0, real = 0;

	if (*spanwatch_lib_word() != 0) {
		mono = spanwatch_lib_monotonic_ns();
		real = spanwatch_lib_realtime_ns();
		spanwatch_lib_start(name, strlen(name), real, 0, NULL, NULL);
	}
	charge_card(i % 10 == 5);
	if (mono != 0)
		spanwatch_lib_record(name, strlen(name), spanwatch_lib_monotonic_ns() - mono, real, i % 10 == 0,
				     NULL, NULL);
#else
	struct spanwatch_span s;

	spanwatch_span_begin(&sw, &s, name);
	charge_card(i % 10 == 5);
	spanwatch_span_end(&sw, &s, i % 10 == 0);
#endif
	__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	long n, slow = 0;
	int mode;

	if (argc != 3) {
		fprintf(stderr, "usage: %s N NAME\n", argv[0]);
		return 2;
	}
	n = atol(argv[1]);
#ifdef USE_LIB
	mode = spanwatch_lib_mode();
#else
	spanwatch_open(&sw);
	mode = (int)sw.mode;
#endif
	printf("mode=%d\n", mode);
	fflush(stdout);
	for (int i = 0; i < 3000; i++) {
#ifdef USE_LIB
		if (spanwatch_lib_listening())
#else
		if (spanwatch_enabled(&sw))
#endif
			break;
		sleep_ms(10);
	}
	{
		char line[16];

		if (fgets(line, sizeof(line), stdin) == NULL)
			clearerr(stdin);
	}
	for (long i = 0; i < n; i++) {
		struct timespec a, b;

		clock_gettime(CLOCK_MONOTONIC, &a);
		handle_checkout(argv[2], (int)i);
		clock_gettime(CLOCK_MONOTONIC, &b);
		if ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) >= 100000000L)
			slow++;
	}
	printf("slow %s %ld\ndone\n", argv[2], slow);
	return 0;
}
