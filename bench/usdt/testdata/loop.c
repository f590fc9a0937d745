/*
 * The benchmark's traced program: N start/done USDT pairs in a tight loop
 * (bench:start and bench:done, each with the iteration as argument). Prints
 * the nanoseconds per pair, timed in the process so start-up is excluded.
 * Usage: loop N [named | named-touched | built]
 *
 * With "named", the probes are bench:nstart, whose argument points at the
 * span name (a string literal), and bench:ndone: for sources with
 * name_arg. The program never reads the string, so its page is absent
 * until a tracer faults it in; with "named-touched" it reads it first, so
 * it is resident. With "built", bench:bstart gives two pieces of a name
 * as pointer and length, (pieces, 5) and (pieces + 5, 6), for sources
 * with name_args; bench:ndone ends it.
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

	int named = argc > 2 && argv[2][0] == 'n';
	int built = argc > 2 && argv[2][0] == 'b';
	static const char name[] = "bench_named";
	/* Two pieces of a name, given as pointer and length with no NUL
	 * after either (as the JVM's method probes give them). */
	static const char pieces[] = "Benchmethod";

	if (argc > 2 && argv[2][5] == '-')
		*(volatile char *)name; /* fault the name's page in */

	clock_gettime(CLOCK_MONOTONIC, &a);
	if (built) {
		for (long i = 0; i < n; i++) {
			STAP_PROBE4(bench, bstart, pieces, 5, pieces + 5, 6);
			STAP_PROBE1(bench, ndone, i);
		}
	} else if (named) {
		for (long i = 0; i < n; i++) {
			STAP_PROBE1(bench, nstart, name);
			STAP_PROBE1(bench, ndone, i);
		}
	} else {
		for (long i = 0; i < n; i++) {
			STAP_PROBE1(bench, start, i);
			STAP_PROBE1(bench, done, i);
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}
