/*
 * The benchmark's traced program: N start/done USDT pairs in a tight loop
 * (bench:start and bench:done, each with the iteration as argument). Prints
 * the nanoseconds per pair, timed in the process so start-up is excluded.
 * Usage: loop N
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/sdt.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++) {
		STAP_PROBE1(bench, start, i);
		STAP_PROBE1(bench, done, i);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}
