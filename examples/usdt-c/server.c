// SPDX-License-Identifier: (Apache-2.0 OR BSD-2-Clause)
/*
 * server: a C program with USDT probes, standing in for a third-party
 * service spanwatch cannot change. It "handles" requests in a loop and
 * marks each with a start/done pair of probes, plus one probe that carries
 * a duration it measured itself:
 *
 *   shop:request_start(id, route)         route: a NUL-terminated string
 *   shop:request_done(id, status)         status: 0 ok, else an HTTP code
 *   shop:cache_lookup(key, duration_ns)
 *
 * spanwatch turns them into spans with no change to this program: see
 * spanwatch.yaml. Without a tracer attached each probe is one nop.
 *
 *   make && ./server -n 0           # requests until killed
 *   ./server -n 60 -i 5             # 60 requests, 5 ms apart
 *
 * Every 3rd request is /checkout, the others /search. Every 10th checkout
 * takes 80 ms (over its 50 ms budget); every 10th search fails with 503.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void spin_us(long us)
{
	uint64_t end = now_ns() + (uint64_t)us * 1000;

	while (now_ns() < end)
		; /* on CPU, as real work would be */
}

/* cache_lookup measures itself and reports the duration in one probe. */
static __attribute__((noinline)) int cache_lookup(uint64_t key)
{
	uint64_t start = now_ns();

	spin_us(20 + (long)(key % 5) * 10);
	DTRACE_PROBE2(shop, cache_lookup, key, now_ns() - start);
	return key % 4 == 0; /* a hit */
}

static unsigned long checkouts, searches;

/* handle_request is the span: request_start to request_done. The stack
 * spanwatch captures for a slow request is taken at request_done, here. */
static __attribute__((noinline)) int handle_request(uint64_t id)
{
	const char *route = id % 3 == 0 ? "/checkout" : "/search";
	int status = 0;

	DTRACE_PROBE2(shop, request_start, id, route);
	cache_lookup(id);
	if (id % 3 == 0) {
		if (++checkouts % 10 == 0)
			spin_us(80000); /* the slow path */
		else
			usleep(1000 + (id % 3) * 500);
	} else {
		usleep(1000);
		if (++searches % 10 == 0)
			status = 503;
	}
	DTRACE_PROBE2(shop, request_done, id, status);
	return status;
}

int main(int argc, char **argv)
{
	long n = 60, interval_ms = 5, failed = 0;
	int opt;

	while ((opt = getopt(argc, argv, "n:i:")) != -1) {
		switch (opt) {
		case 'n':
			n = atol(optarg);
			break;
		case 'i':
			interval_ms = atol(optarg);
			break;
		default:
			fprintf(stderr, "usage: %s [-n REQUESTS (0: forever)] [-i INTERVAL_MS]\n", argv[0]);
			return 2;
		}
	}
	for (uint64_t id = 0; n == 0 || (long)id < n; id++) {
		if (handle_request(id) != 0)
			failed++;
		if (interval_ms > 0)
			usleep((useconds_t)interval_ms * 1000);
	}
	printf("handled %ld requests (%lu checkouts, %lu searches), %ld failed\n", n, checkouts, searches, failed);
	return 0;
}
