/*
 * The benchmark's traced program: N start/done USDT pairs in a tight loop
 * (bench:start and bench:done, each with the iteration as argument). Prints
 * the nanoseconds per pair, timed in the process so start-up is excluded.
 * Usage: loop N
 *
 * Built with -DNOP5, each probe is "nop; nop5" as newer sys/sdt.h headers
 * emit it, so a tracer can attach to the nop5, which kernels with the
 * uprobe syscall (6.18+) turn into a call instead of a trap.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/sdt.h>

#ifdef NOP5
#undef _SDT_NOP
#define _SDT_NOP nop; .byte 0x0f; .byte 0x1f; .byte 0x44; .byte 0x00; .byte 0x00
#endif

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
