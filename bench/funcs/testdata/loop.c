/*
 * The benchmark's traced program: N calls of work(), a small function the
 * compiler keeps out of line, in a tight loop. Prints the nanoseconds per
 * call, timed in the process so start-up is excluded. Usage: loop N
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile long sink;

__attribute__((noipa)) long work(long x)
{
	sink += x;
	return x * 3;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	struct timespec a, b;
	long acc = 0;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		acc += work(i);
	clock_gettime(CLOCK_MONOTONIC, &b);
	sink = acc;
	printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}
