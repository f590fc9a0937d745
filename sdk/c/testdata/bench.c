// SPDX-License-Identifier: (Apache-2.0 OR BSD-2-Clause)
/*
 * The per-span cost of include/spanwatch.h, for sdk/c's benchmark:
 *
 *   bench N
 *
 * times N iterations of an empty function call (the floor: a call the
 * compiler cannot remove) and N spans (spanwatch_span_begin, then
 * spanwatch_span_end), and prints "empty NS", "span NS" (nanoseconds per
 * iteration) and "listening 0|1" (whether an agent listened at the end).
 * With SPANWATCH_BENCH_WAIT=1 it first waits (up to 30 s) for an agent.
 */
#include <stdio.h>
#include <stdlib.h>

#include "spanwatch.h"

static struct spanwatch sw;

__attribute__((noinline)) static void empty(const char *name)
{
	__asm__ volatile("" : : "r"(name) : "memory");
}

__attribute__((noinline)) static void span(const char *name)
{
	struct spanwatch_span s;

	spanwatch_span_begin(&sw, &s, name);
	__asm__ volatile("" : : "r"(&s) : "memory");
	spanwatch_span_end(&sw, &s, 0);
}

static uint64_t now(void) { return spanwatch_clock_ns_(CLOCK_MONOTONIC); }

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	const char *w = getenv("SPANWATCH_BENCH_WAIT");
	uint64_t t0, t1, t2;

	spanwatch_open(&sw);
	if (w && !strcmp(w, "1")) {
		struct timespec ts = {0, 10000000};

		for (int i = 0; i < 3000 && !spanwatch_enabled(&sw); i++)
			nanosleep(&ts, NULL);
	}
	t0 = now();
	for (long i = 0; i < n; i++)
		empty("bench.c");
	t1 = now();
	for (long i = 0; i < n; i++)
		span("bench.c");
	t2 = now();
	printf("empty %.2f\nspan %.2f\nlistening %d\n", (double)(t1 - t0) / n, (double)(t2 - t1) / n, spanwatch_enabled(&sw));
	return 0;
}
