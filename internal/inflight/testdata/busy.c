/* A test program whose span never ends in time: main -> a -> b -> c -> slow,
 * built with -O0 -g -fno-omit-frame-pointer. slow runs until stdin closes,
 * either on the CPU ("spin": a busy loop), off it waking up often ("nap":
 * 5 ms sleeps in poll) or blocked throughout ("block": one read), so the
 * in-flight samplers can catch it every way. */
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int spin, block;

__attribute__((noinline)) void slow(void)
{
	struct pollfd p = {.fd = 0, .events = POLLIN};
	char buf[1];

	if (block) {
		while (read(0, buf, 1) > 0)
			;
		return;
	}
	for (;;) {
		if (spin)
			for (volatile long i = 0; i < 20000000; i++)
				;
		if (poll(&p, 1, spin ? 0 : 5) > 0)
			return;
	}
}

__attribute__((noinline)) void c(void) { slow(); }
__attribute__((noinline)) void b(void) { c(); }
__attribute__((noinline)) void a(void) { b(); }

int main(int argc, char **argv)
{
	spin = argc > 1 && strcmp(argv[1], "spin") == 0;
	block = argc > 1 && strcmp(argv[1], "block") == 0;
	printf("ready\n");
	fflush(stdout);
	a();
	return 0;
}
