/* A test program whose span is just over its budget with its slow part
 * before the budget: once a byte comes on stdin, a() spins on the CPU for
 * 80 ms, then b() for 25 ms (wall time, CLOCK_MONOTONIC: the span's clock,
 * so that a loaded machine does not stretch the span), and it prints
 * "done"; it exits when stdin closes. Built with -O0 -g
 * -fno-omit-frame-pointer. */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) void spin(long long ns)
{
	long long end = now_ns() + ns;

	while (now_ns() < end)
		for (volatile int i = 0; i < 1000; i++)
			;
}

__attribute__((noinline)) void a(void) { spin(80000000LL); }
__attribute__((noinline)) void b(void) { spin(25000000LL); }

int main(void)
{
	char buf[1];

	printf("ready\n");
	fflush(stdout);
	while (read(0, buf, 1) == 1) {
		a();
		b();
		printf("done\n");
		fflush(stdout);
	}
	return 0;
}
