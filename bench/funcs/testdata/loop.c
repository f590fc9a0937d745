/*
 * The benchmark's traced program: N calls of work(), a small function the
 * compiler keeps out of line, in a tight loop. Prints the nanoseconds per
 * call, timed in the process so start-up is excluded. Usage: loop N
 * (-DPUSH_FIRST: work() begins with a push).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile long sink;

__attribute__((noipa)) long work(long x)
{
#ifdef PUSH_FIRST
	/* Built with -DPUSH_FIRST, work() saves a callee-saved register
	 * first (push %rbx), as most functions begin (a push of %rbp with
	 * frame pointers, or of the registers they use): the kernel emulates
	 * a uprobe on a push, and single-steps one on the mov this starts
	 * with otherwise. */
	__asm__ volatile("" ::: "rbx");
#endif
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
